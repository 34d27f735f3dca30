"""Aligned operands for large matmuls on the GPU (what Inductor's pad_mm is for).

cuBLAS picks its fast kernels only when the matrices' rows are 16-byte aligned and the output's columns and
the inner dimension are multiples of 8 (bf16/fp16) or 4 (fp32). GPT-2's vocabulary of 50257 breaks that for
the LM head and both its gradients, which then ran "align1" kernels 3-7x slower than aligned ones
(bench/mm_alignment.py (in git history): 3.3 ms against 0.45 ms on an H100; an aligned row stride alone does not help).

So for mm/addmm/bmm on CUDA with enough work (and, for float32, a computed right operand written row-major:
``align_matmul``):
- a misaligned inner dimension K is padded with zeros in both operands (the products gain zero terms);
- misaligned output columns N are padded with zeros in the second operand (and the bias); the result is a
  view of the first N columns of the padded product. A forward or inference graph returns that view as it is
  (its rows keep the padded stride, as torch.compile's pad_mm returns them: copying GPT-2's logits back to
  eager's layout would cost half the matmul's time again); a backward graph copies a gradient into eager's
  layout;
- an operand whose rows are still misaligned (a view with an odd row stride) is copied into aligned rows.
A padded operand computed by a kernel costs nothing extra: that kernel writes the padded buffer, in the
operand's own dimension order (a transposed weight is padded without transposing it).

A value with several users, one of them such a matmul (the LM head's gradient of the logits, which feeds
both gradient matmuls, one of them through a transpose), is stored once, zero-padded, at its definition
(``padded_for_matmuls``): its users read the unpadded block of that buffer, the matmul needing the padded
inner dimension takes the whole buffer and the transposed one takes its aligned rows, all as views. Before,
the value was stored unpadded and then copied once per matmul: three passes over GPT-2's gradient of the
logits (4096 x 50257) instead of one.
"""
from __future__ import annotations

from typing import Any

import torch

from .ir import BufferRef, Layout
from .lowering_table import LOWERINGS, prim_name, traced_layout
from .values import TV, buffer_view, contiguous_layout
from ember.heuristics import heuristics

ALIGN_BYTES = 16
DEVICES = {"cuda"}          # tests add "cpu" to run the same lowering there


def _round(n: int, k: int) -> int:
    return (n + k - 1) // k * k


def _aligned(lay: Layout, align: int) -> bool:
    """Whether cuBLAS can use ``lay`` as is with aligned accesses: a unit stride in one of the last two dims,
    the other dim's stride (and any batch stride) and the offset multiples of ``align``."""
    st, sh = lay.stride, lay.shape
    if not all(isinstance(v, int) for v in tuple(st) + tuple(sh)) or not isinstance(lay.offset, int):
        return True         # symbolic sizes: left as they are
    if lay.offset % align:
        return False
    if st[-1] == 1 or sh[-1] == 1:
        lead = [st[-2]] if sh[-2] > 1 else []
    elif st[-2] == 1 or sh[-2] == 1:
        lead = [st[-1]]
    else:
        return False
    lead += [s for s, n in zip(st[:-2], sh[:-2]) if n > 1]
    return all(s % align == 0 for s in lead)


def _column_major(lay: Layout) -> bool:
    """A matrix (or batch of them) stored by columns: a transposed view of a row-major one."""
    st, sh = lay.stride, lay.shape
    return len(sh) >= 2 and sh[-1] > 1 and sh[-2] > 1 and st[-2] == 1 and st[-1] != 1


def _padded_layout(lay: Layout, align: int) -> Layout:
    """``lay``'s shape with rows (or columns, for a column-major matrix) padded to ``align`` elements."""
    *batch, r, c = lay.shape
    col_major = lay.stride[-2] == 1 and lay.stride[-1] != 1 and r > 1
    if col_major:
        inner = (1, _round(r, align))
        mat = c * inner[1]
    else:
        inner = (_round(c, align), 1)
        mat = r * inner[0]
    stride: list[int] = []
    for n in reversed(batch):
        stride.insert(0, mat)
        mat *= n
    return Layout(tuple(lay.shape), tuple(stride) + inner, lay.dtype, lay.device, 0)


