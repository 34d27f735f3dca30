"""Decompositions of pooling (max/avg/adaptive-avg 2-D and their backwards) and cumsum into prims.

A pooling window is a strided ``slice`` of the (padded) input per kernel offset, so the forward is a chain of
pointwise prims over ``kh * kw`` slices, in ATen's CPU order (row by row): max with first-index ties and NaN
propagation as ATen's kernel, average as a running sum then one division by the window size. Backwards
scatter-add the output gradient to the flat input positions (``scatter_add``), whose indices come from
``iota``. Cumsum is a log-depth scan (``pad`` + ``slice`` + ``add``): exact for integers, float sums in
another order than ATen's sequential loop (within rounding). Adaptive average pooling whose output does not
divide the input, in the backward, stays an extern ATen call.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from . import prims as P
from .helpers import opmath, to
from .meta import canonical_dim, is_float
from .registry import register_decomposition

aten = torch.ops.aten


def _pair(v: Any, default: Any = None) -> tuple[int, int]:
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        v = default
    if isinstance(v, int):
        return v, v
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _out_size(n: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    num = n + 2 * p - d * (k - 1) - 1
    out = (num + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= n + p:     # the last window must start inside the input or left padding
        out -= 1
    return out


def _windows(x: Any, k: tuple, s: tuple, p: tuple, d: tuple, out: tuple, fill: Any) -> list:
    """The kh*kw strided slices (each of the output's spatial shape) of x padded with ``fill``."""
    h, w = x.shape[-2], x.shape[-1]
    need = [(out[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 for i in range(2)]
    pads = [(0, 0)] * (x.ndim - 2) + [(p[0], max(need[0] - h - p[0], 0)), (p[1], max(need[1] - w - p[1], 0))]
    xp = P.pad(x, pads, fill) if any(lo or hi for lo, hi in pads) else x
    hd, wd = x.ndim - 2, x.ndim - 1
    res = []
    for i in range(k[0]):
        rows = P.slice(xp, hd, i * d[0], i * d[0] + (out[0] - 1) * s[0] + 1, s[0])
        for j in range(k[1]):
            res.append(P.slice(rows, wd, j * d[1], j * d[1] + (out[1] - 1) * s[1] + 1, s[1]))
    return res


def _plane_index(x: Any, out: tuple, start: tuple, step: tuple, width: int) -> Any:
    """int64 (out_h, out_w) broadcast to x's leading dims: (start_h + oh*step_h) * width + start_w + ow*step_w."""
    rows = P.iota(out[0], start[0], step[0], torch.int64, x.device)
    cols = P.iota(out[1], start[1], step[1], torch.int64, x.device)
    shape = (*x.shape[:-2], out[0], out[1])
    r = P.broadcast_in_dim(P.mul(rows, width), shape, (x.ndim - 2,))
    return P.add(r, P.broadcast_in_dim(cols, shape, (x.ndim - 1,)))


def _pool_args(kernel: Any, stride: Any, padding: Any, dilation: Any = 1) -> tuple:
    k = _pair(kernel)
    return k, _pair(stride, k), _pair(padding), _pair(dilation)


@register_decomposition(aten.max_pool2d_with_indices.default)
def _max_pool2d_with_indices(x: Any, kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
                             ceil_mode: bool = False) -> tuple:
    k, s, p, d = _pool_args(kernel_size, stride, padding, dilation)
    h, w = x.shape[-2], x.shape[-1]
    out = tuple(_out_size((h, w)[i], k[i], s[i], p[i], d[i], ceil_mode) for i in range(2))
    fill = -math.inf if is_float(x.dtype) else torch.iinfo(x.dtype).min
    best = idx = None
    for n, v in enumerate(_windows(x, k, s, p, d, out, fill)):
        i, j = divmod(n, k[1])
        pos = _plane_index(x, out, (i * d[0] - p[0], j * d[1] - p[1]), s, w)
        if best is None:
            best, idx = v, pos
            continue
        take = P.logical_or(P.gt(v, best), P.isnan(v)) if is_float(x.dtype) else P.gt(v, best)
        best, idx = P.where(take, v, best), P.where(take, pos, idx)
    return best, idx


@register_decomposition(aten.max_pool2d.default)
def _max_pool2d(x: Any, kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
                ceil_mode: bool = False) -> Any:
    return _max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)[0]


def _scatter_plane(x: Any, grads: list, indices: list) -> Any:
    """zeros like x, plus each gradient scattered (added) at its flat index into the last two dims."""
    lead, plane = tuple(x.shape[:-2]), x.shape[-2] * x.shape[-1]
    flat = lambda t: P.reshape(t, (*lead, t.shape[-2] * t.shape[-1]))  # noqa: E731
    g = P.cat([flat(t) for t in grads], len(lead)) if len(grads) > 1 else flat(grads[0])
    i = P.cat([flat(t) for t in indices], len(lead)) if len(indices) > 1 else flat(indices[0])
    zeros = P.full((*lead, plane), 0.0, g.dtype, x.device)
    return P.reshape(P.scatter_add(zeros, len(lead), i, g), tuple(x.shape))


@register_decomposition(aten.max_pool2d_with_indices_backward.default)
def _max_pool2d_backward(grad: Any, x: Any, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                         ceil_mode: bool, indices: Any) -> Any:
    return to(_scatter_plane(x, [opmath(grad)], [indices]), x.dtype)


def _avg_divisor(x: Any, out: tuple, k: tuple, s: tuple, p: tuple, count_include_pad: bool,
                 divisor_override: Any) -> Any:
    """The (broadcast) divisor of each output cell, as ATen's CPU kernel computes it."""
    shape = (*x.shape[:-2], *out)
    if divisor_override:
        return float(divisor_override)
    sizes = []
    for a in range(2):
        n = (x.shape[-2], x.shape[-1])[a]
        start = P.iota(out[a], -p[a], s[a], torch.int64, x.device)
        end = P.minimum(P.add(start, k[a]), n + p[a])
        size = P.sub(end, start)
        if not count_include_pad:
            size = P.sub(P.minimum(end, n), P.maximum(start, 0))
        sizes.append(P.broadcast_in_dim(size, shape, (x.ndim - 2 + a,)))
    return P.mul(sizes[0], sizes[1])


@register_decomposition(aten.avg_pool2d.default)
def _avg_pool2d(x: Any, kernel_size: Any, stride: Any = (), padding: Any = 0, ceil_mode: bool = False,
                count_include_pad: bool = True, divisor_override: Any = None) -> Any:
    k, s, p, _ = _pool_args(kernel_size, stride, padding)
    out = tuple(_out_size((x.shape[-2], x.shape[-1])[i], k[i], s[i], p[i], 1, ceil_mode) for i in range(2))
    xf = opmath(x)
    total = None
    for v in _windows(xf, k, s, p, (1, 1), out, 0.0):
        total = v if total is None else P.add(total, v)
    div = _avg_divisor(x, out, k, s, p, count_include_pad, divisor_override)
    return to(P.div(total, div if isinstance(div, float) else to(div, xf.dtype)), x.dtype)


@register_decomposition(aten.avg_pool2d_backward.default)
def _avg_pool2d_backward(grad: Any, x: Any, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool,
                         count_include_pad: bool, divisor_override: Any) -> Any:
    k, s, p, _ = _pool_args(kernel_size, stride, padding)
    h, w = x.shape[-2], x.shape[-1]
    out = (grad.shape[-2], grad.shape[-1])
    div = _avg_divisor(x, out, k, s, p, count_include_pad, divisor_override)
    g = opmath(grad)
    g = P.div(g, div if isinstance(div, float) else to(div, g.dtype))
    # scatter into the padded plane, then cut the padding off
    hp = max((out[0] - 1) * s[0] + k[0], h + 2 * p[0])
    wp = max((out[1] - 1) * s[1] + k[1], w + 2 * p[1])
    padded = P.full((*x.shape[:-2], hp, wp), 0.0, g.dtype, x.device)
    idx = [_plane_index(g, out, (i, j), s, wp) for i in range(k[0]) for j in range(k[1])]
    acc = _scatter_plane(padded, [g] * len(idx), idx)
    acc = P.slice(P.slice(acc, x.ndim - 2, p[0], p[0] + h, 1), x.ndim - 1, p[1], p[1] + w, 1)
    return to(P.clone(acc), x.dtype)


def _adaptive_uniform(n: int, o: int) -> bool:
    return o > 0 and n % o == 0


@register_decomposition(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool2d(x: Any, output_size: Sequence[int]) -> Any:
    oh, ow = _pair(output_size)
    h, w = x.shape[-2], x.shape[-1]
    if _adaptive_uniform(h, oh) and _adaptive_uniform(w, ow):
        k = (h // oh, w // ow)
        return _avg_pool2d(x, k, k, 0, False, True, None)
    xf = opmath(x)
    rows = []
    for i in range(oh):
        r0, r1 = (i * h) // oh, -((-(i + 1) * h) // oh)
        cells = []
        for j in range(ow):
            c0, c1 = (j * w) // ow, -((-(j + 1) * w) // ow)
            win = P.slice(P.slice(xf, x.ndim - 2, r0, r1, 1), x.ndim - 1, c0, c1, 1)
            cells.append(P.div(P.sum(win, (x.ndim - 2, x.ndim - 1), True), float((r1 - r0) * (c1 - c0))))
        rows.append(P.cat(cells, x.ndim - 1) if ow > 1 else cells[0])
    return to(P.cat(rows, x.ndim - 2) if oh > 1 else rows[0], x.dtype)


@register_decomposition(aten._adaptive_avg_pool2d_backward.default)
def _adaptive_avg_pool2d_backward(grad: Any, x: Any) -> Any:
    oh, ow = grad.shape[-2], grad.shape[-1]
    h, w = x.shape[-2], x.shape[-1]
    if _adaptive_uniform(h, oh) and _adaptive_uniform(w, ow):
        k = (h // oh, w // ow)
        return _avg_pool2d_backward(grad, x, k, k, 0, False, True, None)
    return P.aten_extern(aten._adaptive_avg_pool2d_backward.default, (grad, x))


# cumsum -------------------------------------------------------------------------------------------------
@register_decomposition(aten.cumsum.default)
def _cumsum(x: Any, dim: int, *, dtype: torch.dtype | None = None) -> Any:
    out_dtype = dtype or (x.dtype if is_float(x.dtype) or x.dtype.is_complex else torch.int64)
    d = canonical_dim(dim, x.ndim) if x.ndim else 0
    y = to(x, out_dtype)
    if x.ndim == 0:
        return P.clone(y)
    acc = opmath(y)
    n, shift = x.shape[d], 1
    while shift < n:        # Hillis-Steele scan: after the step with shift s, acc[i] sums x[i-2s+1 .. i]
        pads = [(0, 0)] * x.ndim
        pads[d] = (shift, 0)
        acc = P.add(acc, P.pad(P.slice(acc, d, 0, n - shift, 1), pads, 0))
        shift *= 2
    return to(acc, out_dtype)
