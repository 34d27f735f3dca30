"""Data-dependent ATen ops on ember's fake tensors: outputs with unbacked sizes (``u<k>``, ``ember.shapes``).

``nonzero``, ``index`` with a boolean mask, ``masked_select``, ``_unique2`` and ``_local_scalar_dense`` (``item``)
have no meta kernel: their output size depends on values. In a graph with a symbol table (capture made one for
the data-dependent ops it recorded), each call gets a fresh unbacked symbol for that size, so the trace goes on
with symbolic sizes; the traced graph computes the op itself at run time, and whatever reads the size reads it
from the op's result (``ember.autograd.symnodes``: ``sym_size(nonzero, 0)``, or the ``item`` node itself).

``RULES`` maps an ATen op name to ``rule(table, args, kwargs) -> meta output``; an op without a table or rule
stays refused (``fake._check_supported``).
"""
from __future__ import annotations

from typing import Any, Callable

import weakref

import sympy
import torch
from torch.utils._python_dispatch import _disable_current_modes

RULES: dict[str, Callable] = {}


def rule(*names: str):
    def deco(fn):
        for n in names:
            RULES[n] = fn
        return fn
    return deco


def _numel(t: torch.Tensor) -> int | None:
    n = 1
    for s in t.shape:
        if isinstance(s, torch.SymInt):
            return None
        n *= int(s)
    return n


def _empty(table, sizes: list, dtype: torch.dtype) -> torch.Tensor:
    """A contiguous meta tensor of ``sizes`` (ints, sympy expressions or SymInts)."""
    exprs = [s.node.expr if isinstance(s, torch.SymInt) else sympy.sympify(s) for s in sizes]
    strides, acc = [], sympy.Integer(1)
    for e in reversed(exprs):
        strides.append(acc)
        acc = acc * e
    with _disable_current_modes():
        return torch.empty_strided([table.symint(e) for e in exprs], [table.symint(e) for e in reversed(strides)],
                                   dtype=dtype, device="meta")


def _new(table, what: str, t: torch.Tensor) -> sympy.Symbol:
    return table.new_unbacked(f"{what} (ember AOT)", lo=0, hi=_numel(t))


def _count(table, what: str, t: torch.Tensor) -> sympy.Symbol:
    """The symbol for the number of nonzero elements of ``t``: one per tensor (and version) of the trace, so
    ``y[m]``, ``z[m] = v`` and the backward's ``grad[m]`` of one mask agree on their size by construction
    (a fresh symbol per call made index_put's shape check ``u2 == u1`` undecidable)."""
    memo = table.__dict__.setdefault("_nonzero_counts", {})
    hit = memo.get(id(t))
    if hit is not None and hit[0]() is t and hit[1] == t._version:
        return hit[2]
    u = _new(table, what, t)
    memo[id(t)] = (weakref.ref(t), t._version, u)
    return u


@rule("aten::nonzero", "aten::argwhere")
def _nonzero(table, args, kwargs):
    x = args[0]
    return _empty(table, [_count(table, "nonzero", x), x.dim()], torch.int64)


@rule("aten::masked_select")
def _masked_select(table, args, kwargs):
    x, mask = args[0], args[1]
    shape = torch.broadcast_shapes(x.shape, mask.shape) if not any(
        isinstance(s, torch.SymInt) for s in (*x.shape, *mask.shape)) else x.shape
    probe = _empty(table, list(shape), x.dtype)
    return _empty(table, [_new(table, "masked_select", probe)], x.dtype)


@rule("aten::index")
def _mask_index(table, args, kwargs):
    """``x[mask]`` (``aten.index(x, [mask])``): ``(u, *x.shape[mask.dim():])``; other index lists refused."""
    x, indices = args[0], args[1]
    if len(indices) != 1 or indices[0] is None or indices[0].dtype not in (torch.bool, torch.uint8):
        return None
    mask = indices[0]
    return _empty(table, [_count(table, "x[mask]", mask), *x.shape[mask.dim():]], x.dtype)


@rule("aten::_unique2")
def _unique2(table, args, kwargs):
    x = args[0]
    inverse = kwargs.get("return_inverse", args[2] if len(args) > 2 else False)
    counts = kwargs.get("return_counts", args[3] if len(args) > 3 else False)
    u = _new(table, "unique", x)
    return (_empty(table, [u], x.dtype),
            _empty(table, list(x.shape) if inverse else [0], torch.int64),
            _empty(table, [u] if counts else [0], torch.int64))


