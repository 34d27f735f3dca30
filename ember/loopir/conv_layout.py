"""Channels-last activations for convolution-heavy inference graphs (what Inductor's layout optimization does).

cuDNN runs 16-bit convolutions in NHWC: given NCHW tensors it converts input, weight and output around every
call (ResNet-50 at batch 8 on an H100: 1.1 ms of conversions and 1.4 ms of slower convolution kernels in a 7.9 ms
step). So in an inference graph with at least ``MIN_CONVS`` 2-D convolutions on CUDA in bfloat16/float16:
- every 4-D float buffer the graph computes is stored channels-last (kernels write it in memory order), so the
  pointwise work between convolutions (batch norm, ReLU, residual adds) reads and writes NHWC;
- a convolution's input and weight are passed channels-last (a graph input or parameter is copied once per
  call; a 1x1 weight already is), and its result comes back channels-last;
- graph outputs keep the traced (eager) strides: a channels-last buffer that is an output is copied back.
Training graphs keep the traced layouts (the forward's saved activations must match what the backward expects).

On the CPU the same holds for float32 graphs: oneDNN runs NCHW convolutions through reorders to its blocked
format and back on every call, NHWC ones in place (the quick ResNet's convolutions: 382 -> 317 µs per step);
weights keep their layout there.
"""
from __future__ import annotations

from typing import Any

import torch

from ember.decomp.meta import TensorMeta

from .ir import Layout

MIN_CONVS = 4
# per device type, the convolution dtypes that switch a graph to channels-last: cuDNN's 16-bit kernels, and
# oneDNN's float32 ones (on the CPU oneDNN takes its NHWC path from the input alone and reorders the weight itself,
# so weights keep their layout there)
DTYPES = {"cuda": (torch.bfloat16, torch.float16), "cpu": (torch.float32,)}
NHWC_WEIGHTS = {"cuda"}


def wants_channels_last(gm: Any) -> bool:
    n = 0
    for node in gm.graph.nodes:
        t = node.target
        if node.op == "call_function" and type(t).__name__ == "Prim" and getattr(t, "name", None) == "convolution":
            val = node.meta.get("val")
            if getattr(val, "ndim", 0) == 4 and not node.args[6] and \
                    getattr(val, "dtype", None) in DTYPES.get(torch.device(val.device).type, ()):
                n += 1
    return n >= MIN_CONVS


def channels_last(shape: tuple, dtype: torch.dtype, device: torch.device) -> Layout:
    _, c, h, w = shape
    return Layout(tuple(shape), (h * w * c, 1, w * c, c), dtype, device)


def same_memory(a: Layout, b: Layout) -> bool:
    """Equal but for the strides of size-1 dims (which never move through memory)."""
    return tuple(a.shape) == tuple(b.shape) and a.offset == b.offset and a.dtype == b.dtype and all(
        sa == sb for n, sa, sb in zip(a.shape, a.stride, b.stride) if n != 1)


def default_layout(tv: Any) -> Layout | None:
    """The channels-last layout for a computed 4-D float value on a device of ``DTYPES``, else None
    (contiguous)."""
    kind = torch.device(tv.device).type
    if tv.ndim != 4 or kind not in DTYPES or tv.dtype not in (*DTYPES[kind], torch.float32):
        return None
    if not all(isinstance(s, int) for s in tv.shape):
        return None
    return channels_last(tuple(tv.shape), tv.dtype, tv.device)


def channels_last_conv(L: Any, impl: Any, args: tuple, kwargs: dict, meta: Any) -> Any:
    """The lowering of a convolution with channels-last input, weight and result, or None to leave it."""
    from .values import TV, buffer_view
    x, w = args[0], args[1]
    kind = torch.device(x.device).type if isinstance(x, TV) else None
    if not (isinstance(x, TV) and isinstance(w, TV)) or x.ndim != 4 or args[6] or \
            x.dtype not in DTYPES.get(kind, ()):
        return None
    new = list(args)
    for i in ((0, 1) if kind in NHWC_WEIGHTS else (0,)):
        t = args[i]
        want = channels_last(tuple(t.shape), t.dtype, t.device)
        if t.view is not None and same_memory(t.view[1], want):
            continue
        ref = L.realize(t, want)
        new[i] = buffer_view(ref.name, ref.layout)
    shape = tuple(meta.shape)          # cuDNN (and oneDNN) return NHWC results for NHWC inputs
    lay = channels_last(shape, meta.dtype, torch.device(meta.device))
    out = L.extern(impl, tuple(new), kwargs, TensorMeta(shape, meta.dtype, lay.device, lay.stride), fresh=True,
                   op="convolution")
    L.padded_results.add(out.view[0])
    return out


__all__ = ["DTYPES", "MIN_CONVS", "NHWC_WEIGHTS", "channels_last", "channels_last_conv", "default_layout", "same_memory",
           "wants_channels_last"]
