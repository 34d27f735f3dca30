"""Lowerings of scatters: ``scatter``, ``scatter_add`` and ``index_put`` (so also ``x[idx] = v``,
``x[idx] += v`` and the embedding's backward) as ``Scatter`` nodes of the loop IR.

A scatter is two nodes: its *target*, a pointwise buffer computed for it alone (a copy of the tensor scattered
into, or zeros), then the ``Scatter`` node that writes the source's points into that memory, at positions read
from the index tensors. Accumulating scatters add atomically (two points may hit one address), in float32 for
16-bit floats (like eager's CUDA kernels, which sum in float): the target is then a float32 buffer cast back
once every point is in. Where that cannot be done (an integer or boolean dtype without atomic adds,
deterministic algorithms requested, a boolean mask with many values), the prim stays an ATen call.

A boolean-mask ``index_put`` with one value (``x[mask] = 0``) is a ``where``, not a scatter.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import sympy
import torch

from .expr import Const, Op, cast, indirect_symbol, xvars
from .ir import Layout, Pointwise, Scatter
from .lowering_table import UseExtern, register_lowering  # ``Lowerer`` in annotations: lower.py's
from .lowerings import advanced_index
from .values import TV, buffer_view

# dtypes whose adds are atomic in Triton and C++ (``#pragma omp atomic``); 16-bit floats accumulate in float32
ATOMIC_ADD_DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64)
WIDENED = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def scatter_into(L: Lowerer, init: TV, ranges: tuple, position: Callable[[list], tuple[list, dict]],
                 values: TV, accumulate: bool) -> TV:
    """``init`` with, for every point ``p`` of ``ranges``, ``values[p]`` stored (or added) at ``position(p)``:
    ``(xidx, {dim: index value})``, the indices of ``init``'s plain dims and the loaded ones of the others."""
    shape, dt = tuple(init.shape), init.dtype
    if not all(isinstance(s, int) for s in shape):
        raise UseExtern("a scatter into a tensor of symbolic size")
    if 0 in ranges:
        return init
    work = WIDENED.get(dt, dt) if accumulate else dt
    if accumulate and work not in ATOMIC_ADD_DTYPES:
        raise UseExtern(f"no atomic add for {dt}")
    if accumulate and dt.is_floating_point and torch.are_deterministic_algorithms_enabled():
        raise UseExtern("deterministic algorithms: atomic adds sum in no fixed order")
    layout = Layout.contiguous(shape, work, init.device)
    target = L.new_name()
    L.nodes.append(Pointwise(target, layout, shape, cast(init.loader(xvars(len(shape))), work)))
    idx = xvars(len(ranges))
    xidx, dim_values = position(idx)
    xidx = list(xidx)
    binds, inside = [], []
    for d, val in dim_values.items():
        s = indirect_symbol()
        xidx[d] = s
        binds.append((s, val, shape[d]))
        inside += [sympy.Ge(s, 0), sympy.Lt(s, shape[d])]
    name = L.new_name()
    L.nodes.append(Scatter(name, layout, tuple(ranges), cast(values.loader(idx), work), target, tuple(binds),
                           layout.index(xidx), sympy.And(*inside) if inside else None, accumulate))
    out = buffer_view(name, layout)
    if work == dt:
        return out
    return TV(shape, dt, init.device, lambda i: cast(out.loader(i), dt))


def _scatter(accumulate: bool) -> Any:
    def lowering(L: Lowerer, x: TV, dim: int, index: TV, src: TV) -> TV:
        if x.ndim == 0 or index.ndim != x.ndim:
            raise UseExtern("a scatter into a scalar")

        def position(idx: list) -> tuple[list, dict]:
            return list(idx), {dim: index.loader(idx)}
        return scatter_into(L, x, tuple(index.shape), position,
                            TV(tuple(index.shape), src.dtype, src.device, src.loader), accumulate)
    return lowering


register_lowering("scatter")(_scatter(False))
register_lowering("scatter_add")(_scatter(True))


@register_lowering("index_put")
def _index_put(L: Lowerer, x: TV, indices: Sequence[Any], values: TV, accumulate: bool = False) -> TV:
    masked = _masked_fill(x, indices, values, accumulate)
    if masked is not None:
        return masked
    shape, position = advanced_index(x, indices)
    off = len(shape) - values.ndim
    if off < 0:
        raise UseExtern("values with more dims than the indexed result")

    def value(idx: Sequence) -> Any:
        return values.loader([0 if values.shape[k] == 1 else idx[off + k] for k in range(values.ndim)])
    return scatter_into(L, x, shape, position, TV(shape, values.dtype, values.device, value), accumulate)