@rule("aten::unique_dim")
def _unique_dim(table, args, kwargs):
    """``unique_dim(x, dim, sorted, return_inverse, return_counts)``: ``x``'s sizes with the number of distinct
    slices at ``dim``; the inverse ``(x.shape[dim],)`` and counts ``(u,)`` (empty when not asked for)."""
    x, dim = args[0], args[1] % max(args[0].dim(), 1)
    inverse = kwargs.get("return_inverse", args[3] if len(args) > 3 else False)
    counts = kwargs.get("return_counts", args[4] if len(args) > 4 else False)
    n = x.shape[dim]
    u = table.new_unbacked("unique(dim) (ember AOT)", lo=0, hi=None if isinstance(n, torch.SymInt) else int(n))
    sizes = list(x.shape)
    sizes[dim] = u
    return (_empty(table, sizes, x.dtype), _empty(table, [n] if inverse else [0], torch.int64),
            _empty(table, [u] if counts else [0], torch.int64))


@rule("aten::_local_scalar_dense")
def _item(table, args, kwargs):
    x = args[0]
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        return None
    return table.symint(table.new_unbacked("item() (ember AOT)", lo=None, hi=None))


def unbacked_meta(table, func: Any, args: tuple, kwargs: dict) -> Any:
    """The meta output of data-dependent ``func`` with unbacked sizes, or None (no table, no rule)."""
    if table is None:
        return None
    r = RULES.get(func._schema.name)
    return r(table, args, kwargs) if r is not None else None


def unbacked_in(value: Any, table) -> bool:
    """Whether ``value`` (a tensor's sizes, or a SymInt) holds a symbol of ``table.unbacked``."""
    if table is None or not table.unbacked:
        return False
    vals = value.shape if isinstance(value, torch.Tensor) else (value,)
    return any(isinstance(v, torch.SymInt) and v.node.expr.free_symbols & table.unbacked for v in vals)


def _unbacked_of(value: Any, table) -> set:
    """The unbacked symbols in ``value``'s sizes and strides: a fake tensor's (``SymInt``s), or a prim's
    ``TensorMeta``'s (sympy expressions), as an ATen node's inputs are either once the nodes before it were
    decomposed (a ``SymInt``-only reading made every op after a decomposed one look data-dependent)."""
    out: set = set()
    vals = value if isinstance(value, (tuple, list)) else (value,)
    for v in vals:
        if isinstance(v, torch.Tensor):
            sizes = (*v.shape, *v.stride())
        elif hasattr(v, "shape") and hasattr(v, "stride"):        # ember.decomp.meta.TensorMeta
            sizes = (*v.shape, *(v.stride() if callable(v.stride) else v.stride))
        else:
            sizes = (v,)
        for s in sizes:
            if isinstance(s, torch.SymInt):
                out |= s.node.expr.free_symbols & table.unbacked
            elif isinstance(s, sympy.Basic):
                out |= s.free_symbols & table.unbacked
    return out


def introduces_unbacked(node: Any, table) -> bool:
    """Whether FX ``node`` is a data-dependent op: its value has unbacked symbols none of its inputs has. Such
    a node stays an ATen call (its decomposition's meta rules cannot know the size); the wrapper reads the
    size from its result."""
    if table is None or not table.unbacked:
        return False
    mine = _unbacked_of(node.meta.get("val"), table)
    if not mine:
        return False
    from torch.utils._pytree import tree_flatten
    seen: set = set()
    for a in tree_flatten((node.args, node.kwargs))[0]:
        if hasattr(a, "meta"):
            seen |= _unbacked_of(a.meta.get("val"), table)
    return bool(mine - seen)


def table_with_unbacked(gm: Any) -> Any:
    """The symbol table of a traced graph if some node's value has an unbacked size, else None."""
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        vals = val if isinstance(val, (tuple, list)) else (val,)
        for v in vals:
            sizes = v.shape if isinstance(v, torch.Tensor) else (v,)
            for s in sizes:
                if isinstance(s, torch.SymInt) and s.node.table.unbacked and \
                        s.node.expr.free_symbols & s.node.table.unbacked:
                    return s.node.table
    return None
