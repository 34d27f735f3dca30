"""Convolutions over non-overlapping patches as one matmul (a vision transformer's patch embedding).

A 2-D convolution whose stride equals its kernel (no padding, dilation or groups) reads every input point once:
it is ``patches @ weight.T + bias`` with ``patches`` the image cut into (C * kh * kw)-long rows, one per output
point. cuDNN runs ViT-small's 16x16/16 patch embedding (bf16, batch 64) with a generic implicit-GEMM kernel in
409 us, 11% of the model's inference step on an H100; as a matmul it is a copy of the image into patch rows
(fused with the image's cast to bf16) and a [12544, 768] x [768, 384] GEMM.

The result is the matmul's [N * oh * ow, O] buffer viewed as [N, O, oh, ow] (channels-last strides): what a
ViT does next (``flatten(2).transpose(1, 2)``) is then a view of it, and a graph output in this layout is copied
into the traced one as any other. Inference and forward graphs only; a training graph's
``convolution_backward`` stays as it is.
"""
from __future__ import annotations

from typing import Any

import torch

from .lowering_table import LOWERINGS
from .values import TV
from ember.heuristics import heuristics

DEVICES = {"cuda"}          # tests add "cpu" to run the same lowering there
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def patchify_conv(L: Any, args: tuple) -> TV | None:
    """The lowering of ``convolution(x, w, bias, stride, padding, dilation, transposed, output_padding,
    groups)`` as a matmul over patches, or None when it is not a non-overlapping 2-D convolution."""
    x, w, bias, stride, padding, dilation, transposed, _, groups = args
    if not (isinstance(x, TV) and isinstance(w, TV)) or x.device.type not in DEVICES or x.ndim != 4:
        return None
    if x.dtype not in DTYPES or w.dtype != x.dtype or transposed or groups != 1:
        return None
    if not all(isinstance(v, int) for v in (*x.shape, *w.shape)):
        return None
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    if tuple(stride) != (kh, kw) or any(padding) or any(d != 1 for d in dilation) or \
            min(kh, kw) < heuristics().patchify_min_kernel:
        return None
    oh, ow = h // kh, wd // kw
    if oh == 0 or ow == 0:
        return None
    if bias is not None and not (isinstance(bias, TV) and bias.dtype == x.dtype):
        return None
    ops = LOWERINGS
    if (oh * kh, ow * kw) != (h, wd):       # the points past the last whole patch are never read
        x = ops["slice"](L, ops["slice"](L, x, 2, 0, oh * kh), 3, 0, ow * kw)
    patches = ops["reshape"](L, x, (n, c, oh, kh, ow, kw))
    patches = ops["permute"](L, patches, (0, 2, 4, 1, 3, 5))
    patches = ops["reshape"](L, patches, (n * oh * ow, c * kh * kw))
    wt = ops["permute"](L, ops["reshape"](L, w, (o, c * kh * kw)), (1, 0))
    name, impl, mm_args = ("mm", torch.ops.aten.mm.default, (patches, wt)) if bias is None else \
        ("addmm", torch.ops.aten.addmm.default, (bias, patches, wt))
    out = None
    if L.align_matmuls:
        from .matmul_align import align_matmul
        out = align_matmul(L, name, impl, mm_args, {}, None)
    if out is None:
        out = L.extern(impl, mm_args, {}, None, fresh=True, op=name)
    L.padded_results.add(out.view[0])       # returned as a graph output: copied into eager's layout
    out = ops["reshape"](L, out, (n, oh, ow, o))
    return ops["permute"](L, out, (0, 3, 1, 2))