def _masked_fill(x: TV, indices: Sequence[Any], values: TV, accumulate: bool) -> TV | None:
    """``x[mask] = v`` (or ``+= v``) with one value ``v`` and one boolean mask over x's leading dims: a
    ``where``. None for other index_puts."""
    if len(indices) != 1 or indices[0] is None or indices[0].dtype not in (torch.bool, torch.uint8):
        return None
    mask = indices[0]
    if tuple(mask.shape) != tuple(x.shape[:mask.ndim]) or any(s != 1 for s in values.shape):
        raise UseExtern("a boolean mask with a value per selected point")
    zero = [0] * values.ndim

    def load(idx: Sequence) -> Any:
        m = mask.loader(list(idx[:mask.ndim]))
        if m.dtype != torch.bool:
            m = Op("ne", (m, Const(0, m.dtype)), torch.bool)
        old = x.loader(idx)
        v = cast(values.loader(zero), x.dtype)
        new = Op("add", (old, v), x.dtype) if accumulate else v
        return Op("where", (m, new, old), x.dtype)
    return TV(tuple(x.shape), x.dtype, x.device, load)


__all__ = ["scatter_into", "ATOMIC_ADD_DTYPES"]


# -- sums of accumulations into zeros ---------------------------------------------------------------------
def fold_zero_scatter_adds(gm: Any) -> int:
    """Rewrite ``add(x, index_put(zeros, idx, v, accumulate=True))`` (either operand order) as
    ``index_put(x, idx, v, accumulate=True)`` where ``x`` has the sum's shape and dtype and the accumulation has
    no other reader: the same sum, without a zero-filled buffer per term. Autograd's sums of the gradients of
    several gathers of one tensor (``x[tok_e]`` for each expert of a mixture of experts: one
    ``index_put(zeros, tok_e, g_e)`` per expert, then their sum) become one chain of scatters into the first
    term, which ``inplace.scatter_into_dead_source`` then runs in one buffer. Returns how many adds went."""
    graph, done = gm.graph, 0
    for node in list(graph.nodes):
        if not _is_prim(node, "add") or len(node.args) != 2 or node.kwargs:
            continue
        for x, acc in (node.args, node.args[::-1]):
            if not (isinstance(x, type(node)) and _zero_accumulation(acc) and _same_value_kind(x, node) and
                    _same_value_kind(acc, node)):
                continue
            chain = _zeros_chain(acc.args[0])
            with graph.inserting_before(node):
                new = graph.call_function(acc.target, (x, *acc.args[1:]), dict(acc.kwargs))
            new.meta = dict(node.meta)
            node.replace_all_uses_with(new)
            graph.erase_node(node)
            graph.erase_node(acc)
            for z in chain:             # the view_of nodes, then the fill
                graph.erase_node(z)
            done += 1
            break
    if done:
        gm.recompile()
    return done


def _is_prim(node: Any, name: str) -> bool:
    from ember.decomp.core import Prim
    return getattr(node, "op", None) == "call_function" and isinstance(node.target, Prim) and \
        node.target.name == name


def _zero_accumulation(n: Any) -> bool:
    """``index_put(full(0), idx, v, True)`` read by one node only, its zeros by it alone."""
    if not _is_prim(n, "index_put") or len(n.users) != 1:
        return False
    accumulate = n.kwargs.get("accumulate", n.args[3] if len(n.args) > 3 else False)
    chain = _zeros_chain(n.args[0])
    if accumulate is not True or not chain:
        return False
    zeros = chain[-1]
    value = zeros.kwargs.get("value", zeros.args[1] if len(zeros.args) > 1 else None)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0


def _zeros_chain(n: Any) -> list:
    """``[view_of..., full]`` when ``n`` is a fill seen through ``view_of`` (functionalization's view of a
    ``zeros_like`` written in place), each read by the next alone; else []."""
    chain = []
    while _is_prim(n, "view_of") and len(n.users) == 1:
        chain.append(n)
        n = n.args[0]
    return chain + [n] if _is_prim(n, "full") and len(n.users) == 1 else []


def _same_value_kind(a: Any, b: Any) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val")
    return va is not None and vb is not None and hasattr(va, "shape") and hasattr(vb, "shape") and \
        tuple(va.shape) == tuple(vb.shape) and va.dtype == vb.dtype and \
        str(getattr(va, "device", "")) == str(getattr(vb, "device", ""))
