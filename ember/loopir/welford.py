"""Variance and mean from one read of the data: the ``var_mean`` prim's lowering.

``var_mean(x)`` lowers to two reductions over the same points that the scheduler runs in one loop: ``sum(c)``
and ``welford(c)``, the sum of squared deviations from the mean (Welford's M2), of ``c = x - k``, ``k`` being
the row's first point. Code generators keep M2 per lane with a running mean and count (``delta = c - mean;
mean += delta / n; m2 += delta * (c - mean)``) and combine lanes, threads and programs with Chan's formula; a
reduction whose row is held whole (a persistent Triton reduction) takes the mean first and sums the squared
deviations from it. Either way x is read once, and the variance does not suffer the cancellation of
``sum(x*x) - sum(x)**2 / n``.

The shift by ``k`` (M2 does not change with it) keeps the running mean near zero: in float32 a running mean
near 1e4 stops moving once ``delta / n`` falls under half its ulp, which for data of std 0.01 is after some
twenty points, and M2 then drifts by percents. ``mean = k + sum(c) / n``.

A reduction split into partials over chunks of its rows (GPU: few long rows) splits both: per chunk a sum and an
M2, then ``M2 = sum(m2_i + c_i * (s_i / c_i - s / n)**2)`` (Chan's formula over the chunks, ``c_i`` points
each). The chunks must hold whole points (a padded chunk would count its padding), so the split count is a
divisor of the row; a row without one near the heuristic's count is split with shifted sums of squares instead
(``_shifted_squares``).
"""
from __future__ import annotations

from typing import Any, Sequence

import sympy
import torch

from ember.decomp.meta import canonical_dims
from ember.shapes import SymbolicUnsupported, guard

from . import lowerings as LW
from .expr import Const, Op, cast, xvars
from .ir import Layout, Reduction, prod
from .lowering_table import register_lowering  # ``Lowerer`` in annotations: lower.py's
from .split_align import divisors
from .values import TV, buffer_view, constant, pointwise
from ember.heuristics import heuristics


def _symbolic_count(n: Any, correction: Any) -> Any:
    """``max(n - correction, 0)`` for a symbolic count ``n`` (an integer expression the kernel computes)."""
    if float(correction) != int(correction):
        raise SymbolicUnsupported(f"ember.loopir: var_mean with correction {correction} over a symbolic count")
    return n - int(correction) if guard(sympy.Gt(n, int(correction))) else 0.0


@register_lowering("var_mean")
def _var_mean(L: Lowerer, x: TV, dims: Any, correction: float = 1, keepdim: bool = False) -> tuple:
    d = canonical_dims(dims, x.ndim) if x.ndim else ()
    if not d:
        zero = constant(x.shape, 0.0 if correction == 0 else float("nan"), x.dtype, x.device)
        return zero, x
    n = prod([x.shape[i] for i in d])

    def first(idx: Sequence) -> Any:
        return x.loader([0 if i in d else v for i, v in enumerate(idx)])
    c = pointwise("sub", [x, TV(x.shape, x.dtype, x.device, first)], x.dtype)
    split = _split_count(x, d)
    if split == 0:
        s, m2 = _shifted_squares(L, c, d, n)
    elif split > 1:
        s, m2 = _split_sum_m2(L, c, d, n, split)
    else:
        s = LW._reduce(L, c, d, False, "sum", None)
        m2 = LW._reduce(L, c, d, False, "welford", None)
    k = LW._squeeze(L, TV(tuple(1 if i in d else x.shape[i] for i in range(x.ndim)), x.dtype, x.device, first),
                    list(d))
    dt = m2.dtype           # float64 where the split's partials combine in float64 (``_combine_dtype``)
    mean = pointwise("add", [_cast(k, dt), pointwise("div", [s, n], dt)], dt)
    if guard(sympy.Gt(n, 1)):       # ATen's running mean turns NaN past an inf (inf - inf), as M2 does: so does this one
        mean = pointwise("where", [pointwise("isnan", [m2], dt, torch.bool), m2, mean], dt)
    var = pointwise("div", [m2, float(max(n - correction, 0)) if isinstance(n, int) else
                            _symbolic_count(n, correction)], dt)
    var, mean = _cast(var, x.dtype), _cast(mean, x.dtype)
    if keepdim:
        for i in d:
            var, mean = LW._unsqueeze(L, var, i), LW._unsqueeze(L, mean, i)
    return var, mean


def _cast(v: TV, dtype: torch.dtype) -> TV:
    return v if v.dtype == dtype else pointwise("to_dtype", [v], v.dtype, dtype)


