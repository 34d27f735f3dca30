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
- NumPy's global generator (``np.random.uniform(size=...)``, ``np.random.rand(3)``, ...) likewise: an array
  draw is an array input (``torch.from_numpy`` of the glue's draw, an ``NdarrayVar``), a scalar draw a number
  as above; its metadata comes from a draw of a copy of the generator's state at trace time.
Only the module-level generators (the functions of ``random`` and ``numpy.random`` themselves) are handled,
with constant arguments.
"""
from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from ..sources import Source
from ..values import Value
from .graph import TensorVar, to_meta
from .numpy_arrays import _FROM_NUMPY

_FLOAT_DRAWS = frozenset({"random", "uniform", "triangular", "gauss", "normalvariate", "lognormvariate",
                          "expovariate", "vonmisesvariate", "gammavariate", "betavariate", "paretovariate",
                          "weibullvariate"})
_INT_DRAWS = frozenset({"randint", "randrange", "getrandbits"})
_NP_DRAWS = frozenset({"random", "rand", "randn", "random_sample", "sample", "ranf", "uniform", "normal",
                       "standard_normal", "randint", "exponential", "poisson", "binomial", "beta", "gamma",
                       "laplace", "logistic", "lognormal", "standard_exponential", "geometric", "choice"})


def _as_input(x: Any, dtype: torch.dtype | None) -> torch.Tensor:
    """A draw as the graph's input: an array by its memory, a number as a 0-dim tensor of ``dtype``."""
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    return torch.tensor(x, dtype=dtype)


class RandomDrawSource(Source):
    """A new draw of Python's or NumPy's generator, ``<fn>(*args, **kwargs)``, as a tensor (``_as_input``).
    ``n`` tells draws with equal arguments apart: each is its own graph input, drawn once per call."""
    __slots__ = ("fn", "args", "kwargs", "dtype", "n")

    def __init__(self, fn: Any, args: tuple, kwargs: dict, dtype: torch.dtype, n: int):
        self.fn, self.args, self.kwargs, self.dtype, self.n = fn, args, kwargs, dtype, n

    def _expr(self, cg) -> str:
        from ..sources import literal
        parts = [literal(a, cg) for a in self.args] + [f"{k}={literal(v, cg)}" for k, v in self.kwargs.items()]
        return f"{cg.bind(_as_input, 'draw_input')}({cg.bind(self.fn, 'random_' + self.fn.__name__)}" \
               f"({', '.join(parts)}), {cg.bind(self.dtype, 'dtype')})"

    def name_hint(self) -> str:
        return f"random_{self.fn.__name__}"

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)


def call(d, f, fn: Any, args: list[Value], kwargs: dict[str, Value]) -> Value | None:
    """A draw of a module-level generator as a graph input, or None where this does not apply."""
    recv = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", "")
    if recv is None or recv is not getattr(random, "_inst", None) and recv is not getattr(np.random, "mtrand")._rand:
        return None
    numpy = recv is not random._inst
    if name not in (_NP_DRAWS if numpy else _FLOAT_DRAWS | _INT_DRAWS):
        return None
    from ..objects import all_const
    if not all_const(args, kwargs):
        return None
    pa = tuple(a.as_python() for a in args)
    pk = {k: v.as_python() for k, v in kwargs.items()}
    if numpy:
        state = np.random.RandomState()
        state.set_state(np.random.get_state())
        example = getattr(state, name)(*pa, **pk)       # the draw's kind, dtype and shape (a copy's state)
    else:
        example = 0.5 if name in _FLOAT_DRAWS else 2
    if isinstance(example, np.ndarray) and example.dtype not in _FROM_NUMPY:
        return None
    is_float = isinstance(example, (float, np.floating))
    if not isinstance(example, np.ndarray) and not is_float:
        from .unbacked import _enabled, _SCALAR_OPTION
        if not isinstance(example, (int, np.integer)) or not _enabled(d, _SCALAR_OPTION):
            return None         # at a graph break, as before (the draw runs natively)
    dtype = None if isinstance(example, np.ndarray) else torch.float64 if is_float else torch.int64
    st = d.torch
    st.n_random = getattr(st, "n_random", 0) + 1
    src = RandomDrawSource(fn, pa, pk, dtype, st.n_random)
    d.cg.hoist(src)         # drawn once per call: the graph call's error path reuses the value
    real = _as_input(example, dtype)
    node = st.placeholder(src, real)
    node.meta["example_value"] = to_meta(real)
    node.meta["ember_device"] = real.device
    t = TensorVar(node, to_meta(real), real.device)
    if isinstance(example, np.ndarray):
        from .numpy_arrays import NdarrayVar
        return NdarrayVar(t)
    if is_float:
        from .float_item import FloatItemVar
        return FloatItemVar(t)
    return d.call_method(f, t, "item", [], {})
