"""Blocked (two-level cascade) accumulation for the C++ backend's floating-point sums.

A loop that adds a row into one accumulator (a vector lane, an outer point's slot, a scalar) rounds once per
point into a value that keeps growing, so its error grows with the row: a float32 sum of a few thousand points
with a nonzero mean ends 10-100x less accurate than ATen's, whose kernels add in cascades. Here such a loop runs
in nested blocks: each block of ``b`` steps adds into fresh partial accumulators (suffix ``_p``), added after it
into the partials of its block of ``b**2`` steps (``_p2``), those into the partials of a block of ``b**3`` steps
(``_p3``), and so on up to the row's accumulators, with ``b`` at least ``cpp_sum_block`` and about the
``levels``-th root of the row's steps. No chain of additions is longer than ``b`` (a two-level split, sqrt(steps)
each, still left column sums of 2047 points 2.5x eager's error, three levels a 200000-point mean 3.5x), which
keeps the error near a cascade's at the cost of a loop nest per row; the statements inside (loads, fused stores,
other reductions) run unchanged, in the same order.

``cascade`` wraps a loop its caller writes (``inner(ind, lo, hi)``: the whole loop over ``[lo, hi)``) whose sum
accumulators the caller has renamed to the innermost partials while writing it; ``blocks(total, part)`` gives
the lines that declare a level's partials and those that add them into the level above (names by suffix).
Static bounds decide ``b`` at compile time (and skip the levels a short row does not need); symbolic bounds
compute it at run time (``ember_cascade_len``), so dynamic shapes get the same accuracy.
"""
from __future__ import annotations

import math
from typing import Callable

from ember.heuristics import heuristics

PRELUDE = r"""
/* points per innermost block of a cascaded sum over n points taken step at a time, in `levels` levels: about
   the levels-th root of n / step steps, at least min_steps (ember.codegen.cpp_cascade) */
static inline int64_t ember_cascade_len(int64_t n, int64_t step, int64_t min_steps, int levels) {
  const int64_t steps = (n + step - 1) / step;
  int64_t b = (int64_t)__builtin_pow((double)steps, 1.0 / levels);
  for (;; ++b) {
    int64_t p = 1; for (int l = 0; l < levels && p < steps; ++l) p *= b;
    if (p >= steps) break;
  }
  return (b < min_steps ? min_steps : b) * step;
}
"""
MAX_LEVELS = 4          # symbolic rows: the levels of the nest (static rows take as few as their length needs)

Blocks = Callable[[str, str], tuple[list[str], list[str]]]


def _int(s: object) -> int | None:
    try:
        return int(str(s))
    except ValueError:
        return None


def sum_blocks(partials: list[tuple[str, str, str]]) -> Blocks | None:
    """``blocks`` for scalar or vector partials: (C type, accumulator, initial value); a level's partial of
    ``acc`` is ``acc`` + its suffix; None when there are none."""
    if not partials:
        return None
    return lambda total, part: ([f"{ct} {acc}{part} = {init};" for ct, acc, init in partials],
                                [f"{acc}{total} += {acc}{part};" for _, acc, _ in partials])


def lane_blocks(sums: list[str], wfs: list[str]) -> Blocks | None:
    """``blocks`` for vector accumulators: float sums ``v<acc>`` and Welford states (``v<acc>_mean``,
    ``v<acc>_m2``, a count ``<acc>_vn`` for all lanes). A block's Welford partials combine into the level above
    by Chan's formula (the running mean's update error grows with the row as a sum's does: an NHWC column
    variance over 1000 rows was 27x eager's error)."""
    if not sums and not wfs:
        return None

    def blocks(total: str, part: str) -> tuple[list[str], list[str]]:
        start = [f"vfloat v{a}{part} = ember_vbf(0.0f);" for a in sums]
        finish = [f"v{a}{total} += v{a}{part};" for a in sums]
        for a in wfs:
            t, p = f"{a}{total}", f"{a}{part}"
            start.append(f"vfloat v{p}_mean = ember_vbf(0.0f), v{p}_m2 = ember_vbf(0.0f); int64_t {p}_vn = 0;")
            finish.append(f"if ({p}_vn) {{ const int64_t n_ = {t}_vn + {p}_vn; const vfloat d_ = v{p}_mean - "
                          f"v{t}_mean; const float w_ = (float){p}_vn / (float)n_; v{t}_mean += d_ * w_; "
                          f"v{t}_m2 += v{p}_m2 + d_ * d_ * ((float){t}_vn * w_); {t}_vn = n_; }}")
        return start, finish
    return blocks


