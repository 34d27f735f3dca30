"""Reductions vectorized across outer points (column reductions), for the C++ backend.

A reduction over the outer dimensions of an NHWC tensor (a batch norm's per-channel statistics and their
gradients, a global average pool over channels-last activations) reads its rows with a stride: point ``r`` of
channel ``x`` sits at ``C * r + x``. The scalar kernel runs one channel at a time through a strided ``omp simd``
loop (gathers); here the vector lanes are the outer points instead:

- ``XVec`` (at least a vector of outer points): blocks of ``EMBER_VW`` consecutive outer points, one vector
  accumulator per reduction whose lanes are the block's points; every statement of the kernel, before, in and
  after the reduction loops, is a vector statement over ``xindex`` (``cpp_vec.VecLoop`` with ``per_lane``), the
  ``rindex`` loops scalar loops around them. The outer points left over (fewer than a vector) run the scalar
  kernel. Used when every access moves with ``xindex`` by one element per lane, or not at all, or repeats
  with a period dividing the width, as ``cpp_vec`` decides.
- ``Flat`` (fewer outer points than lanes): see its docstring.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import sympy
import torch

from ember.loopir.indexing import RINDEX, XINDEX
from ember.loopir.kernel import Accumulate, Assign, Store

from . import cpp_ops as C
from . import cpp_cascade, cpp_vec
from ember.heuristics import heuristics

# ``w`` below is cpp.py's ``_KernelWriter`` (not imported: cpp imports this module)


class XVec:
    def __init__(self, w: Any) -> None:
        self.w = w
        body = w.body
        self.vec = cpp_vec.VecLoop(w, [st for sec in body.sections for st in sec.stmts], XINDEX, w.width,
                                   [a for sec in body.sections for a in sec.accumulators], per_lane=True)
        self.blocks = w.X // w.width

    def ok(self) -> bool:
        w = self.w
        if not w.reduction or w.scatter or w.body.scratch or w.hX < w.width or not _whole_vectors(w):
            return False
        if w.parallel and w.hX // w.width < torch.get_num_threads() and \
                w.hX * w.hR > heuristics().cpp_flat_serial_max:
            return False      # fewer blocks than threads, and long rows: the scalar kernel's threads do better
        return self.vec.ok()

    def lines(self) -> list[str]:
        w, vec = self.w, self.vec
        end = self.blocks * w.width
        lines = []
        if w.parallel:
            lines.append("  #pragma omp parallel for num_threads(nthreads) schedule(static)")
        lines.append(f"  for (int64_t xindex = 0; xindex < {end}; xindex += EMBER_VW) {{")
        for sec in w.body.sections:
            if sec.level == "x":
                lines += [f"    {ln}" for st in sec.stmts for ln in vec.stmt(st).split("\n")]
                continue
            lines += vec._decls("    ", "", sec.accumulators)
            sums = [acc for acc, rt, _ in sec.accumulators if rt == "sum"]   # Welford: float64 sums, no blocks

            def inner(i: str, lo: str, hi: str, sec: Any = sec, sums: list = sums) -> list[str]:
                vec.part = set(sums)       # each lane's sum goes through a block's partials (cpp_cascade)
                try:
                    out = [f"{i}for (int64_t rindex = {lo}; rindex < {hi}; ++rindex) {{"]
                    out += [f"{i}  {ln}" for st in sec.stmts for ln in vec.stmt(st).split("\n")]
                    return out + [f"{i}}}"]
                finally:
                    vec.part = set()
            lines += cpp_cascade.cascade("    ", "rindex", "0", str(w.R), 1, _lane_blocks(sec.accumulators), inner)
        lines.append("  }")
        if end < w.X:
            lines += w.x_loop(end)
        return lines


def _lane_blocks(accumulators: list) -> Any:
    """``cpp_cascade.lane_blocks`` for the section's per-lane float sums (Welford states are float64 sums,
    ``cpp_vec.VecLoop._decls``: they add without blocks)."""
    return cpp_cascade.lane_blocks([acc for acc, rt, _ in accumulators if rt == "sum"], [])


def _whole_vectors(w: Any) -> bool:
    """Static sizes; or symbolic outer points that are a product of sizes and a multiple of the vector
    width (``16 * s0``: a channels-last pool over 16 channels, any batch) over static rows, so the vector loop
    covers them all (no tail) and its bounds print as C as they are. Symbolic kernels took the scalar loop
    before: the quick suite's ResNet with a symbolic batch ran its pool slower than static (issue 33)."""
    if not w.symbolic:
        return True
    X = w.X
    factors = X.args if isinstance(X, sympy.Mul) else (X,)
    products = all(isinstance(f, sympy.Symbol) or (sympy.sympify(f).is_Integer and f > 0) for f in factors)
    return isinstance(w.R, int) and products and sympy.Mod(X, w.width) == 0


