"""Aligned operands for large matmuls on the GPU (what Inductor's pad_mm is for).

cuBLAS picks its fast kernels only when every matrix's rows (its leading dimension) and base address are
16-byte aligned. A vocabulary of 50257 makes GPT-2's logits (4096 x 50257) and every operand derived from them
misaligned: the LM head and its two gradients then ran "align1" kernels, 3-7x slower than aligned ones.

So for mm/addmm/bmm on CUDA with enough work:
- an operand whose leading dimension or offset is misaligned is stored with its rows padded to 16 bytes (the
  same values, a gap after each row; for a computed operand the padding is free, its kernel writes there);
- a result whose row length is misaligned is written by ATen into a view of a buffer with padded rows
  (``out=``), which cuBLAS accepts as is.
Values are unchanged: no operand is padded with extra rows or columns, only the memory between rows grows.
"""
from __future__ import annotations

from typing import Any

import torch

from .ir import BufferRef, Layout
from .values import TV, buffer_view, contiguous_layout

ALIGN_BYTES = 16
MIN_MACS = 1 << 24          # smaller products: the copies would cost more than the faster kernel saves
DEVICES = {"cuda"}          # tests add "cpu" to run the same lowering there


def mm_out_ld(a: torch.Tensor, b: torch.Tensor, ld: int) -> torch.Tensor:
    """``a @ b`` written into rows of length ``ld`` (the result is a view of that buffer)."""
    out = torch.empty((a.shape[0], ld), dtype=a.dtype, device=a.device)[:, :b.shape[1]]
    return torch.mm(a, b, out=out)


def addmm_out_ld(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, ld: int, beta: Any = 1,
                 alpha: Any = 1) -> torch.Tensor:
    out = torch.empty((a.shape[0], ld), dtype=a.dtype, device=a.device)[:, :b.shape[1]]
    return torch.addmm(bias, a, b, beta=beta, alpha=alpha, out=out)


def bmm_out_ld(a: torch.Tensor, b: torch.Tensor, ld: int) -> torch.Tensor:
    out = torch.empty((a.shape[0], a.shape[1], ld), dtype=a.dtype, device=a.device)[:, :, :b.shape[2]]
    return torch.bmm(a, b, out=out)


_OUT_LD = {"mm": mm_out_ld, "addmm": addmm_out_ld, "bmm": bmm_out_ld}


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


def _current_layout(L: Any, x: TV, meta: Any) -> Layout:
    if x.view is not None:
        return x.view[1]
    from .lower import _traced_layout
    return _traced_layout(x, meta) or contiguous_layout(x)


def align_matmul(L: Any, name: str, args: tuple, kwargs: dict, meta: Any, arg_metas: Any) -> Any:
    """The lowering of a large CUDA mm/addmm/bmm with aligned operands and result, or None to lower it as
    a plain extern call."""
    mats = (1, 2) if name == "addmm" else (0, 1)
    a, b = args[mats[0]], args[mats[1]]
    if not (isinstance(a, TV) and isinstance(b, TV)) or a.device.type not in DEVICES:
        return None
    if a.dtype not in (torch.float16, torch.bfloat16, torch.float32) or b.dtype != a.dtype:
        return None
    shapes = [*a.shape, b.shape[-1]]
    if not all(isinstance(s, int) for s in shapes):
        return None
    macs = 1
    for s in shapes:
        macs *= s
    if macs < MIN_MACS:
        return None
    align = ALIGN_BYTES // a.dtype.itemsize
    traced = list(arg_metas[0]) if arg_metas is not None else [None] * len(args)
    new_args = list(args)
    changed = False
    for i in mats:
        x = args[i]
        lay = _current_layout(L, x, traced[i] if i < len(traced) else None)
        if not _aligned(lay, align):
            ref: BufferRef = L.realize(x, _padded_layout(lay, align))
            new_args[i] = buffer_view(ref.name, ref.layout)
            changed = True
    n = b.shape[-1]
    if n % align == 0:
        if not changed:
            return None
        return L.extern(_impl(name), tuple(new_args), kwargs, None, fresh=True)
    extra = dict(kwargs)
    if name == "addmm":
        rest = list(new_args[3:])
        new_args = new_args[:3]
        extra.update(zip(("beta", "alpha"), rest))
    out = L.extern(_OUT_LD[name], tuple(new_args), dict(extra, ld=_round(n, align)), None, fresh=True)
    L.padded_results.add(out.view[0])
    return out


def _impl(name: str) -> Any:
    from ember.decomp.core import PRIMS
    return PRIMS[name].impl


__all__ = ["align_matmul", "mm_out_ld", "addmm_out_ld", "bmm_out_ld", "DEVICES", "MIN_MACS"]