def static_block(n: int, step: int, always: bool = False) -> tuple[int, int] | None:
    """(steps per innermost block, levels) of a static loop; None: one block, no nest."""
    steps = -(-n // step)
    m = heuristics().cpp_sum_block
    if steps <= m and not always:
        return None
    levels = 2
    while levels < MAX_LEVELS and m ** levels < steps:
        levels += 1
    b = max(m, int(steps ** (1 / levels)))
    while b ** levels < steps:
        b += 1
    return b, levels


def cascade(ind: str, var: str, lo: str, hi: str, step: int, blocks: Blocks | None,
            inner: Callable[[str, str, str], list[str]], pragma: str = "", always: bool = False) -> list[str]:
    """The loop ``inner`` writes over ``[lo, hi)``, in nested blocks (see the module docstring); ``step``:
    points per step of the inner loop (its bounds are multiples of it from ``lo``). ``pragma`` goes on the
    outermost loop (an OpenMP ``parallel for`` with reductions over the row's accumulators); ``always``: blocks
    even a short static row (the blocks are what ``pragma`` shares out)."""
    if blocks is None:
        return inner(ind, lo, hi)
    ilo, ihi = _int(lo), _int(hi)
    if ilo is not None and ihi is not None:
        static = static_block(ihi - ilo, step, always)
        if static is None:        # one block: the partials still take the sums the statements add to them
            start, finish = blocks("", "_p")
            return ([f"{ind}{{"] + [f"{ind}  {ln}" for ln in start] + inner(ind + "  ", lo, hi)
                    + [f"{ind}  {ln}" for ln in finish] + [f"{ind}}}"])
        b, levels = static
        lines = [f"{ind}{{"] + [f"{ind}  const int64_t {var}_bl{k} = {b ** k * step};" for k in range(1, levels)]
    else:
        levels = MAX_LEVELS
        lines = [f"{ind}{{ const int64_t {var}_bl1 = ember_cascade_len(({hi}) - ({lo}), {step}, "
                 f"{heuristics().cpp_sum_block}, {levels});"]
        lines += [f"{ind}  const int64_t {var}_bl{k} = {var}_bl{k - 1} / {step} * {var}_bl1;"
                  for k in range(2, levels)]
    if pragma:
        lines.append(f"{ind}  {pragma}")
    lines += _level(ind + "  ", var, lo, hi, step, levels - 1, "", blocks, inner)
    return lines + [f"{ind}}}"]


def _level(ind: str, var: str, lo: str, hi: str, step: int, k: int, total: str, blocks: Blocks,
           inner: Callable[[str, str, str], list[str]]) -> list[str]:
    """The loop over the blocks of ``var_bl<k>`` points in ``[lo, hi)``, each adding into partials (suffix
    ``_p<k>``, ``_p`` for k = 1) that are added into ``total``'s after it."""
    part = "_p" if k == 1 else f"_p{k}"
    start, finish = blocks(total, part)
    v = f"{var}_{k}"
    lines = [f"{ind}for (int64_t {v} = {lo}; {v} < {hi}; {v} += {var}_bl{k}) {{"]
    i2 = ind + "  "
    lines += [f"{i2}{ln}" for ln in start]
    lines.append(f"{i2}const int64_t {v}e = std::min<int64_t>({v} + {var}_bl{k}, {hi});")
    if k == 1:
        lines += inner(i2, v, f"{v}e")
    else:
        lines += _level(i2, var, v, f"{v}e", step, k - 1, part, blocks, inner)
    lines += [f"{i2}{ln}" for ln in finish]
    return lines + [f"{ind}}}"]
