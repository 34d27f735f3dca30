"""The C++/OpenMP kernel backend for CPU tensors.

Input: the ``KernelBody`` of each scheduled kernel of one graph (built with ``persistent=False``: values of an
``r`` section never cross into another). Output: one translation unit per graph holding one
``extern "C" void kernelN(T* buf..., int nthreads)`` per kernel (pointers in the order of ``body.buffers``;
indices are element offsets from each tensor's data pointer), compiled by ``cpp_build`` and called through
ctypes.

Loops: ``for xindex`` over the outer points; each ``r`` section is a ``for rindex`` loop with its accumulators
declared before it. Pointwise kernels vectorize the ``x`` loop (``omp simd``), reductions vectorize their
``r`` loops with ``omp simd reduction`` clauses (a horizontal combine; amax/amin carry a NaN flag so NaN
propagates as in torch). The outer loop runs on OpenMP threads only when the kernel has enough work (tiny
kernels stay on the calling thread); a kernel with few outer points but long reductions parallelizes its
reduction loops instead. The thread count is ``torch.get_num_threads()`` at call time.
"""
from __future__ import annotations

import ctypes
import os
import re
from typing import Any, Callable

import sympy
import torch

from ember.loopir.indexing import RINDEX, XINDEX
from ember.loopir.kernel import HEAVY_OPS, Accumulate, Assign, KernelBody, Section, Store, stash_recomputed

from . import cpp_cascade, cpp_colred, cpp_ops as C
from .cpp_colred import coef
from . import cpp_vec
from .cpp_build import CppCache, cpu_features, default_cache
from .cpp_prelude import PRELUDE, vector_math_decls
from ember.heuristics import heuristics


def persistent(kernel: Any, options: Any = None) -> bool:
    return False


def vector_width() -> int:
    """float lanes of the explicit vector loops: 16 where the CPU has AVX-512, else 8."""
    return 16 if "avx512f" in cpu_features() else 8


_cname = C.cname


