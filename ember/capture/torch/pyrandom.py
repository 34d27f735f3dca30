"""Python's ``random`` module inside the graph: ``random.random()``, ``random.uniform(a, b)``, ``random.randint``...

Eager draws a new number on every call and advances Python's generator. Baked into the trace as a constant,
every compiled call returned the first call's number; run at a graph break, ``fullgraph=True`` refused it. As
torch.compile does, ember makes each draw a graph input that the glue draws on every call, after the guards
passed and before the graph runs, in the program's order, with the same arguments: the numbers and the
generator's state after the call are eager's. (A draw sits between two graph breaks only if its segment's
other work is tensor work: nothing else in a segment touches Python's generator, and a ``random.seed`` /
``setstate`` call is a graph break that ends the segment.)

- a float draw (``random``, ``uniform``, ``gauss``, ...) is a float64 0-dim graph input used as the float it
  is (``float_item.FloatItemVar``): arithmetic and tensor operands stay in the graph; what needs its value in
  Python (a branch) is a graph break;
- an int draw (``randint``, ``randrange``, ``getrandbits``) is an int64 0-dim graph input read as an unbacked
  int (``unbacked.item``), where option ``capture_scalar_outputs`` allows one (on under ``fullgraph=True``);
  otherwise it runs at a graph break as before.
Only the module-level generator (the functions of ``random`` itself) is handled, with constant arguments.
"""
from __future__ import annotations

import random
from typing import Any

import torch

from ..sources import Source
from ..values import Value
from .graph import TensorVar, _as_scalar_tensor, to_meta

_FLOAT_DRAWS = frozenset({"random", "uniform", "triangular", "gauss", "normalvariate", "lognormvariate",
                          "expovariate", "vonmisesvariate", "gammavariate", "betavariate", "paretovariate",
                          "weibullvariate"})
_INT_DRAWS = frozenset({"randint", "randrange", "getrandbits"})


class RandomDrawSource(Source):
    """A new draw of Python's generator, ``random.<name>(*args, **kwargs)`` as a 0-dim tensor of ``dtype``.
    ``n`` tells draws with equal arguments apart: each is its own graph input, drawn once per call."""
    __slots__ = ("fn", "args", "kwargs", "dtype", "n")

    def __init__(self, fn: Any, args: tuple, kwargs: dict, dtype: torch.dtype, n: int):
        self.fn, self.args, self.kwargs, self.dtype, self.n = fn, args, kwargs, dtype, n

    def _expr(self, cg) -> str:
        from ..sources import literal
        parts = [literal(a, cg) for a in self.args] + [f"{k}={literal(v, cg)}" for k, v in self.kwargs.items()]
        return f"{cg.bind(_as_scalar_tensor, 'scalar_tensor')}({cg.bind(self.fn, 'random_' + self.fn.__name__)}" \
               f"({', '.join(parts)}), {cg.bind(self.dtype, 'dtype')})"

    def name_hint(self) -> str:
        return f"random_{self.fn.__name__}"

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)


def call(d, f, fn: Any, args: list[Value], kwargs: dict[str, Value]) -> Value | None:
    """A draw of the module-level generator as a graph input, or None where this does not apply."""
    if getattr(fn, "__self__", None) is not getattr(random, "_inst", None):
        return None
    name = getattr(fn, "__name__", "")
    if name not in _FLOAT_DRAWS and name not in _INT_DRAWS:
        return None
    from ..objects import all_const
    if not all_const(args, kwargs):
        return None
    if name in _INT_DRAWS:
        from .unbacked import _enabled, _SCALAR_OPTION
        if not _enabled(d, _SCALAR_OPTION):
            return None         # at a graph break, as before (the draw runs natively)
    pa = tuple(a.as_python() for a in args)
    pk = {k: v.as_python() for k, v in kwargs.items()}
    dtype = torch.float64 if name in _FLOAT_DRAWS else torch.int64
    st = d.torch
    st.n_random = getattr(st, "n_random", 0) + 1
    src = RandomDrawSource(fn, pa, pk, dtype, st.n_random)
    d.cg.hoist(src)         # drawn once per call: the graph call's error path reuses the value
    example = torch.zeros((), dtype=dtype)
    node = st.placeholder(src, example)
    node.meta["example_value"] = to_meta(example)
    node.meta["ember_device"] = example.device
    t = TensorVar(node, to_meta(example), example.device)
    if name in _FLOAT_DRAWS:
        from .float_item import FloatItemVar
        return FloatItemVar(t)
    return d.call_method(f, t, "item", [], {})
