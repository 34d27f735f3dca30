"""Decompositions of pooling (max/avg/adaptive-avg 2-D and their backwards) and cumsum into prims.

A pooling window is a strided ``slice`` of the (padded) input per kernel offset, so the forward is a chain of
pointwise prims over ``kh * kw`` slices, in ATen's CPU order (row by row): max with first-index ties and NaN
propagation as ATen's kernel, average as a running sum then one division by the window size. Backwards are
gathers, not scatters: each input position reads the output gradient of the ceil(k/s)**2 windows that may
hold it (index arithmetic on ``iota``), so they fuse with the pointwise around them and need no atomics. Cumsum is a log-depth scan (``pad`` + ``slice`` + ``add``): exact for integers, float sums in
another order than ATen's sequential loop (within rounding). Adaptive average pooling whose output does not
divide the input, in the backward, stays an extern ATen call.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import sympy
import torch

from ember.shapes import guard

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
    pads = [(0, 0)] * (x.ndim - 2) + [(p[0], _high_pad(need[0], h, p[0], s[0])),
                                      (p[1], _high_pad(need[1], w, p[1], s[1]))]
    xp = P.pad(x, pads, fill) if any(lo or hi for lo, hi in pads) else x
    hd, wd = x.ndim - 2, x.ndim - 1
    res = []
    for i in range(k[0]):
        rows = P.slice(xp, hd, i * d[0], i * d[0] + (out[0] - 1) * s[0] + 1, s[0])
        for j in range(k[1]):
            res.append(P.slice(rows, wd, j * d[1], j * d[1] + (out[1] - 1) * s[1] + 1, s[1]))
    return res


def _high_pad(need: Any, n: Any, p: int, s: int) -> Any:
    """The padding after the input that the windows reach: ``max(need - n - p, 0)``. With a symbolic size
    (``need - n - p`` is then ``p - (n + 2p - d(k-1) - 1) mod s``, between ``p - s + 1`` and ``p``, in floor
    mode) the max is known without deciding it (a guard on the size's parity would recompile for every other
    size): the expression itself where ``p >= s - 1``, else ``p``, which covers every window (they stop at
    ``need``; the extra row of fill is never read)."""
    e = need - n - p
    if isinstance(e, int) or not e.free_symbols:
        return max(int(e), 0)
    return e if p >= s - 1 else p


def _pool_args(kernel: Any, stride: Any, padding: Any, dilation: Any = 1) -> tuple:
    k = _pair(kernel)
    return k, _pair(stride, k), _pair(padding), _pair(dilation)


def _offset_dtype(k: tuple) -> torch.dtype:
    """The smallest integer dtype holding a window offset in [0, kh*kw)."""
    n = k[0] * k[1]
    return torch.int8 if n <= 127 else torch.int16 if n <= 32767 else torch.int32


def _coord_dtype(x: Any) -> torch.dtype:
    """Plane coordinates are int32 (cheap division on the GPU) unless a flat plane index may not fit (with
    symbolic sizes a guard: the graph is then compiled for planes that fit, as at every size seen in practice)."""
    return torch.int32 if guard(sympy.Lt(x.shape[-2] * x.shape[-1], 2 ** 31 - 1)) else torch.int64


def _window_origin(x: Any, out: tuple, s: tuple, p: tuple, a: int) -> Any:
    """Input coordinate (along spatial dim ``a``) of each output cell's window start, broadcast to out's shape."""
    v = P.iota(out[a], -p[a], s[a], _coord_dtype(x), x.device)
    return P.broadcast_in_dim(v, (*x.shape[:-2], *out), (x.ndim - 2 + a,))


@register_decomposition(aten.max_pool2d_with_indices.default)
def _max_pool2d_with_indices(x: Any, kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
                             ceil_mode: bool = False) -> tuple:
    """The max is a ``maximum`` chain (NaN propagates); the index is the window offset (kh*kw values, a small
    integer) of the last NaN or the first maximum, as ATen's kernel, turned into a flat plane index at the end.
    A backward that recomputes the offsets from the saved input stores them in a byte per output cell."""
    k, s, p, d = _pool_args(kernel_size, stride, padding, dilation)
    h, w = x.shape[-2], x.shape[-1]
    out = tuple(_out_size((h, w)[i], k[i], s[i], p[i], d[i], ceil_mode) for i in range(2))
    fill = -math.inf if is_float(x.dtype) else torch.iinfo(x.dtype).min
    odt = _offset_dtype(k)
    best = off = None
    for n, v in enumerate(_windows(x, k, s, p, d, out, fill)):
        if best is None:
            best, off = v, P.full(tuple(v.shape), 0, odt, x.device)
            continue
        take = P.logical_or(P.gt(v, best), P.isnan(v)) if is_float(x.dtype) else P.gt(v, best)
        off = P.where(take, n, off)
        best = P.maximum(best, v) if is_float(x.dtype) else P.where(take, v, best)
    return best, _offset_to_index(x, off, out, k, s, p, d, w)


def _offset_to_index(x: Any, off: Any, out: tuple, k: tuple, s: tuple, p: tuple, d: tuple, width: int) -> Any:
    o = P.convert_element_type(off, _coord_dtype(x))
    i, j = P.floordiv(o, k[1]), P.remainder(o, k[1])
    row = P.add(_window_origin(x, out, s, p, 0), P.mul(i, d[0]) if d[0] != 1 else i)
    col = P.add(_window_origin(x, out, s, p, 1), P.mul(j, d[1]) if d[1] != 1 else j)
    return to(P.add(P.mul(row, width), col), torch.int64)


def _candidates(x: Any, a: int, n_out: int, k: int, s: int, p: int, d: int) -> list:
    """For each input position along spatial dim ``a``, the windows that may hold it: a list of
    (window index, in that window) int64/bool vectors of the input's length, one per candidate.
    Windows ``first(h) + j`` for j < ceil(((k-1)*d+1)/s), where first(h) is the first window starting at or
    after h - (k-1)*d; the window index is clamped to the output (the flag says whether it is real)."""
    n = x.shape[x.ndim - 2 + a]
    span = (k - 1) * d
    h = P.iota(n, 0, 1, _coord_dtype(x), x.device)
    first = P.maximum(P.floordiv(P.add(h, p - span + s - 1), s), 0)
    res = []
    for j in range(-(-(span + 1) // s)):
        o = P.add(first, j) if j else first
        e = P.sub(P.add(h, p), P.mul(o, s))            # position inside the window, in input units
        ok = P.logical_and(P.lt(o, n_out), P.logical_and(P.ge(e, 0), P.le(e, span)))
        if d != 1:
            ok = P.logical_and(ok, P.eq(P.remainder(e, d), 0))
        res.append((to(P.minimum(o, n_out - 1), torch.int64), ok))
    return res


def _gather_windows(t: Any, x: Any, rows: Any, cols: Any) -> Any:
    """t (..., out_h, out_w) read at window (rows[h], cols[w]) for each input position: x's shape."""
    lead = tuple(x.shape[:-2])
    h, w = x.shape[-2], x.shape[-1]
    r = P.broadcast_in_dim(rows, (*lead, h, t.shape[-1]), (x.ndim - 2,))
    by_row = P.gather(t, x.ndim - 2, r)
    c = P.broadcast_in_dim(cols, (*lead, h, w), (x.ndim - 1,))
    return P.gather(by_row, x.ndim - 1, c)


