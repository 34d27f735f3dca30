"""Layout predicates of the lowering: whether a strided layout's points overlap, the memory order of a
permuted layout (static or symbolic strides), and the compact layout an expanded output is stored in."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ember.shapes import size_hint

from .indexing import same_size
from .ir import Layout, contiguous_stride
from .lowering_table import is_dense

def unexpanded(layout: Layout) -> Layout:
    """``layout`` with each stride-0 dim of size > 1 made size 1 (the memory an expanded layout addresses)."""
    if not any(isinstance(s, int) and s == 0 and n != 1 for n, s in zip(layout.shape, layout.stride)):
        return layout
    shape = tuple(1 if isinstance(s, int) and s == 0 else n for n, s in zip(layout.shape, layout.stride))
    return replace(layout, shape=shape)


def compact_expanded(layout: Layout) -> Layout | None:
    """An expanded layout whose other dims interleave (``t[3:, ::2].expand(3, 2, 2)``) stored dense over its
    distinct elements, stride 0 kept where eager's is: a later write through one expanded copy shows in all."""
    unexp = unexpanded(layout)
    if unexp is layout:
        return None
    dense = contiguous_stride(unexp.shape)
    stride = tuple(0 if n != 1 and isinstance(s, int) and s == 0 else d
                   for n, s, d in zip(layout.shape, layout.stride, dense))
    return replace(layout, stride=stride, offset=0)


def loses_expansion(have: Layout, eager: Layout) -> bool:
    """Whether ``have`` steps over memory along a dim where ``eager`` (same shape) is expanded (stride 0)."""
    return any(n != 1 and isinstance(e, int) and e == 0 and not (isinstance(h, int) and h == 0)
               for n, e, h in zip(eager.shape, eager.stride, have.stride))


def non_overlapping(layout: Layout) -> bool:
    """No two points of ``layout`` share an address (dense, or with gaps: each dim steps over the ones inside)."""
    if is_dense(layout):
        return True
    if not all(isinstance(s, int) for s in (*layout.stride, *layout.shape)):
        return False
    big = sorted((i for i, n in enumerate(layout.shape) if n != 1), key=lambda i: layout.stride[i])
    extent = 1
    for i in big:
        if layout.stride[i] < extent:
            return False
        extent = layout.stride[i] * layout.shape[i]
    return True


def storage_order(layout: Layout) -> list[int] | None:
    """The dims of a permuted layout from outermost to innermost in memory (a transposed, possibly
    row-padded buffer: a kernel writing it walks memory in this order), or None when the dims are already in
    memory order or their strides do not order them (overlaps, broadcasts, symbolic strides of no dense
    permutation)."""
    if layout.is_contiguous() or layout.offset != 0:
        return None
    if not all(isinstance(s, int) for s in layout.stride):
        return dense_order(layout)
    big = [i for i, n in enumerate(layout.shape) if n != 1]
    strides = [layout.stride[i] for i in big]
    if any(st <= 0 for st in strides) or len(set(strides)) != len(strides):
        return None
    perm = sorted(range(len(layout.shape)), key=lambda i: (-layout.stride[i], i))
    if [p for p in perm if p in big] == big:
        return None
    extent = 1
    for i in sorted(big, key=lambda i: layout.stride[i]):     # each dim must step over the ones inside it
        if layout.stride[i] < extent:
            return None
        extent = layout.stride[i] * layout.shape[i]
    return perm


def dense_order(layout: Layout) -> list[int] | None:
    """``_storage_order`` of a layout with symbolic strides: the permutation whose contiguous strides they are,
    found structurally (innermost stride 1, each next one the previous stride times its size: a channels-last
    layout of any sizes), so the order holds for every value of the symbols; None when there is none. Size-1
    dims (any stride) go where their stride's hint puts them, as in the static order."""
    big = [i for i, n in enumerate(layout.shape) if n != 1]
    order: list[int] = []
    expect: Any = 1
    while len(order) < len(big):
        nxt = next((i for i in big if i not in order and same_size(layout.stride[i], expect)), None)
        if nxt is None:
            return None
        order.append(nxt)
        expect = expect * layout.shape[nxt]
    order.reverse()
    if order == big:
        return None
    rank = {d: k for k, d in enumerate(order)}
    perm: list[int] = []
    small = sorted((i for i in range(len(layout.shape)) if i not in rank),
                   key=lambda i: (-size_hint(layout.stride[i]), i))
    for d in order:      # each size-1 dim before the first big dim whose stride's hint is not above its own
        while small and size_hint(layout.stride[small[0]]) >= size_hint(layout.stride[d]):
            perm.append(small.pop(0))
        perm.append(d)
    return perm + small