def _dense_like(lay: Layout, shape: tuple) -> Layout:
    """A dense layout of ``shape`` with ``lay``'s dimension order (a padded copy of a transposed operand stays
    transposed, so the copy reads and writes along the same dimension)."""
    order = sorted(range(len(shape)), key=lambda d: (-lay.stride[d], -d))
    stride = [0] * len(shape)
    step = 1
    for d in reversed(order):
        stride[d] = step
        step *= shape[d]
    return Layout(tuple(shape), tuple(stride), lay.dtype, lay.device, 0)


def _current_layout(x: TV, meta: Any) -> Layout:
    if x.view is not None:
        return x.view[1]
    return traced_layout(x, meta) or contiguous_layout(x)


def _pad_to(L: Any, x: TV, sizes: tuple) -> TV:
    """``x`` with zeros appended in its last dims up to ``sizes`` (the same TV when nothing is added)."""
    lead = x.ndim - len(sizes)
    pads = [(0, 0)] * lead + [(0, n - x.shape[lead + i]) for i, n in enumerate(sizes)]
    if all(hi == 0 for _, hi in pads):
        return x
    return LOWERINGS["pad"](L, x, pads, 0)


def _matmul_macs(mm: Any) -> int:
    a = mm.args[1 if prim_name(mm) == "addmm" else 0]
    out, av = mm.meta.get("val"), getattr(a, "meta", {}).get("val")
    if out is None or av is None or len(out.shape) != 2:
        return 0
    sizes = (out.shape[0], av.shape[-1], out.shape[1])
    return sizes[0] * sizes[1] * sizes[2] if all(isinstance(v, int) for v in sizes) else 0


def _feeds_matmul(node: Any, k: int) -> bool:
    """Whether ``node`` is a matrix operand of a large mm/addmm, directly or through reshapes that keep its last
    dimension (``k``) and a transpose."""
    for u in node.users:
        p = prim_name(u)
        if p in ("reshape", "view_of") and tuple(getattr(u.meta.get("val"), "shape", ()))[-1:] == (k,):
            if _feeds_matmul(u, k):
                return True
        elif p == "permute" and list(u.args[1]) == [1, 0]:
            if any(prim_name(v) in ("mm", "addmm") and _matmul_macs(v) >= heuristics().align_min_macs for v in u.users):
                return True
        elif p in ("mm", "addmm") and node in u.args[-2:] and _matmul_macs(u) >= heuristics().align_min_macs:
            return True
    return False


def padded_for_matmuls(L: Any, node: Any, tv: TV) -> TV | None:
    """``tv`` (the value of ``node``, whose rows are misaligned: its last dim) stored once with its rows padded
    with zeros to an aligned length, when it has several users and feeds a large matmul (as a matrix of its
    rows): the unpadded view of that buffer, which the matmuls take as is (``_padded_block``); None to store
    it as usual."""
    if tv.ndim < 2 or tv.device.type not in DEVICES or len(node.users) < 2:
        return None
    if tv.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return None
    k = tv.shape[-1]
    align = ALIGN_BYTES // tv.dtype.itemsize
    if not all(isinstance(v, int) for v in tv.shape) or k % align == 0 or not _feeds_matmul(node, k):
        return None
    kp = _round(k, align)
    pads = [(0, 0)] * (tv.ndim - 1) + [(0, kp - k)]
    shape = tuple(tv.shape[:-1]) + (kp,)
    ref = L.realize(LOWERINGS["pad"](L, tv, pads, 0), Layout.contiguous(shape, tv.dtype, tv.device))
    rows = 1
    for n in tv.shape[:-1]:
        rows *= n
    # any view of it as a matrix of rows of kp (or its transpose) is a block of this one
    L.zero_padded[ref.name] = Layout((rows, kp), (kp, 1), tv.dtype, tv.device, 0)
    return buffer_view(ref.name, Layout(tuple(tv.shape), ref.layout.stride, tv.dtype, tv.device, 0))