class Flat:
    """Fewer outer points than a vector's lanes, dividing the width (a batch norm over 8 channels with 16
    float lanes), each reduced row read at a stride of the number of points (``X * rindex + xindex``): the
    rows interleave into one contiguous run of ``X * R`` values, read as vectors whose lane ``l`` belongs to
    point ``l % X``. A reduction loop runs over that run (``findex``), per-point values enter it as vectors of
    period ``X`` (``ember_vperiodic``), and its vector accumulators fold into per-point arrays; the run's last
    values (fewer than a vector) run one at a time. Sums only, and Welford as the float64 sums of the values
    and of their squares, as in the scalar loops (ember.loopir.welford shifts the values by a row's first
    point; float sums of squares were 21x eager's error for a variance over 1000 rows of 8 columns)."""

    def __init__(self, w: Any) -> None:
        self.w = w
        self.sections: list = []        # (section, statements with flat indices, x vars the section reads)
        self.xvars = {st.var for sec in w.body.sections if sec.level == "x" for st in sec.stmts
                      if isinstance(st, Assign)}     # per-point arrays

    def ok(self) -> bool:
        w, X = self.w, self.w.X
        if not w.reduction or w.scatter or w.body.scratch or not (1 < X < w.width and w.width % X == 0):
            return False
        if w.parallel and X * w.R > heuristics().cpp_flat_serial_max:
            return False
        xvars = set()
        for sec in w.body.sections:
            if sec.level == "x":
                xvars |= {st.var for st in sec.stmts if isinstance(st, Assign)}
                continue
            if any(rt not in ("sum", "welford") or dt != torch.float32 for _, rt, dt in sec.accumulators):
                return False
            stmts = [_flat(st, X) for st in sec.stmts]
            if any(st is None for st in stmts):
                return False
            used = {a for st in stmts for a in _reads(st)} & xvars
            if any(w.dtype(v) != torch.float32 for v in used):
                return False
            vec = cpp_vec.VecLoop(w, stmts, FINDEX, w.width, [(a, "sum", dt) for a, _, dt in sec.accumulators],
                                  vectors=frozenset(used))
            if not vec.ok():
                return False
            self.sections.append((sec, stmts, sorted(used)))
            xvars |= {acc for acc, _, _ in sec.accumulators}
        return bool(self.sections)

    def lines(self) -> list[str]:
        w, X, R = self.w, self.w.X, self.w.R
        n = X * R
        end = n - n % w.width
        lines = [f"  // {X} outer points interleaved in one run of {n}"]
        for sec in w.body.sections:
            for acc, rt, dt in sec.accumulators:
                ct = "double" if rt == "welford" else "float"
                lines.append(f"  {ct} {acc}[{X}] = {{}};" + (f" {ct} {acc}_s1[{X}] = {{}};" if rt == "welford" else ""))
            for st in sec.stmts:
                if isinstance(st, Assign) and sec.level == "x":
                    lines.append(f"  {C.compute_type(st.dtype)} {st.var}[{X}];")
        flat = {id(sec): (stmts, used) for sec, stmts, used in self.sections}
        for sec in w.body.sections:
            if sec.level == "x":
                lines.append(f"  for (int64_t xi = 0; xi < {X}; ++xi) {{")
                lines.append("    const int64_t xindex = xi;")
                lines += [f"    {self._scalar(st)}" for st in sec.stmts]
                lines.append("  }")
                continue
            stmts, used = flat[id(sec)]
            lines.append("  {")
            lines += [f"    const float* const {v}_p = {v};" for v in used]
            lines.append("    {")
            lines += [f"      const vfloat {v} = ember_vperiodic({v}_p, {X});" for v in used]
            vec = cpp_vec.VecLoop(w, stmts, FINDEX, w.width, vectors=frozenset(used))
            for acc, rt, _ in sec.accumulators:
                lines.append(f"      vfloat v{acc} = ember_vbf(0.0f);" if rt != "welford" else
                             f"      {cpp_vec.wf_lane_decl(f'v{acc}', '', '_s1')}")
            lines += cpp_cascade.cascade("      ", "findex", "0", str(end), w.width, cpp_cascade.sum_blocks([
                ("vfloat", f"v{acc}", "ember_vbf(0.0f)") for acc, rt, _ in sec.accumulators if rt != "welford"]),
                lambda i, lo, hi, vec=vec, stmts=stmts: self._run(vec, stmts, i, lo, hi))
            for acc, rt, _ in sec.accumulators:
                for sfx in ("", "_s1") if rt == "welford" else ("",):
                    lines.append(f"      for (int l = 0; l < EMBER_VW; ++l) {acc}{sfx}[l % {X}] += v{acc}{sfx}[l];"
                                 if rt != "welford" else f"      for (int l = 0; l < EMBER_VW / 2; ++l) {{ {acc}{sfx}"
                                 f"[l % {X}] += v{acc}{sfx}a[l]; {acc}{sfx}[(l + EMBER_VW / 2) % {X}] += "
                                 f"v{acc}{sfx}b[l]; }}")
            lines.append("    }")
            if end < n:
                lines.append(f"    for (int64_t findex = {end}; findex < {n}; ++findex) {{")
                lines.append(f"      const int64_t xi = findex % {X}, xindex = xi, rindex = findex / {X};")
                lines += [f"      {self._scalar(st)}" for st in sec.stmts]
                lines.append("    }")
            lines.append("  }")
        return lines

    @staticmethod
    def _run(vec: Any, stmts: list, ind: str, lo: str, hi: str) -> list[str]:
        """The vector loop over ``findex`` in ``[lo, hi)``; its sums go to a block's partials (cpp_cascade)."""
        lines = [f"{ind}for (int64_t findex = {lo}; findex < {hi}; findex += EMBER_VW) {{"]
        for st in stmts:
            if isinstance(st, Accumulate):
                v, a = vec._v(st.var), f"v{st.acc}"
                lines.append(f"{ind}  {cpp_vec.wf_lane_update(a, '', '_s1', v)}" if st.reduce_type == "welford"
                             else f"{ind}  {a}_p += {v};")
            else:
                lines += [f"{ind}  {ln}" for ln in vec.stmt(st).split("\n")]
        return lines + [f"{ind}}}"]

    def _scalar(self, st: Any) -> str:
        """A statement for one point: x-level values and the accumulators are per-point arrays."""
        w = self.w
        if isinstance(st, Accumulate):
            v = f"{st.var}[xi]" if st.var in self.xvars else st.var
            return f"{st.acc}[xi] += (double){v} * {v}; {st.acc}_s1[xi] += {v};" if st.reduce_type == "welford" else \
                f"{st.acc}[xi] += {v};"
        if isinstance(st, Assign) and st.kind == "reduced":
            acc, rt = st.args
            e = f"(float)ember_m2_from_sums({acc}[xi], {acc}_s1[xi], (double){w.R})" if rt == "welford" else \
                f"{acc}[xi]"
            return f"{st.var}[xi] = {e};"
        saved, w.xvars = w.xvars, self.xvars
        try:
            return w.stmt(st)
        finally:
            w.xvars = saved


