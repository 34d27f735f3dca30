"""Chunks of a split outer reduction's row that interleave along the row's dims (CPU).

A split reduction (``lowerings._split_reduction``) sums chunks of its row into partials, then the
partials. Cut as ``chunk`` consecutive points of the flattened row, a chunk that does not end on a dim's
boundary reads each point through a division and a modulo of ``s * chunk + r`` per dim, a row that ``chunk``
does not divide needs a mask, and the partials' kernel reads each kept point's chunk with a stride: a C++
kernel neither vectorizes nor strength-reduces it (a batch norm backward's per-channel partial sums over
8x16x16 NHWC points, 46 chunks of 45, took 15x the time of the whole row added at once; the quick suite's
ResNet training step was 8-10% slower). Here chunk ``s`` is every ``split``-th point instead: ``s`` runs
over the innermost ``split`` points of the row (``b`` steps of dim ``j`` and every dim inside it), the
partial reduction over the rest. An outer row (a per-channel sum over NHWC rows, a bias gradient over
tokens) then becomes a column sum of a contiguous ``(R / split) x (split * kept)`` matrix, the form the C++
column reductions vectorize, with affine indices and no mask; each partial still adds ``R / split`` points,
the final sum ``split``. Torch-free apart from sympy; used by ``lowerings`` and ``welford``.
"""
from __future__ import annotations

import math
from typing import Any, Sequence


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def aligned_factor(rranges: Sequence[Any], split: int) -> tuple[int, int] | None:
    """``(j, b)``: ``split`` is ``b`` steps of dim ``j`` times every dim inside it (``b > 1`` divides
    ``rranges[j]``), or None when no such ``j`` exists (or a size is symbolic)."""
    if not all(isinstance(n, int) for n in rranges) or split <= 1 or math.prod(rranges) % split:
        return None
    inner = 1
    for j in range(len(rranges) - 1, -1, -1):
        if split % inner == 0 and split // inner > 1 and rranges[j] % (split // inner) == 0:
            return j, split // inner
        inner *= rranges[j]
        if inner > split:
            return None
    return None


def aligned_split(rranges: Sequence[Any], want: int) -> int:
    """The split count nearest ``want`` (in ratio, at most a factor of 2 away) that ``aligned_factor``
    accepts; ``want`` itself when there is none."""
    if want <= 1 or not all(isinstance(n, int) for n in rranges):
        return want
    R = math.prod(rranges)
    options = [k for k in divisors(R) if 1 < k < R and aligned_factor(rranges, k) is not None]
    best = min(options, key=lambda k: abs(math.log(k / want)), default=None)
    return best if best is not None and abs(math.log(best / want)) <= math.log(2) else want


def aligned_substitution(rranges: Sequence[int], s_var: Any, new_r: Sequence[Any], j: int, b: int
                         ) -> tuple[dict[int, Any], tuple]:
    """For partial ``s_var`` of ``aligned_factor``'s ``(j, b)``: each original reduction dim's index (by
    position) in terms of ``s_var`` and the partial reduction's variables ``new_r``, and the partial
    reduction's ranges ``(*rranges[:j], rranges[j] // b)``. ``s_var`` runs over ``(b, *rranges[j + 1:])``."""
    from .indexing import _term
    inner = (b, *rranges[j + 1:])
    s_idx = [0 if n == 1 else _term(s_var, math.prod(inner[i + 1:]), n, all(m == 1 for m in inner[:i]))
             for i, n in enumerate(inner)]
    prr = (*rranges[:j], rranges[j] // b)
    idx: dict[int, Any] = {i: 0 if rranges[i] == 1 else new_r[i] for i in range(j)}
    idx[j] = s_idx[0] if prr[j] == 1 else new_r[j] * b + s_idx[0]
    for i in range(j + 1, len(rranges)):
        idx[i] = s_idx[i - j]
    return idx, prr
