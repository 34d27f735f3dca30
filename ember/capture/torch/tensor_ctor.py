"""``torch.tensor(data)`` / ``torch.as_tensor(data)`` of nested lists that hold values of the graph.

Eager reads each item of ``data`` as a Python number (a one-element tensor by its ``item()``, an ndarray as a
sub-array) and infers the dtype from the items' kinds. Items known only when the graph runs (a float or int
read with ``.item()``, a symbolic size or float, a tensor, an array made from a tensor) could not be graph
constants, so the call was a graph break. Here the call becomes tensor ops: each item a tensor of the result's
dtype (0-dim for numbers), stacked level by level, detached (the result is a new leaf, as eager's).

The result's dtype and shape, and eager's errors for ragged lists or many-element tensors, come from running
the real ``torch.tensor`` on stand-ins of the same kinds and shapes, so they are eager's by construction.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..interpreter import UserException
from ..values import Const, ListVar, TupleVar, Value
from .graph import TensorVar

_NP_DTYPE = {torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16,
             torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8,
             torch.uint8: np.uint8, torch.bool: np.bool_, torch.complex64: np.complex64,
             torch.complex128: np.complex128}


def _kind(v: Value) -> str | None:
    """How eager reads an item: 'const', 'float', 'int', 'tensor' (one element), 'array', or None (not
    handled here)."""
    n = type(v).__name__
    if n == "Const":
        return "const" if type(v.value) in (int, float, bool, complex) else None
    if n in ("FloatItemVar", "SymFloatVar"):
        return "float"
    if n == "SymNumVar":
        return "int"
    if n == "TensorVar":
        return "tensor"
    if n == "NdarrayVar":
        return "array" if v.t.meta.dtype in _NP_DTYPE else None
    return None


def _stand_in(v: Value) -> Any:
    """A real object eager reads as it reads ``v`` (same kind, dtype and shape), or raises LookupError."""
    if type(v) in (ListVar, TupleVar):
        return [_stand_in(x) for x in v.items]
    k = _kind(v)
    if k is None:
        raise LookupError(v)
    if k == "const":
        return v.value
    if k == "float":
        return 0.5
    if k == "int":
        return 2
    if k == "tensor":
        return torch.zeros(v.meta.shape, dtype=v.meta.dtype)
    return np.zeros(tuple(v.t.meta.shape), dtype=_NP_DTYPE[v.t.meta.dtype])


def _only_consts(v: Value) -> bool:
    if type(v) in (ListVar, TupleVar):
        return all(_only_consts(x) for x in v.items)
    return type(v) is Const


def call(d, f, fn: Any, args: list[Value], kwargs: dict[str, Value]) -> Value | None:
    """The call as tensor ops, or None where it does not apply (constants only, other arguments)."""
    if fn not in (torch.tensor, torch.as_tensor) or len(args) != 1 or type(args[0]) not in (ListVar, TupleVar):
        return None
    if set(kwargs) - {"dtype", "device", "requires_grad"} or _only_consts(args[0]):
        return None
    opts = {}
    for k, v in kwargs.items():
        if type(v) is not Const:
            return None
        opts[k] = v.value
    if opts.pop("requires_grad", False):
        return None         # a new leaf that requires grad: refused where ops.record says why
    try:
        standin = _stand_in(args[0])
    except LookupError:
        return None
    try:
        example = torch.tensor(standin, dtype=opts.get("dtype"))
    except Exception as e:      # noqa: BLE001  (a ragged list, a many-element tensor: eager's own error)
        raise UserException(e) from None
    out = _build(d, f, args[0], example.dtype)
    device = opts.get("device")
    if device is not None and torch.device(device) != out.device:
        out = _rec(d, f, "call_method", "to", [out, Const(torch.device(device))])
    return out


def _rec(d, f, kind: str, target: Any, args: list[Value], kwargs: dict | None = None) -> Value:
    from .ops import record
    return record(d, f, kind, target, args, kwargs or {})


def _build(d, f, v: Value, dt: torch.dtype) -> TensorVar:
    if type(v) in (ListVar, TupleVar):
        parts = [_build(d, f, x, dt) for x in v.items]
        return _rec(d, f, "call_function", torch.stack, [ListVar(parts)])
    k = _kind(v)
    if k == "const":
        return _rec(d, f, "call_function", torch.tensor, [v], {"dtype": Const(dt)})
    if k in ("float", "int"):
        t = v.t if type(v).__name__ == "FloatItemVar" else \
            _rec(d, f, "call_function", torch.full, [TupleVar([]), v], {"dtype": Const(torch.float64 if k == "float" else torch.int64)})
        return _rec(d, f, "call_method", "to", [t, Const(dt)])
    t = v.t if k == "array" else v
    t = _rec(d, f, "call_method", "detach", [t])
    if k == "tensor":
        t = _rec(d, f, "call_method", "reshape", [t, TupleVar([])])
    return _rec(d, f, "call_method", "to", [t, Const(dt)])
