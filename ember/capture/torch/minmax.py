"""Builtin ``min``/``max`` whose candidates include one-element tensors, kept in the graph.

Python's ``max(a, b, ...)`` walks the candidates and keeps ``x`` when ``x > best`` is true (``min``: ``<``),
so the first of equal ones wins and a NaN never replaces the best. On tensors each comparison is a tensor,
and taking its truth would be a graph break. Each step becomes ``torch.where(x > best, x, best)`` instead:
the same choice, made when the graph runs.

Only where that is exact: no ``key``/``default``; every tensor a plain ``torch.Tensor`` of one element with
a static shape, all of the same shape, dtype and ``requires_grad`` (the chosen one's metadata is then known
without the data); the numbers are ``int``/``float``/``bool`` constants that the tensors' dtype holds
exactly (a float only with a floating tensor). Otherwise the generic rule runs (a graph break on the truth
test). As with torch.compile, the result is a new tensor, not the chosen object itself (``max(a, b) is a``
does not hold).
"""
from __future__ import annotations

import builtins

import torch

from ..values import Const, ListVar, TupleVar, Value
from .graph import TensorVar

_OPS = {builtins.min: "<", builtins.max: ">"}


def call(d, f, fn, args: list, kwargs: dict) -> Value | None:
    """``min(...)``/``max(...)`` over tensors and numbers as ``torch.where`` steps, or None (not this case)."""
    try:
        op = _OPS.get(fn)
    except TypeError:
        return None
    if op is None or kwargs:
        return None
    items = list(args)
    if len(items) == 1:
        if type(items[0]) not in (ListVar, TupleVar):
            return None
        items = list(items[0].items)
    if len(items) < 2:
        return None
    if _data_dependent_ints(d, items):
        return _sym_minmax(d, fn, items)
    if not _exact(items):
        return None
    from .ops import record
    best = items[0]
    for x in items[1:]:
        c = d.compare(f, op, x, best)
        best = (x if c.value else best) if type(c) is Const else \
            record(d, f, "call_function", torch.where, [c, x, best], {})
    return best


def _exact(items: list[Value]) -> bool:
    tensors = [x for x in items if type(x) is TensorVar]
    if not tensors:
        return False
    m0 = tensors[0].meta
    for t in tensors:
        m = t.meta
        if t.cls is not torch.Tensor or t.sym is not None or m.numel() != 1 or m.shape != m0.shape \
                or m.dtype != m0.dtype or m.requires_grad != m0.requires_grad or m.is_complex():
            return False
    return all(type(x) is TensorVar or _holds(x, m0.dtype) for x in items)


def _holds(v: Value, dtype: torch.dtype) -> bool:
    """Whether ``v`` is a number constant that a tensor of ``dtype`` holds exactly."""
    if type(v) is not Const or type(v.value) not in (int, float, bool):
        return False
    if type(v.value) is float and not dtype.is_floating_point:
        return False
    try:
        return torch.tensor(v.value).to(dtype).item() == v.value
    except (OverflowError, RuntimeError):
        return False


def _data_dependent_ints(d, items: list[Value]) -> bool:
    """Ints, one of them read from tensor data (an unbacked ``u<k>``): comparing it would be a graph break."""
    from .symsize import SymNumVar
    table = d.torch.table
    if table is None or not all(type(x) is SymNumVar or (type(x) is Const and type(x.value) is int) for x in items):
        return False
    return any(type(x) is SymNumVar and x.sym.node.expr.free_symbols & table.unbacked for x in items)


def _sym_minmax(d, fn, items: list[Value]) -> Value:
    """``max(u0, 1024)`` of ints as ``torch.sym_max`` (``min``: ``sym_min``): a symbolic int whose value the
    graph computes, as torch.compile does (ints: which of equal candidates wins is not observable)."""
    from .symsize import make, operand
    op = torch.sym_max if fn is builtins.max else torch.sym_min
    best = operand(items[0])
    for x in items[1:]:
        o = operand(x)
        node = d.torch.graph.call_function(op, (best[1], o[1]))
        best = (op(best[0], o[0]), node)
    return make(d.torch, best[0], best[1])
