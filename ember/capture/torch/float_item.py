"""``t.item()`` / ``float(t)`` of a one-element floating tensor inside the graph (option ``capture_scalar_outputs``).

The value is a Python float known only when the graph runs. Where torch.compile makes it an unbacked
``SymFloat``, ember keeps it a ``FloatItemVar``: a 0-dim float64 tensor of the graph (the tensor's value,
detached, as ``item()`` returns it: a double) that behaves as the float in the program:
- Python arithmetic with numbers, symbolic ints and other such floats is float64 tensor arithmetic (the same
  IEEE double operations as Python's), giving another ``FloatItemVar``;
- an operand of a tensor op is a weak scalar (``ops.weak_floats``): cast to the dtype the op computes in, as
  eager converts a Python float;
- what needs its value in Python (a comparison, a branch, ``int()``, ``math.*``) is a graph break that says
  so; at a graph break, and when returned, it is the graph output's ``.item()``.
Its gradient is none, as eager's ``item()``: the tensor is detached.
"""
from __future__ import annotations

import torch

from .. import rules as R
from ..values import Const, TupleVar, Value
from .graph import TensorVar
from .symsize import SymNumVar

_OPTION = "capture_scalar_outputs"
_METHODS = ("item", "__float__")


class FloatItemVar(Value):
    """A Python float read from a tensor at run time: ``t`` is its 0-dim float64 tensor in the graph."""
    __slots__ = ("t",)
    op_priority = 7         # below tensors (``x * s`` is the tensor's op), above symbolic ints

    def __init__(self, t: TensorVar):
        super().__init__(None)
        self.t = t

    def python_type(self):
        return float

    def describe(self):
        return "float read from a tensor (.item()), known only when the graph runs"


def item(d, f, t: TensorVar, name: str) -> Value | None:
    """``t.item()`` / ``float(t)`` of a one-element float tensor, or None where this does not apply."""
    from .ops import record
    from .unbacked import scalar_allowed
    dt = t.meta.dtype
    # float(t) of an integer or bool tensor is the float of its value (t.item() stays an int: unbacked.item)
    if name not in _METHODS or t.meta.numel() != 1 or dt.is_complex or not (dt.is_floating_point or name == "__float__"):
        return None
    if not scalar_allowed(d, f, name):
        raise d.unsupported(f, f"Tensor.{name}() turns a tensor value into a Python float, and option {_OPTION!r} "
                               "is off", f"compile with options={{{_OPTION!r}: True}} to keep it in the graph")
    x = record(d, f, "call_method", "detach", [t], {})
    x = record(d, f, "call_method", "reshape", [x, TupleVar([])], {})
    x = record(d, f, "call_method", "to", [x, Const(torch.float64)], {})
    return FloatItemVar(x)


def _operand(v: Value) -> Value | None:
    """``v`` as an operand of the float64 arithmetic, or None (not a number this handles)."""
    t = type(v)
    if t is FloatItemVar:
        return v.t
    if t is SymNumVar or t.__name__ == "SymFloatVar" or (t is Const and type(v.value) in (int, float, bool)):
        return v
    return None


def _binary(d, f, op: str, a: Value, b: Value):
    from .ops import BINARY_FNS, record
    if type(a) is TensorVar or type(b) is TensorVar:
        return NotImplemented
    pa, pb = _operand(a), _operand(b)
    if pa is None or pb is None or op.rstrip("=") in ("@", "<<", ">>", "&", "|", "^"):
        return NotImplemented
    fn = BINARY_FNS[op[:-1] if op.endswith("=") else op]       # floats are immutable: s += 1 rebinds s
    return FloatItemVar(record(d, f, "call_function", fn, [pa, pb], {}))


def _unary(d, f, op: str, v: FloatItemVar):
    from .ops import UNARY_FNS, record
    if op not in UNARY_FNS or op == "~":
        return NotImplemented
    return FloatItemVar(record(d, f, "call_function", UNARY_FNS[op], [v.t], {}))


def _needs_value(what: str):
    def rule(d, f, *args):
        raise d.unsupported(f, f"{what} a float read from a tensor (.item()), whose value is known only when "
                               "the graph runs", "keep the computation in tensors (torch.where instead of if), "
                                                 "or move it outside the compiled function")
    return rule


def _reconstruct(glue, v: FloatItemVar) -> str:
    return f"{glue.output_ref(v.t)}.item()"


R.BINARY.register(FloatItemVar)(_binary)
R.UNARY.register(FloatItemVar)(_unary)
R.COMPARE.register(FloatItemVar)(_needs_value("comparing"))
R.TRUTH.register(FloatItemVar)(_needs_value("branching on"))
R.RECONSTRUCT.register(FloatItemVar)(_reconstruct)
