"""Channels-last activations for convolution-heavy graphs (what Inductor's layout optimization does).

cuDNN runs 16-bit convolutions in NHWC: given NCHW tensors it converts input, weight and output around every
call (ResNet-50 at batch 8 on an H100: 1.1 ms of conversions and 1.4 ms of slower convolution kernels in a 7.9 ms
step). So in a graph with at least ``channels_last_min_convs`` 2-D convolutions on CUDA in bfloat16/float16:
- every 4-D buffer the graph computes is stored channels-last (kernels write it in memory order), so the
  pointwise work between convolutions (batch norm, ReLU, residual adds) reads and writes NHWC;
- a convolution's input and weight are passed channels-last (a graph input or parameter is copied once per
  call; a 1x1 weight already is), and its result comes back channels-last;
- graph outputs keep the traced (eager) strides: a channels-last buffer that is an output is copied back.
Training graphs do the same: the forward returns its saved activations channels-last and the backward is
compiled for them (``ember.autograd.aot``), its ``convolution_backward`` calls take and return NHWC tensors, and
weight gradients are copied into the weights' layout.

On the CPU the same holds for float32 graphs: oneDNN runs NCHW convolutions through reorders to its blocked
format and back on every call, NHWC ones in place (the quick ResNet's convolutions: 382 -> 317 µs per step).
Weights are passed NHWC there too (since the seventh session): given an NCHW weight with an NHWC input, ATen
converts the weight itself on every call (a copy, a clone and a ``contiguous`` per convolution, about 4 µs each
in host time), where ember's own copy kernel costs one launch (quick ResNet inference 0.582 -> 0.542 ms against
torch.compile's 0.561 ms; training 2.343 -> 2.311 ms against 2.319 ms, one interleaved run each).
"""
from __future__ import annotations

from typing import Any

import torch

from ember.decomp.meta import TensorMeta

from .ir import Layout
from ember.heuristics import heuristics

# per device type, the convolution dtypes that switch a graph to channels-last: cuDNN's 16-bit kernels, and
# oneDNN's float32 ones; and the device types whose convolutions also get their weights channels-last
DTYPES = {"cuda": (torch.bfloat16, torch.float16), "cpu": (torch.float32,)}
NHWC_WEIGHTS = {"cuda", "cpu"}


def wants_channels_last(gm: Any) -> bool:
    """Whether a graph has at least ``channels_last_min_convs`` (``ember.heuristics``) 2-D convolutions (forward
    ones, or ``convolution_backward`` calls in a backward graph) of a dtype that runs channels-last on its device."""
    n = 0
    for node in gm.graph.nodes:
        t = node.target
        if node.op != "call_function":
            continue
        if type(t).__name__ == "Prim" and getattr(t, "name", None) == "convolution":
            val, transposed = node.meta.get("val"), node.args[6]
        elif t is torch.ops.aten.convolution_backward.default:
            val, transposed = getattr(node.args[1], "meta", {}).get("val"), node.args[7]
        else:
            continue
        if getattr(val, "ndim", 0) == 4 and not transposed and \
                getattr(val, "dtype", None) in DTYPES.get(torch.device(val.device).type, ()):
            n += 1
    return n >= heuristics().channels_last_min_convs


def channels_last(shape: tuple, dtype: torch.dtype, device: torch.device) -> Layout:
    _, c, h, w = shape
    return Layout(tuple(shape), (h * w * c, 1, w * c, c), dtype, device)


def same_memory(a: Layout, b: Layout) -> bool:
    """Equal but for the strides of size-1 dims (which never move through memory)."""
    return tuple(a.shape) == tuple(b.shape) and a.offset == b.offset and a.dtype == b.dtype and all(
        sa == sb for n, sa, sb in zip(a.shape, a.stride, b.stride) if n != 1)


def default_layout(tv: Any) -> Layout | None:
    """The channels-last layout for a computed 4-D value on a device of ``DTYPES`` (of any dtype: the masks a
    max-pool keeps for its backward are read in the same order as the activations), else None (contiguous)."""
    kind = torch.device(tv.device).type
    if tv.ndim != 4 or kind not in DTYPES:
        return None
    # symbolic sizes too: the strides are products of the sizes, and the lowerer writes such a layout in its
    # known memory order (``layouts.storage_order``), as it writes a static one
    return channels_last(tuple(tv.shape), tv.dtype, tv.device)


def _nhwc_operands(L: Any, args: tuple, positions: tuple) -> list:
    """``args`` with the 4-D tensors at ``positions`` passed channels-last (a view that already is one stays;
    anything else is stored NHWC once)."""
    from .values import TV, buffer_view
    new = list(args)
    for i in positions:
        t = args[i]
        if not isinstance(t, TV):
            continue
        want = channels_last(tuple(t.shape), t.dtype, t.device)
        if t.view is not None and same_memory(t.view[1], want):
            continue
        ref = L.realize(t, want)
        new[i] = buffer_view(ref.name, ref.layout)
    return new