def _padded_block(L: Any, x: TV, sizes: tuple) -> TV | None:
    """``x``, a view of a buffer stored zero-padded (``padded_for_matmuls``), grown to ``sizes`` in its last
    dims within that buffer; None when ``x`` is not such a view or the buffer is too small."""
    if x.view is None or x.view[0] not in L.zero_padded:
        return None
    name, lay = x.view
    full = L.zero_padded[name]
    if lay.offset != 0 or len(set(full.stride)) != len(full.stride) or not set(lay.stride) <= set(full.stride):
        return None
    want = tuple(x.shape[:x.ndim - len(sizes)]) + tuple(sizes)
    if any(w > full.shape[full.stride.index(st)] for w, st in zip(want, lay.stride)):
        return None
    return buffer_view(name, Layout(want, lay.stride, lay.dtype, lay.device, 0))


def align_matmul(L: Any, name: str, impl: Any, args: tuple, kwargs: dict, arg_metas: Any) -> Any:
    """The lowering of a large CUDA mm/addmm/bmm (``impl`` runs it) with aligned sizes and rows, or None to lower
    it as a plain extern call."""
    mats = (1, 2) if name == "addmm" else (0, 1)
    a, b = args[mats[0]], args[mats[1]]
    if not (isinstance(a, TV) and isinstance(b, TV)) or a.device.type not in DEVICES:
        return None
    if a.dtype not in (torch.float16, torch.bfloat16, torch.float32) or b.dtype != a.dtype:
        return None
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if not all(isinstance(v, int) for v in (*a.shape, n)):
        return None
    if m * k * n * (a.shape[0] if a.ndim == 3 else 1) < heuristics().align_min_macs:
        return None
    align = ALIGN_BYTES // a.dtype.itemsize
    kp, np_ = _round(k, align), _round(n, align)
    traced = list(arg_metas[0]) if arg_metas is not None else [None] * len(args)
    new_args = list(args)
    for i, want in ((mats[0], (m, kp)), (mats[1], (kp, np_))):
        x = args[i]
        block = _padded_block(L, x, want) if tuple(x.shape[-2:]) != want else None
        new_args[i] = block if block is not None else _pad_to(L, x, want)
    if name == "addmm" and isinstance(args[0], TV) and args[0].shape and args[0].shape[-1] == n and np_ != n:
        new_args[0] = _pad_to(L, args[0], (np_,) if args[0].ndim == 1 else (args[0].shape[-2], np_))
    changed = kp != k or np_ != n
    for i in mats:
        x = new_args[i]
        if x is not args[i] and x.view is None:     # padded: stored in the operand's own dimension order
            src = _current_layout(args[i], traced[i] if i < len(traced) else None)
            ref = L.realize(x, _dense_like(src, tuple(x.shape)))
            new_args[i] = x = buffer_view(ref.name, ref.layout)
        lay = _current_layout(x, traced[i] if x is args[i] and i < len(traced) else None)
        if i == mats[1] and x.view is None and a.dtype == torch.float32 and _column_major(lay):
            # a float32 right operand computed here (attention's keys cast up to float32 for the scores) is
            # written row-major: cuBLAS's float32 kernels take a transposed right operand ~19% slower (bmm of
            # 96 x 512 x 64 by 64 x 512 on an H100: 125.8 against 106.0 us; bench/bmm_layouts.py (in git history)), and its
            # kernel writes either layout at the same cost. bf16/fp16 (tensor cores) do not care.
            ref = L.realize(x, Layout.contiguous(tuple(x.shape), x.dtype, x.device))
            new_args[i] = x = buffer_view(ref.name, ref.layout)
            lay, changed = ref.layout, True
        if not _aligned(lay, align):
            ref: BufferRef = L.realize(x, _padded_layout(lay, align))
            new_args[i] = buffer_view(ref.name, ref.layout)
            changed = True
    if not changed:
        return None
    out = L.extern(impl, tuple(new_args), kwargs, None, fresh=True, op=name)
    if np_ == n:
        return out
    if L.name.startswith("backward"):       # gradients keep eager's layout (AccumulateGrad's layout contract)
        L.padded_results.add(out.view[0])
    return LOWERINGS["slice"](L, out, out.ndim - 1, 0, n)


__all__ = ["align_matmul", "padded_for_matmuls", "DEVICES"]