def coef(e: Any, sym: Any) -> Any:
    """The coefficient of ``sym`` in ``e``'s terms linear in it (0 when none is)."""
    for term in sympy.Add.make_args(e):
        if term == sym:
            return 1
        if isinstance(term, sympy.Mul) and sym in term.args and all(a.is_Number for a in term.args if a != sym):
            return term / sym
    return 0


FINDEX = sympy.Symbol("findex", integer=True, nonnegative=True)


def _flat_index(e: Any, X: int) -> Any:
    """``e`` over ``findex`` (``xindex = findex % X``, ``rindex = findex // X``) when it is ``X * rindex +
    xindex + c``, ``xindex + c`` or free of both; else None."""
    if not isinstance(e, sympy.Basic) or not e.free_symbols & {XINDEX, RINDEX}:
        return e
    if not isinstance(e, sympy.Expr):
        return None          # a condition on the point (the vector loops take conditions invariant per vector)
    a, b = coef(e, RINDEX), coef(e, XINDEX)
    rest = sympy.expand(e - a * RINDEX - b * XINDEX)
    if rest.free_symbols & {XINDEX, RINDEX}:
        return None
    if b == 1 and a == X:
        return FINDEX + rest
    if b == 1 and a == 0:
        return sympy.Mod(FINDEX, X) + rest
    return rest if a == 0 and b == 0 else None


def _flat(st: Any, X: int) -> Any:
    """A statement of a reduction loop with its indices over ``findex``, or None."""
    if isinstance(st, Accumulate):
        return st
    if isinstance(st, Store):
        idx = _flat_index(st.index, X)
        if idx is None or st.mask is not None or st.scatter:
            return None
        return dataclasses.replace(st, index=idx)
    if st.kind == "load":
        buf, idx, mask = st.args
        idx = _flat_index(idx, X)
        if idx is None or (mask is not None and getattr(mask, "free_symbols", set()) & {XINDEX, RINDEX}):
            return None
        return dataclasses.replace(st, args=(buf, idx, mask))
    if st.kind == "index":
        idx = _flat_index(st.args[0], X)
        return None if idx is None else dataclasses.replace(st, args=(idx,))
    return st


def _reads(st: Any) -> tuple:
    return (st.var,) if isinstance(st, (Accumulate, Store)) else cpp_vec._operands(st)