class _KernelWriter:
    def __init__(self, body: KernelBody) -> None:
        self.body = body
        k = body.kernel
        # sizes: ints, or sympy expressions over size symbols (kernel arguments) whose performance decisions
        # (threads, vector loops, blocks) use the hints; every loop then runs right for any size (tails)
        self.X, self.R = _int_or_expr(k.xnumel), _int_or_expr(k.rnumel)
        self.symbolic = not isinstance(self.X, int) or not isinstance(self.R, int)
        table = body.table
        self.hX, self.hR = (table.hint(self.X), table.hint(self.R)) if self.symbolic else (self.X, self.R)
        self.cX, self.cR = C.index(self.X), C.index(self.R)
        self.reduction = any(s.level == "r" for s in body.sections)
        work = self.hX * max(self.hR, 1) * _cost(body)
        h = heuristics()
        self.par_x = work >= h.cpp_parallel_min_work and \
            self.hX >= min(h.cpp_parallel_min_x, 4 * torch.get_num_threads())
        # a row split across threads cannot use one thread's scratch row: scratch kernels keep rows whole
        self.par_r = self.reduction and not self.par_x and work >= h.cpp_parallel_min_work and not body.scratch
        # scatters: a loop of plain stores runs in order on one thread (a later point's store wins, as in eager's
        # CPU kernels); adds run on threads, each atomic; neither in ``simd`` lanes (two lanes may hit one address)
        scatters = [st for sec in body.sections for st in sec.stmts if isinstance(st, Store) and st.scatter]
        self.scatter = bool(scatters)
        if any(st.mode == "store" for st in scatters):
            self.par_x = False
        self.parallel = self.par_x or self.par_r
        # reductions whose reduced loads are strided but contiguous in x (sums over outer dims) vectorize over
        # a block of cpp_tile outer points: x-level values become arrays, the r loop runs each row of the block
        self.width = vector_width()
        # a symbolic kernel takes XVec when its outer points are whole vectors (``XVec.ok``); Flat needs X
        cands = (cpp_colred.XVec(self),) + (() if self.symbolic else (cpp_colred.Flat(self),))
        self.xvec = next((c for c in cands if c.ok()), None)
        self.tiled = self.xvec is None and self.reduction and self.hX >= 16 and _x_contiguous(body)
        self.wf_sums: set[str] = set()     # Welford accumulators of scalar loops, kept as shifted sums instead
        self.part: dict[str, str] = {}      # accumulators being added through a block's partials (cpp_cascade)
        self.xvars: set[str] = set()
        if self.tiled:
            for sec in body.sections:
                self.xvars |= {acc for acc, _, _ in sec.accumulators}
                self.xvars |= {acc + "_mean" for acc, rt, _ in sec.accumulators if rt == "welford"}
                self.xvars |= {acc + "_nan" for acc, rt, dt in sec.accumulators if self._nan_flag(rt, dt)}
                self.xvars |= {st.var for st in sec.stmts if isinstance(st, Assign) and st.level == "x"}

    def ref(self, var: str) -> str:
        return f"{var}[xi]" if var in self.xvars else var

    def index(self, e: Any) -> str:
        """An index expression as C; a loaded value in it (an indirect index: ``p[4 * tmp5 + xindex]``) that
        the kernel keeps per outer point (``xvars``: tiled and interleaved reductions) reads its point's."""
        text = C.index(e)
        names = {s.name for s in getattr(e, "free_symbols", ())} & self.xvars
        for name in names:
            text = re.sub(rf"\b{name}\b", f"{name}[xi]", text)
        return text

    # -- statements ------------------------------------------------------------------------------------------
    def dtype(self, var: str) -> torch.dtype:
        return self.body.dtypes[var]

    def assign(self, st: Assign) -> str:
        ct = C.compute_type(st.dtype)
        if st.kind == "load":
            buf, idx, mask = st.args
            src = self.body.buffer_dtype(buf)
            ld = C.load_expr(src, _cname(buf), self.index(idx))
            ld = C.cast(ld, src, st.dtype) if src != st.dtype else ld
            e = ld if mask is None else f"({self.index(mask)} ? ({ct}){ld} : ({ct})0)"
        elif st.kind == "const":
            e = C.const(st.args[0], st.dtype)
        elif st.kind == "index":
            e = f"(({ct}){self.index(st.args[0])})"
        elif st.kind == "cast":
            e = C.cast(self.ref(st.args[0]), self.dtype(st.args[0]), st.dtype)
        elif st.kind == "reduced" and st.args[0] in self.wf_sums:      # M2 = s2 - s1^2 / n, not below 0
            acc = st.args[0]
            e = f"ember_m2_from_sums({acc}, {acc}_s1, (double){self.cR})"
            if st.dtype is torch.float32 and st.var not in self.xvars:
                # kept in float64: the next op (the variance's division) rounds once, as eager's float64
                # variance does (M2 rounded to float, then the quotient, was up to 2.3x eager's error)
                return f"const double {st.var} = {e};"
            e = f"({ct}){e}"
        elif st.kind == "reduced" and st.args[1] == "welford" and self.tiled:     # float64 sums per outer point
            acc = st.args[0]
            e = f"({ct})ember_m2_from_sums({self.ref(acc)}, {self.ref(acc + '_mean')}, (double){self.cR})"
        elif st.kind == "reduced":
            acc, rt = st.args
            e = f"({self.ref(acc + '_nan')} ? std::numeric_limits<{ct}>::quiet_NaN() : {self.ref(acc)})" \
                if self._nan_flag(rt, st.dtype) else self.ref(acc) + (".m2" if rt == "welford" else "")
            e = C.round_low(st.dtype, e)
        else:
            name, *args = st.args
            e = C.round_low(st.dtype, C.op(name, [self.ref(a) for a in args], [self.dtype(a) for a in args],
                                           st.dtype))
        n = checked_indices(self.body).get(st.var)
        if n is not None:
            e = f"ember_check_index<{ct}>({e}, {C.index(n)}, &ember_err)"
        if st.var in self.xvars:
            return f"{st.var}[xi] = {e};"
        return f"const {ct} {st.var} = {e};"

    @staticmethod
    def _nan_flag(rt: str, dtype: torch.dtype) -> bool:
        return rt in ("amax", "amin") and dtype.is_floating_point

    def accumulate(self, st: Accumulate) -> str:
        a, v, rt = self.part.get(st.acc) or self.ref(st.acc), self.ref(st.var), st.reduce_type
        if rt == "sum":
            return f"{a} += {v};"
        if rt == "prod":
            return f"{a} *= {v};"
        if rt in ("amax", "amin"):
            cmp = ">" if rt == "amax" else "<"
            out = f"{a} = ({v} {cmp} {a}) ? {v} : {a};"
            if self._nan_flag(rt, st.dtype):
                out += f" {self.ref(st.acc + '_nan')} |= ({v} != {v});"
            return out
        if rt == "any":
            return f"{a} |= ({v} != 0);"
        if rt == "all":
            return f"{a} &= ({v} != 0);"
        if st.acc in self.wf_sums:
            return f"{self.part.get(st.acc + '_s1') or a + '_s1'} += (double){v}; {a} += (double){v} * {v};"
        if rt == "welford" and self.tiled:     # float64 sums of the points (``_mean``) and of their squares
            return f"{self.ref(st.acc + '_mean')} += (double){v}; {a} += (double){v} * {v};"
        if rt == "welford":
            return f"{a} = ember_wf_update({a}, (double){v});"
        raise NotImplementedError(f"ember.codegen.cpp: reduction {rt!r}")

    def store(self, st: Store) -> str:
        bdt = self.body.buffer_dtype(st.buf)
        v = self.ref(st.var)
        v = C.cast(v, self.dtype(st.var), bdt) if self.dtype(st.var) != bdt else v
        dst = f"{_cname(st.buf)}[{self.index(st.index)}]"
        if st.mode == "add":       # dtypes with atomic adds only (ember.loopir.scatter)
            out = f"{{\n#pragma omp atomic\n{dst} += {v};\n}}" if self.par_x else f"{dst} += {v};"
        else:
            out = f"{dst} = {C.store_value(bdt, v)};"
        return f"if ({self.index(st.mask)}) {out}" if st.mask is not None else out

    def stmt(self, st: Any) -> str:
        if isinstance(st, Assign):
            return self.assign(st)
        if isinstance(st, Accumulate):
            return self.accumulate(st)
        return self.store(st)

    # -- accumulators ----------------------------------------------------------------------------------------
    @staticmethod
    def acc_type(rt: str, dtype: torch.dtype) -> str:
        # Welford states in float64 whatever the dtype: a float running M2 (or a float combine of the vector
        # lanes' float64 sums) rounded at each point; ATen's CPU kernels accumulate variances in double too
        return "ember_wf<double>" if rt == "welford" else C.compute_type(dtype)

    def init(self, rt: str, dtype: torch.dtype) -> str:
        ct = C.compute_type(dtype)
        if rt == "welford":
            return f"{self.acc_type(rt, dtype)}{{0, 0, 0}}"
        if rt == "sum" or rt == "any":
            return f"({ct})0"
        if rt == "prod" or rt == "all":
            return f"({ct})1"
        if dtype.is_floating_point:
            return f"{'-' if rt == 'amax' else ''}std::numeric_limits<{ct}>::infinity()"
        return f"std::numeric_limits<{ct}>::{'lowest' if rt == 'amax' else 'max'}()"

    def clauses(self, sec: Section, names: dict[str, str] | None = None) -> str:
        """OpenMP reduction clauses for the section's accumulators (``names``: those renamed to partials)."""
        ops = {"sum": "+", "prod": "*", "amax": "max", "amin": "min", "any": "|", "all": "&"}
        out = []
        for orig, rt, dt in sec.accumulators:
            acc = (names or {}).get(orig, orig)
            if orig in self.wf_sums:
                out.append(f"reduction(+:{acc}) reduction(+:{(names or {}).get(orig + '_s1', orig + '_s1')})")
                continue
            out.append(f"reduction({ops.get(rt) or 'ember_wf_double'}:{acc})")
            if self._nan_flag(rt, dt):
                out.append(f"reduction(|:{acc}_nan)")
        return " ".join(out)

    # -- loops -----------------------------------------------------------------------------------------------
    def r_loop(self, sec: Section, ind: str) -> list[str]:
        if not sec.accumulators and not self.par_r:
            cuts = _row_cuts(sec.stmts, self.R) if isinstance(self.R, int) else []
            if cuts:
                return self.row_segments(sec, ind, cuts)
        lines = []
        vec = cpp_vec.VecLoop(self, sec.stmts, RINDEX, self.width, sec.accumulators)
        # a symbolic row takes the vector loop whatever its hint (a tail loop runs what is left): its rows of other
        # lengths are then added as a static row of theirs would be
        vector = (self.hR >= self.width or not isinstance(self.R, int)) and vec.ok()
        if not vector:
            # a scalar loop (strided rows, dtypes without vector lanes): Welford's update is a chain through a
            # division per point (a per-channel NHWC batch norm statistic ran 10x slower than two sums), so M2
            # comes from the float64 sums of the values and of their squares (as the vector loops' lanes do,
            # cpp_vec.PRELUDE); the values are already shifted by the row's first point (ember.loopir.welford)
            self.wf_sums |= {acc for acc, rt, _ in sec.accumulators if rt == "welford"}
        for acc, rt, dt in sec.accumulators:
            if acc in self.wf_sums:
                lines.append(f"{ind}double {acc} = 0, {acc}_s1 = 0;")
                continue
            lines.append(f"{ind}{self.acc_type(rt, dt)} {acc} = {self.init(rt, dt)};")
            if self._nan_flag(rt, dt):
                lines.append(f"{ind}int {acc}_nan = 0;")
        start, par_r = 0, self.par_r
        if vector:
            start = self.R - self.R % self.width
            cstart = C.index(start)
            if self.par_r:        # chunks of whole vectors across the threads, each folded into the accumulators
                if isinstance(start, int):
                    ch: Any = max(self.width, -(-start // (16 * self.width)) * self.width)
                else:               # computed at run time: no size (nor hint) in the source
                    w16 = 16 * self.width
                    lines.append(f"{ind}const int64_t rchunk_n = std::max<int64_t>({self.width}, "
                                 f"(({cstart} + {w16 - 1}) / {w16}) * {self.width});")
                    ch = "rchunk_n"
                lines.append(f"{ind}#pragma omp parallel for num_threads(nthreads) schedule(static) "
                             f"{self.clauses(sec)}".rstrip())
                chunks = -(-start // ch) if isinstance(ch, int) else f"({cstart} + {ch} - 1) / {ch}"
                lines.append(f"{ind}for (int64_t rchunk = 0; rchunk < {chunks}; ++rchunk) {{")
                lines += vec.loop(ind + "  ", f"rchunk * {ch}", f"std::min<int64_t>({cstart}, (rchunk + 1) * {ch})")
                lines.append(f"{ind}}}")
            else:
                lines += vec.loop(ind, "0", cstart)
            if start == self.R:
                return lines
            par_r = False         # the tail is shorter than a vector
        # a reduction loop split across threads is a plain ``parallel for``: GCC 12 miscompiles ``simd`` there
        # when the loop reads a ``const bool`` of the enclosing scope (shared into the region): a segfault
        # with ``parallel for simd``, wrong values with ``simd`` nested in ``parallel for`` (argmax of few long
        # rows). The auto-vectorizer still vectorizes what it may.
        return lines + self.scalar_r_loop(sec, ind, C.index(start), par_r, tail=vector)

    def scalar_r_loop(self, sec: Section, ind: str, start: str, par_r: bool, tail: bool = False) -> list[str]:
        """The ``rindex`` loop from ``start``, one point at a time, its float sums added in blocks
        (``cpp_cascade``): each block into partials ``<acc>_p`` (Welford kept as sums: also ``<acc>_s1_p``).
        ``tail``: the points after a vector loop, fewer than a vector (one block)."""
        sums = [] if tail else [(acc, dt) for acc, rt, dt in sec.accumulators
                                if (rt == "sum" and dt.is_floating_point) or acc in self.wf_sums]
        partials = [("double" if acc in self.wf_sums else C.compute_type(dt), acc + s, "0") for acc, dt in sums
                    for s in (("", "_s1") if acc in self.wf_sums else ("",))]
        names = {acc: acc + "_p" for _, acc, _ in partials}

        def inner(i: str, lo: str, hi: str) -> list[str]:
            self.part = names
            try:
                out = [] if par_r and sums else [f"{i}#pragma omp simd {self.clauses(sec, names)}".rstrip()]
                out.append(f"{i}for (int64_t rindex = {lo}; rindex < {hi}; ++rindex) {{")
                out += [f"{i}  {self.stmt(st)}" for st in sec.stmts]
                return out + [f"{i}}}"]
            finally:
                self.part = {}
        if par_r:
            # threads take whole blocks (or, with no sums, the points): the reductions are over the totals
            pragma = f"#pragma omp parallel for num_threads(nthreads) schedule(static) {self.clauses(sec)}"
            pragma = pragma.rstrip()
            if not sums:
                return [f"{ind}{pragma}"] + inner(ind, start, self.cR)[1:]
        else:
            pragma = ""
        blocks = cpp_cascade.sum_blocks(partials)
        return cpp_cascade.cascade(ind, "rindex", start, self.cR, 1, blocks, inner,
                                   pragma if par_r else "", always=par_r)

    def row_segments(self, sec: Section, ind: str, cuts: list[int]) -> list[str]:
        """A row of concatenated parts (``rindex < 64 ? a[...] : rindex < 128 ? b[...] : c[...]``) as one loop
        per part, each with its conditions decided: a part's loads are then plain, and vector loops where
        they move with ``rindex`` (a split qkv gradient's heads)."""
        lines = []
        bounds = [0, *cuts, self.R]
        for lo, hi in zip(bounds, bounds[1:]):
            stmts = [_decided(st, lo, hi) for st in sec.stmts]
            lines.append(f"{ind}{{")
            vec = cpp_vec.VecLoop(self, stmts, RINDEX, self.width)
            vend = lo
            if lo % self.width == 0 and hi - lo >= self.width and vec.ok():
                vend = hi - (hi - lo) % self.width
                lines += vec.loop(ind + "  ", str(lo), str(vend))
            if vend < hi:
                lines += [f"{ind}  #pragma omp simd", f"{ind}  for (int64_t rindex = {vend}; rindex < {hi}; ++rindex) {{"]
                lines += [f"{ind}    {self.stmt(st)}" for st in stmts]
                lines.append(f"{ind}  }}")
            lines.append(f"{ind}}}")
        return lines

    def function(self) -> str:
        """The kernel's C++ function; one that bounds-checks loaded indices returns whether one was out of range."""
        src = self._function()
        if not checked_indices(self.body):
            return src
        head, rest = src.split("{\n", 1)
        body, close = rest.rsplit("}", 1)
        return (head.replace('extern "C" void', 'extern "C" int', 1) + "{\n  int ember_err = 0;\n" + body
                + "  return ember_err;\n}" + close)

    def _function(self) -> str:
        b = self.body
        params = []
        aliased = b.aliased         # read and written through two names: no __restrict__
        for name, (dt, role) in b.buffers.items():
            const = "const " if role == "in" else ""
            restrict = "" if name in aliased else " __restrict__"
            params.append(f"{const}{C.storage_type(dt)}*{restrict} {_cname(name)}")
        params += [f"int64_t {s}" for s in b.symbols]      # size symbols, after the buffers (by name)
        params.append("int nthreads")
        lines = [f"// {b.name}: {b.kernel.fused()}",
                 f"// x={self.X} r={self.R}{' parallel' if self.parallel else ''}",
                 f'extern "C" void {b.name}({", ".join(params)}) {{']
        if not self.reduction and self.hX >= self.width:
            vec = cpp_vec.VecLoop(self, b.sections[0].stmts, XINDEX, self.width)
            if len(b.sections) == 1 and vec.ok():
                return "\n".join(lines + self.vector_pointwise(vec) + ["}"]) + "\n"
        if self.xvec is not None:
            return "\n".join(lines + self.xvec.lines() + ["}"]) + "\n"
        if self.tiled:
            lines += self._x_pragma() + self.tiled_loops()
            lines.append("}")
            return "\n".join(lines) + "\n"
        return "\n".join(lines + self._x_pragma() + self.x_loop(0) + ["}"]) + "\n"

    def _x_pragma(self) -> list[str]:
        if self.par_x:
            return ["  #pragma omp parallel for num_threads(nthreads) schedule(static)"
                    if self.reduction or self.scatter else
                    "  #pragma omp parallel for simd num_threads(nthreads) schedule(static)"]
        return ["  #pragma omp simd"] if not self.reduction and not self.scatter else []

    def x_loop(self, start: int) -> list[str]:
        """The loop over outer points ``start`` to ``X``, one point at a time."""
        lines = [f"  for (int64_t xindex = {C.index(start)}; xindex < {self.cX}; ++xindex) {{"]
        lines += [f"    alignas(64) {C.compute_type(dt)} {_cname(n)}[{self.R}];" for n, dt in self.body.scratch.items()]
        for sec in self.body.sections:
            if sec.level == "r":
                lines += self.r_loop(sec, "    ")
            else:
                lines += [f"    {self.stmt(st)}" for st in sec.stmts]
        lines.append("  }")
        return lines

    def vector_pointwise(self, vec: "cpp_vec.VecLoop") -> list[str]:
        par = "#pragma omp parallel for num_threads(nthreads) schedule(static)" if self.par_x else ""
        start = self.X - self.X % self.width
        lines = vec.loop("  ", "0", C.index(start), par)
        if start != self.X:     # a tail shorter than a vector (symbolic sizes: always emitted)
            lines += ["  #pragma omp simd",
                      f"  for (int64_t xindex = {C.index(start)}; xindex < {self.cX}; ++xindex) {{"]
            lines += [f"    {self.stmt(st)}" for st in self.body.sections[0].stmts]
            lines.append("  }")
        return lines

    def tiled_loops(self) -> list[str]:
        """Blocks of cpp_tile outer points; every statement runs in an ``omp simd`` loop over the block."""
        lines = []
        lines.append(f"  for (int64_t xb = 0; xb < {self.cX}; xb += {heuristics().cpp_tile}) {{")
        lines.append(f"    const int64_t xn = std::min<int64_t>({heuristics().cpp_tile}, {self.cX} - xb);")
        # Welford per outer point: float64 sums of the points (``<acc>_mean``) and of their squares (``<acc>``)
        acc_types = {acc: "double" if rt == "welford" else self.acc_type(rt, dt)
                     for sec in self.body.sections for acc, rt, dt in sec.accumulators}
        acc_types |= {acc + "_mean": "double" for sec in self.body.sections
                      for acc, rt, dt in sec.accumulators if rt == "welford"}
        for v in sorted(self.xvars):
            ct = "int" if v.endswith("_nan") and v not in self.body.dtypes else \
                acc_types.get(v) or C.compute_type(self._xdtype(v))
            lines.append(f"    {ct} {v}[{heuristics().cpp_tile}];")

        def block(stmts: list[str], ind: str) -> list[str]:
            return [f"{ind}#pragma omp simd", f"{ind}for (int64_t xi = 0; xi < xn; ++xi) {{",
                    f"{ind}  const int64_t xindex = xb + xi;"] + [f"{ind}  {t}" for t in stmts] + [f"{ind}}}"]
        for sec in self.body.sections:
            if sec.level == "x":
                if sec.stmts:
                    lines += block([self.stmt(st) for st in sec.stmts], "    ")
                continue
            inits = []
            for acc, rt, dt in sec.accumulators:
                if rt == "welford":
                    inits += [f"{acc}[xi] = 0;", f"{acc}_mean[xi] = 0;"]
                    continue
                inits.append(f"{acc}[xi] = {self.init(rt, dt)};")
                if self._nan_flag(rt, dt):
                    inits.append(f"{acc}_nan[xi] = 0;")
            if inits:
                lines += block(inits, "    ")
            lines += self.tiled_r_loop(sec, block)
        lines.append("  }")
        return lines

    def tiled_r_loop(self, sec: Section, block: Callable[[list[str], str], list[str]]) -> list[str]:
        """The ``rindex`` loop of a block of outer points; float sums go through per-block partial arrays
        ``<acc>_p`` (``cpp_cascade``)."""
        sums = [(acc, dt) for acc, rt, dt in sec.accumulators if rt == "sum" and dt.is_floating_point]
        names = {acc: f"{acc}_p[xi]" for acc, _ in sums}
        tile = heuristics().cpp_tile

        def blocks(total: str, part: str) -> tuple[list[str], list[str]]:
            start = [f"{C.compute_type(dt)} {acc}{part}[{tile}];" for acc, dt in sums]
            return (start + block([f"{acc}{part}[xi] = 0;" for acc, _ in sums], ""),
                    block([f"{acc}{total}[xi] += {acc}{part}[xi];" for acc, _ in sums], ""))

        def inner(i: str, lo: str, hi: str) -> list[str]:
            self.part = names
            try:
                out = [f"{i}for (int64_t rindex = {lo}; rindex < {hi}; ++rindex) {{"]
                return out + block([self.stmt(st) for st in sec.stmts], i + "  ") + [f"{i}}}"]
            finally:
                self.part = {}
        return cpp_cascade.cascade("    ", "rindex", "0", self.cR, 1, blocks if sums else None, inner)

    def _xdtype(self, v: str) -> torch.dtype:
        if v in self.body.dtypes:
            return self.body.dtypes[v]
        return next(dt for sec in self.body.sections for acc, _, dt in sec.accumulators if acc == v)


def _int_or_expr(n: Any) -> Any:
    """A kernel size as an ``int``, or the sympy expression of a symbolic one."""
    try:
        return int(n)
    except TypeError:
        return n


def _row_relations(e: Any) -> list:
    """The conditions on ``rindex`` alone (linear, no division) in a sympy expression."""
    if not isinstance(e, sympy.Basic):
        return []
    out = []
    for rel in e.atoms(sympy.core.relational.Relational):
        d = rel.lhs - rel.rhs
        if rel.free_symbols == {RINDEX} and not d.has(sympy.floor, sympy.Mod) and d.diff(RINDEX).is_Integer:
            out.append(rel)
    return out


def _row_conditions(stmts: list) -> list:
    """The conditions on ``rindex`` alone in a section's load masks and index values."""
    return [rel for st in stmts if isinstance(st, Assign) and st.kind in ("load", "index")
            for rel in _row_relations(st.args[2] if st.kind == "load" else st.args[0])]


def _row_cuts(stmts: list, rnumel: int) -> list[int]:
    """Where a row's conditions change value (the boundaries of its concatenated parts), at most 7."""
    cuts: set[int] = set()
    for rel in _row_conditions(stmts):
        first = bool(rel.subs(RINDEX, 0))
        lo, hi = 0, rnumel        # the first point where the condition differs from its value at 0
        if bool(rel.subs(RINDEX, rnumel - 1)) == first:
            continue
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if bool(rel.subs(RINDEX, mid)) == first:
                lo = mid
            else:
                hi = mid
        cuts.add(hi)
    return sorted(cuts) if 0 < len(cuts) <= 7 else []


def _decided(st: Any, lo: int, hi: int) -> Any:
    """``st`` with its conditions on ``rindex`` replaced by their value over ``[lo, hi)`` (constant there);
    a load whose mask is then false is the constant 0, one whose mask is true loads plainly."""
    if not isinstance(st, Assign) or st.kind not in ("load", "index"):
        return st

    def fix(e: Any) -> Any:
        rels = _row_relations(e)
        return e.xreplace({r: sympy.true if bool(r.subs(RINDEX, lo)) else sympy.false for r in rels}) if rels else e
    if st.kind == "index":
        return Assign(st.var, "index", (fix(st.args[0]),), st.dtype, st.level)
    buf, idx, mask = st.args
    mask = fix(mask)
    if mask is sympy.false:
        return Assign(st.var, "const", (0,), st.dtype, st.level)
    return Assign(st.var, "load", (buf, idx, None if mask is sympy.true else mask), st.dtype, st.level)


def _cost(body: KernelBody) -> int:
    """Work per point relative to a plain copy (transcendentals count 8, loads through div/mod index arithmetic
    4: permuting copies are scalar gathers): heavy kernels get threads sooner."""
    n = 0
    for sec in body.sections:
        for st in sec.stmts:
            if isinstance(st, Assign):
                n += 8 if st.kind == "op" and st.args[0] in HEAVY_OPS else 4 if st.kind == "load" and \
                    isinstance(st.args[1], sympy.Basic) and st.args[1].has(sympy.floor, sympy.Mod) else 1
    return max(1, n // 4)


def _x_contiguous(body: KernelBody) -> bool:
    """True when the reduction loops' memory accesses are contiguous in xindex rather than in rindex."""
    rc = xc = 0
    for sec in body.sections:
        if sec.level != "r":
            continue
        for st in sec.stmts:
            idx = st.args[1] if isinstance(st, Assign) and st.kind == "load" else (
                st.index if isinstance(st, Store) else None)
            if not isinstance(idx, sympy.Basic) or RINDEX not in idx.free_symbols:
                continue
            if coef(idx, RINDEX) == 1:
                rc += 1
            elif coef(idx, XINDEX) == 1:
                xc += 1
    return xc > rc


def source(body: KernelBody) -> str:
    text = getattr(body, "_cpp_source", None)
    if text is None:
        w = _KernelWriter(body)
        text = w.function()
        body._cpp_source = text  # type: ignore[attr-defined]
        body._cpp_parallel = w.parallel  # type: ignore[attr-defined]
    return text


def translation_unit(bodies: list[KernelBody], graph_name: str, sources: dict[str, str] | None = None) -> str:
    decls, _ = vector_math_decls()
    # the graph's name stays out of the source: it is part of the cache key, and names differ between runs
    parts = ["// ember C++ kernels (ember.codegen.cpp)", PRELUDE, decls,
             f"#define EMBER_VW {vector_width()}", cpp_vec.PRELUDE, cpp_cascade.PRELUDE]
    parts += [sources[b.name] if sources else source(b) for b in bodies]
    return "\n".join(parts)


def _parts(bodies: list[KernelBody], srcs: dict[str, str], n: int) -> list[list[KernelBody]]:
    """``bodies`` in at most ``n`` runs of about equal source length (each unit repeats the prelude, so units
    are made only where each gets at least ``cpp_kernels_per_unit`` kernels)."""
    if n <= 1:
        return [bodies]
    sizes = [len(srcs[b.name]) for b in bodies]
    share, parts, cur, acc = sum(sizes) / n, [], [], 0
    for b, sz in zip(bodies, sizes):
        cur.append(b)
        acc += sz
        if acc >= share * (len(parts) + 1) and len(parts) < n - 1:
            parts.append(cur)
            cur = []
    return parts + [cur] if cur else parts


def checked_indices(body: KernelBody) -> dict[str, int]:
    """Variables the kernel uses as an index into a dimension of known size: checked to lie in [0, size)."""
    return {v: n for v, n in body.extents.items() if isinstance(n, (int, sympy.Expr))}


class IndexOutOfRange(IndexError, RuntimeError):
    """An index loaded from a tensor was outside its dimension (eager raises IndexError for indexing and
    index_select, RuntimeError for gather: this is both). Where capture can name the op that raised, eager's
    own error is raised instead (``capture.torch.located``)."""
    stands_in_for_eager = True


def _caller(fn: Any, n: int, parallel: bool, checked: bool = False, symbols: int = 0) -> Callable[..., None]:
    """``call(*buffers, *symbol_values)``: the kernel on the tensors' data pointers and the size symbols."""
    names = [f"a{i}" for i in range(n)]
    syms = [f"s{i}" for i in range(symbols)]
    ptrs = ", ".join([f"{a}.data_ptr()" for a in names] + syms)
    nt = "get_num_threads()" if parallel else "1"
    call = f"fn({ptrs}{', ' if n + symbols else ''}{nt})"
    body = (f"    if {call}:\n        raise IndexOutOfRange('index out of range: an index tensor holds a value "
            f"outside the dimension it indexes')\n" if checked else f"    {call}\n")
    src = f"def call({', '.join(names + syms)}):\n{body}"
    ns: dict[str, Any] = {"fn": fn, "get_num_threads": torch.get_num_threads, "IndexOutOfRange": IndexOutOfRange}
    exec(compile(src, "<ember cpp call>", "exec"), ns)
    return ns["call"]


def compile_kernels(bodies: list[KernelBody], options: Any, graph_name: str,
                    cache: CppCache | None = None) -> list[Callable[..., None]]:
    """Compile all of a graph's kernels as one translation unit; one callable per body, in order."""
    if not bodies:
        return []
    for b in bodies:
        # C++ runs each reduction loop over the same points in order; a scratch row lives on the stack of the
        # x loop's iteration (not in blocks of outer points, whose rows interleave)
        stash_recomputed(b, 0 if _x_contiguous(b) else heuristics().cpp_scratch_room)
    cache = cache or default_cache()
    # a graph with many kernels compiles as several translation units, one compiler process per core
    srcs = {b.name: source(b) for b in bodies}
    parts = _parts(bodies, srcs, min(os.cpu_count() or 1, -(-len(bodies) // heuristics().cpp_kernels_per_unit)))
    builds = [cache.start(translation_unit(part, graph_name, srcs), graph_name) for part in parts]
    lib_of = {b.name: build for part, build in zip(parts, builds) for b in part}
    out = []
    for b in bodies:
        fn = lib_of[b.name].result()[b.name]
        n_sym = len(b.symbols)
        fn.argtypes = [ctypes.c_void_p] * len(b.buffers) + [ctypes.c_int64] * n_sym + [ctypes.c_int]
        checked = bool(checked_indices(b))
        fn.restype = ctypes.c_int if checked else None
        call = _caller(fn, len(b.buffers), b._cpp_parallel, checked, n_sym)  # type: ignore[attr-defined]
        # where it came from, for ahead-of-time packages (ember.deploy.package)
        build = lib_of[b.name]
        call.ember_cpp = {"so": str(build.cache.store.entry(f"{build.key}.so")), "symbol": b.name,
                          "buffers": len(b.buffers), "parallel": bool(b._cpp_parallel),  # type: ignore[attr-defined]
                          "checked": checked, "symbols": n_sym}
        out.append(call)
    return out


__all__ = ["persistent", "compile_kernels", "source", "translation_unit"]
