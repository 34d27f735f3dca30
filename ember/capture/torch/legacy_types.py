"""Calls of torch's legacy tensor types (``torch.LongTensor(data)``, ``torch.FloatTensor(2, 3)``,
``torch.Tensor``).

Each legacy type (``torch.tensortype``: ``torch.FloatTensor``, ``torch.cuda.HalfTensor``, ...) names a dtype
and a device. Called with one list or tuple it copies that data, as ``torch.tensor(data, dtype=...)``
does (items converted the same way: ``torch.LongTensor([1.7])`` is ``[1]``); called with ints or a
``torch.Size`` it makes an uninitialized tensor of that size, as ``torch.empty`` does; with nothing, an
empty one. ``torch.Tensor`` behaves as the legacy type of the default dtype. Anything else (a tensor, a
storage, keywords) stays a graph break, with the reason.
"""
from __future__ import annotations

from typing import Any

import torch

from ..values import Const, ListVar, TupleVar, Value

_LEGACY_TYPE = type(torch.FloatTensor)


def is_legacy_constructor(fn: Any) -> bool:
    return fn is torch.Tensor or (type(fn) is _LEGACY_TYPE and not getattr(fn, "is_sparse", False))


def call_legacy_constructor(d, f, fn: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    name = "Tensor" if fn is torch.Tensor else fn.__name__
    if kwargs:
        raise d.unsupported(f, f"torch.{name}(...) with keyword arguments inside compiled code",
                            "use a factory function such as torch.tensor or torch.empty")
    if fn is torch.Tensor:      # the default dtype (read, and guarded, as the trace reads it), default device
        opts = {"dtype": d.call(f, Const(torch.get_default_dtype), [], {})}
    else:
        opts = {"dtype": Const(fn.dtype), "device": Const("cuda" if fn.is_cuda else "cpu")}
    if len(args) == 1 and isinstance(args[0], (ListVar, TupleVar)):
        return d.call(f, Const(torch.tensor), [args[0]], opts)
    if len(args) == 1 and type(args[0]) is Const and type(args[0].value) in (list, tuple):
        return d.call(f, Const(torch.tensor), [args[0]], opts)
    if len(args) == 1 and type(args[0]) is Const and type(args[0].value) is torch.Size:
        return d.call(f, Const(torch.empty), [args[0]], opts)
    if all(a.python_type() is int for a in args):
        return d.call(f, Const(torch.empty), list(args) or [Const(0)], opts)
    raise d.unsupported(f, f"torch.{name}(...) of a {args[0].describe()} inside compiled code",
                        "use a factory function such as torch.tensor, torch.as_tensor or torch.empty")