def _split_count(x: TV, d: Sequence[int]) -> int:
    """1: no split; k > 1: k chunks of whole points; 0: split, but no divisor of the row is near the heuristic's
    count (shifted sums of squares)."""
    ranges, rranges, xs, rs, body = LW._reduction_body(x, d, x.dtype)
    R = prod(rranges)
    outer = LW._kept_dim_contiguous(body, xs, rs)
    gpu = LW._split_factor(x.device, prod(ranges), R, outer)
    accurate = LW.aligned_split(rranges, LW._accuracy_split(x.device, R, "welford", x.dtype, outer))
    if accurate > gpu and LW.aligned_factor(rranges, accurate) is not None:
        return accurate         # the CPU's accuracy split, in chunks interleaved along the row's dims
    if accurate > gpu:
        # the CPU's C++ column kernels keep float64 sums per outer point (ember.codegen.cpp_vec), accurate over
        # a chunk of any length: the largest divisor up to the count (a row of 4097 = 17 * 241 points: 17
        # chunks), or none. The shifted sums of squares lose what float32 partials cannot hold (36x eager's error)
        return max((k for k in divisors(R) if 1 < k <= accurate), default=1)
    want = max(gpu, accurate)
    if want <= 1:
        return 1
    best = next((k for k in range(want, 1, -1) if R % k == 0), 1)
    return best if best * heuristics().welford_min_split_fraction >= want else 0


def _combine_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype the split's partials combine in: float64 on the CPU (a few values per outer point; ATen's
    CPU variance accumulates in float64 too), else the input's. Combined in float32, a column variance over
    4096 rows was 2.4x eager's error against float64."""
    return torch.float64 if device.type == "cpu" and dtype.is_floating_point else dtype


def _split_sum_m2(L: Lowerer, c: TV, d: Sequence[int], n: int, split: int) -> tuple[TV, TV]:
    """(sum, M2) of the shifted ``c`` over ``d`` through ``split`` partial sums and M2s (kept shape), in
    ``_combine_dtype``."""
    ranges, rranges, xs, rs, body = LW._reduction_body(c, d, c.dtype)
    outer = LW._kept_dim_contiguous(body, xs, rs)
    chunk = prod(rranges) // split
    dt, dev = c.dtype, c.device
    part_s, kept, rr = LW._split_reduction(L, body, ranges, rranges, "sum", split, dt, dev, outer)
    part_m2, _, _ = LW._split_reduction(L, body, ranges, rranges, "welford", split, dt, dev, outer)
    at = _combine_dtype(dt, dev)
    part_s, part_m2 = cast(part_s, at), cast(part_m2, at)
    lay = Layout.contiguous(kept, at, dev)
    s = L.realized(_reduction_node(L, lay, kept, rr, "sum", part_s))
    mean_c = Op("div", (s.loader(xvars(len(kept))), Const(float(n), at)), at)
    dev_i = Op("sub", (Op("div", (part_s, Const(float(chunk), at)), at), mean_c), at)
    spread = Op("mul", (Const(float(chunk), at), Op("mul", (dev_i, dev_i), at)), at)
    return s, _reduction_node(L, lay, kept, rr, "sum", Op("add", (part_m2, spread), at))


def _reduction_node(L: Lowerer, lay: Layout, ranges: tuple, rranges: tuple, kind: str, body: Any) -> TV:
    name = L.new_name()
    L.nodes.append(Reduction(name, lay, ranges, rranges, kind, body))
    return buffer_view(name, lay)


def _shifted_squares(L: Lowerer, c: TV, d: Sequence[int], n: int) -> tuple[TV, TV]:
    """(sum, M2) of the shifted ``c`` from its sum and the sum of its squares (the cancellation in
    ``s2 - s1**2 / n`` is bounded by how far the shift lies from the mean, in standard deviations, not by the
    mean itself). Both sums split into partials over padded chunks, and run in one kernel."""
    s1 = LW._reduce(L, c, d, False, "sum", None)
    s2 = LW._reduce(L, pointwise("mul", [c, c], c.dtype), d, False, "sum", None)
    # s1 * (s1 / n): s1 * s1 overflows first (a var of 1e19s was 0: s2 - inf, clamped)
    sq_mean = pointwise("mul", [s1, pointwise("div", [s1, n], c.dtype)], c.dtype)
    return s1, pointwise("maximum", [pointwise("sub", [s2, sq_mean], c.dtype), 0.0], c.dtype)  # not below 0