def _conv_kind(x: Any, w: Any, transposed: Any) -> str | None:
    """The device type of a 2-D convolution that runs channels-last here, or None."""
    from .values import TV
    if not (isinstance(x, TV) and isinstance(w, TV)) or x.ndim != 4 or transposed:
        return None
    kind = torch.device(x.device).type
    return kind if x.dtype in DTYPES.get(kind, ()) else None


def channels_last_conv(L: Any, impl: Any, args: tuple, kwargs: dict, meta: Any) -> Any:
    """The lowering of a convolution with channels-last input, weight and result, or None to leave it."""
    kind = _conv_kind(args[0], args[1], args[6])
    if kind is None:
        return None
    new = _nhwc_operands(L, args, (0, 1) if kind in NHWC_WEIGHTS else (0,))
    shape = tuple(meta.shape)          # cuDNN (and oneDNN) return NHWC results for NHWC inputs
    lay = channels_last(shape, meta.dtype, torch.device(meta.device))
    out = L.extern(impl, tuple(new), kwargs, TensorMeta(shape, meta.dtype, lay.device, lay.stride), fresh=True,
                   op="convolution")
    L.padded_results.add(out.view[0])
    return out


def channels_last_conv_backward(L: Any, impl: Any, args: tuple, kwargs: dict, meta: Any) -> Any:
    """``aten.convolution_backward`` with channels-last grad_output and input (and weight on CUDA): cuDNN and
    oneDNN then return grad_input and grad_weight channels-last, with no reorders around the call. A weight
    gradient that is a graph output is copied into the weight's traced layout (AccumulateGrad's contract)."""
    if len(args) < 11 or kwargs or not isinstance(meta, (tuple, list)) or len(meta) != 3:
        return None
    kind = _conv_kind(args[1], args[2], args[7])
    if kind is None or args[0].ndim != 4:
        return None
    new = _nhwc_operands(L, args, (0, 1, 2) if kind in NHWC_WEIGHTS else (0, 1))
    metas = []
    for m in meta:
        if m is not None and len(tuple(m.shape)) == 4:
            lay = channels_last(tuple(m.shape), m.dtype, torch.device(m.device))
            m = TensorMeta(tuple(m.shape), m.dtype, lay.device, lay.stride)
        metas.append(m)
    outs = L.extern(impl, tuple(new), kwargs, tuple(metas), op="convolution_backward")
    for o in outs:
        if o is not None and len(tuple(o.shape)) == 4:
            L.padded_results.add(o.view[0])
    return outs


def group_norm_backward(L: Any, impl: Any, args: tuple, kwargs: dict, meta: Any) -> Any:
    """``aten.native_group_norm_backward`` with grad_output (arg 0) and input (arg 1) in one memory format:
    ATen's CPU kernel picks the format of the input and reads grad_output's memory as if it had it (eager's
    autograd formula makes both contiguous in the input's format first). Here the input can be a saved
    activation stored channels-last (a convolution's result) while the gradient is computed contiguous, which
    gave wrong gradients (issue 31's hf_poolformer). Both are passed channels-last when the input already is
    (and grad_input comes back so), else both contiguous."""
    from .values import TV, buffer_view
    x = args[1]
    nhwc = isinstance(x, TV) and x.ndim == 4 and x.view is not None and \
        same_memory(x.view[1], channels_last(tuple(x.shape), x.dtype, x.device))
    if nhwc:
        new = _nhwc_operands(L, args, (0, 1))
        m0 = meta[0] if isinstance(meta, (tuple, list)) else None
        if m0 is not None:
            lay = channels_last(tuple(m0.shape), m0.dtype, torch.device(m0.device))
            meta = (TensorMeta(tuple(m0.shape), m0.dtype, lay.device, lay.stride), *meta[1:])
    else:
        new = list(args)
        for i in (0, 1):
            t = args[i]
            if not isinstance(t, TV):
                continue
            want = Layout.contiguous(tuple(t.shape), t.dtype, t.device)
            if t.view is not None and same_memory(t.view[1], want):
                continue
            ref = L.realize(t, want)
            new[i] = buffer_view(ref.name, ref.layout)
    return L.extern(impl, tuple(new), kwargs, meta, op="native_group_norm_backward")


__all__ = ["DTYPES", "group_norm_backward", "NHWC_WEIGHTS", "channels_last", "channels_last_conv", "channels_last_conv_backward",
           "default_layout", "same_memory", "wants_channels_last"]