def _pool_backward(x: Any, grad: Any, out: tuple, k: tuple, s: tuple, p: tuple, d: tuple, pick: Any,
                   divisor: Any = None) -> Any:
    """Each input position sums ``grad`` (divided by ``divisor``, a number or a tensor like grad) over the windows
    that hold it where ``pick(rows, cols)`` (None: every such window) is true: a gather per candidate window, no
    scatter, no atomics. The gradient is gathered as it is, so a 16-bit one is stored 16-bit."""
    acc = None
    for r, okr in _candidates(x, 0, out[0], k[0], s[0], p[0], d[0]):
        for c, okc in _candidates(x, 1, out[1], k[1], s[1], p[1], d[1]):
            lead = tuple(x.shape[:-2])
            ok = P.logical_and(P.broadcast_in_dim(okr, (*lead, *x.shape[-2:]), (x.ndim - 2,)),
                               P.broadcast_in_dim(okc, (*lead, *x.shape[-2:]), (x.ndim - 1,)))
            if pick is not None:
                ok = P.logical_and(ok, pick(r, c))
            g = opmath(_gather_windows(grad, x, r, c))
            if divisor is not None:
                dv = divisor if isinstance(divisor, float) else to(_gather_windows(divisor, x, r, c), g.dtype)
                g = P.div(g, dv)
            g = P.where(ok, g, 0.0)
            acc = g if acc is None else P.add(acc, g)
    return acc


@register_decomposition(aten.max_pool2d.default)
def _max_pool2d(x: Any, kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
                ceil_mode: bool = False) -> Any:
    return _max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)[0]


@register_decomposition(aten.max_pool2d_with_indices_backward.default)
def _max_pool2d_backward(grad: Any, x: Any, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                         ceil_mode: bool, indices: Any) -> Any:
    """A gather per window that may hold each input position (ceil(k/s)**2 of them), kept where that window's
    argmax index is this position. ``indices`` outside their window are not seen (as ATen's CUDA kernel). When
    the indices are recomputed from the forward's int8 window offsets, the gathers read those bytes."""
    k, s, p, d = _pool_args(kernel_size, stride, padding, dilation)
    out = (grad.shape[-2], grad.shape[-1])
    h, w = x.shape[-2], x.shape[-1]
    full = tuple(x.shape)
    here = P.add(P.broadcast_in_dim(P.iota(h, 0, w, torch.int64, x.device), full, (x.ndim - 2,)),
                 P.broadcast_in_dim(P.iota(w, 0, 1, torch.int64, x.device), full, (x.ndim - 1,)))

    def pick(rows: Any, cols: Any) -> Any:
        return P.eq(_gather_windows(indices, x, rows, cols), here)
    return to(_pool_backward(x, grad, out, k, s, p, d, pick), x.dtype)


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
    out = (grad.shape[-2], grad.shape[-1])
    div = _avg_divisor(x, out, k, s, p, count_include_pad, divisor_override)
    return to(_pool_backward(x, grad, out, k, s, p, (1, 1), None, div), x.dtype)


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
    if not isinstance(n, int):      # the scan's step count depends on the length: ATen's own kernel
        return P.aten_extern(aten.cumsum.default, (x, dim), {"dtype": dtype})
    while shift < n:        # Hillis-Steele scan: after the step with shift s, acc[i] sums x[i-2s+1 .. i]
        pads = [(0, 0)] * x.ndim
        pads[d] = (shift, 0)
        acc = P.add(acc, P.pad(P.slice(acc, d, 0, n - shift, 1), pads, 0))
        shift *= 2
    return to(acc, out_dtype)
