"""KernelBody -> Triton kernel source and its launch configuration.

Pointwise kernels are 1-D: each program handles ``XBLOCK`` consecutive ``xindex`` values. Reductions are
2-D tiles ``[XBLOCK, RBLOCK]`` (``xindex`` a column, ``rindex`` a row). A *persistent* reduction loads a whole
row at once (``RBLOCK >= rnumel``), so r-level values may be reused across the body's r sections; a *looped*
one turns each r section into ``for roffset in range(0, rnumel, RBLOCK)`` carrying ``[XBLOCK, RBLOCK]``
accumulators that are reduced along axis 1 after the loop. Sizes are baked into the source as literals; the
kernel's only parameters are the buffers' pointers, so a launch binds nothing but tensors. A kernel over
symbolic sizes (``triton_sym``) takes its size symbols as int parameters after the pointers instead, masks
every symbolic tail, and is launched on a grid computed from them; ``symbols`` (the graph's ``SymbolTable``)
gives the hints its block sizes are chosen at and records the size classes its choices rely on.

Masks: ``xmask``/``rmask`` exist only where the block does not divide the size; a load's own mask (padding,
concatenation) is and-ed in. Reductions mask with ``rmask`` only (a row past ``xnumel`` is computed and
thrown away), substituting the reduction's identity.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from ember.loopir.expr import bound_symbol
from ember.loopir.indexing import RINDEX, XINDEX, steps_by_one
from ember.loopir.kernel import Accumulate, Assign, KernelBody, Store
from ember.loopir.online import OnlineAccumulate, online_softmax

from . import triton_sym as sym
from .triton_ops import IndexPrinter, cast_expr, compute_dtype, ctl, literal, needs_int64, op_expr, tl_dtype
from ember.heuristics import heuristics

ONLINE_SOFTMAX = True      # looped max-then-sum-of-exp kernels read their rows once (ember.loopir.online)


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


@dataclass(frozen=True)
class LaunchConfig:
    grid: tuple[int, int, int]
    xblock: int
    rblock: int
    num_warps: int
    persistent: bool
    int64: bool
    num_stages: int = 0        # 0: Triton's default
    # symbolic kernels: their int parameters (size symbols, in order) and the program count over them
    # (``grid`` holds its value at the hints)
    symbols: tuple[str, ...] = ()
    grid_expr: Any = None


def is_persistent(rnumel: int, inner: bool) -> bool:
    if rnumel == 1:
        return True
    h = heuristics()
    return next_pow2(rnumel) <= (h.triton_persistent_max if inner else h.triton_outer_persistent_max)


def launch_config(xnumel: int, rnumel: int, reduction: bool, persistent: bool, inner: bool,
                  int64: bool, hinted_row: bool = False) -> LaunchConfig:
    """The heuristic configuration. ``hinted_row``: the row length is symbolic and ``rnumel`` its hint; a
    looped reduction whose hinted row a static kernel would hold whole gets the persistent kernel's blocks
    (``RBLOCK = next_pow2(rnumel)``, several rows per program): one pass over the row at the hinted size, and
    still correct (looped) for every row length, so no guard splits the sizes into classes."""
    if not reduction:
        xb = min(1024, next_pow2(xnumel))
        warps = 4 if xb >= 512 else 2 if xb >= 256 else 1
        rb = 1
    elif persistent or hinted_row and is_persistent(rnumel, inner):
        rb = next_pow2(rnumel)
        xb = min(next_pow2(xnumel), max(1, heuristics().triton_tile // rb), 128)
        warps = max(1, min(8, xb * rb // 256))
    elif inner and xnumel >= heuristics().triton_wide_rows_min_x and rnumel >= heuristics().triton_wide_rows_min_r:
        # many long rows (cross-entropy over a 32k vocabulary for 4096 tokens): a row per program, 4096 points
        # per step (with the online softmax's running max and sum per row: 88% of the H100's copy bandwidth for
        # 4096 x 32768 bf16 against 73% for four rows of 1024 points per step; bench/ce_variants.py (in git history))
        xb, rb, warps = 1, 4096, 8
    elif inner:
        xb, rb, warps = 1, 2048, 8
    else:
        xb, rb, warps = min(64, next_pow2(xnumel)), 64, 8
    return LaunchConfig(((xnumel + xb - 1) // xb, 1, 1), xb, rb, warps, persistent, int64)


def candidate_configs(xnumel: int, rnumel: int, reduction: bool, persistent: bool, inner: bool,
                      int64: bool, hinted_row: bool = False) -> list[LaunchConfig]:
    """What max-autotune benchmarks: the heuristic configuration first, then other block sizes and warps
    (for looped reductions also software pipelining depths)."""
    base = launch_config(xnumel, rnumel, reduction, persistent, inner, int64, hinted_row)
    xmax = next_pow2(xnumel)
    shapes: list[tuple[int, int, int, int]] = []       # (xblock, rblock, num_warps, num_stages)
    if not reduction:
        for xb, w in ((512, 4), (1024, 4), (2048, 8), (4096, 8)):
            shapes.append((min(xb, xmax), 1, w, 0))
    elif persistent:
        rb = next_pow2(rnumel)
        for tile, w in ((1024, 4), (2048, 8), (4096, 8), (4096, 16), (8192, 8), (8192, 16)):
            xb = min(xmax, max(1, tile // rb), 128)
            shapes.append((xb, rb, max(1, min(w, xb * rb // 64)), 0))
    elif inner:
        for xb, rb, w, st in ((1, 1024, 4, 1), (1, 2048, 8, 2), (1, 4096, 8, 2), (4, 1024, 8, 1), (1, 2048, 8, 0),
                              (1, 8192, 16, 0)):
            shapes.append((min(xb, xmax), min(rb, next_pow2(rnumel)), w, st))
    else:
        for xb, rb, w in ((64, 64, 8), (32, 128, 8), (128, 32, 8), (16, 256, 8)):
            shapes.append((min(xb, xmax), min(rb, next_pow2(rnumel)), w, 0))
    out = [base]
    for xb, rb, w, st in shapes:
        c = LaunchConfig(((xnumel + xb - 1) // xb, 1, 1), xb, rb, w, persistent, int64, st)
        if c not in out:
            out.append(c)
    return out


def reduced_load_indices(kernel: Any) -> list:
    """The placed indices of the loads a scheduled kernel's reductions read along ``rindex`` (where it has a
    reduction; else of every node): what decides between the inner and the outer tile. A pointwise node fused
    horizontally into the kernel (its flat range reshaped to the reduction's) must not pick the tile for the
    reduction."""
    from ember.loopir.expr import loads
    from ember.loopir.indexing import place
    from ember.loopir.ir import Reduction
    from ember.loopir.schedule import kernel_placement
    own = {n.name for n in kernel.nodes}
    nodes = [n for n in kernel.nodes if isinstance(n, Reduction)] or list(kernel.nodes)
    out = []
    for n in nodes:
        groups = kernel_placement(kernel, n)
        if groups is None:
            continue
        for ld in loads(n.body):  # type: ignore[attr-defined]
            if ld.buf not in own:
                idx = place(ld.index, groups)
                if RINDEX in getattr(idx, "free_symbols", ()):
                    out.append(idx)
    return out


def inner_reduction(indices: list) -> bool:
    """Whether consecutive reduced points are adjacent in memory for some load (rows are contiguous, or
    contiguous in runs such as the H*W planes an NCHW batch norm reduces over: ``steps_by_one``)."""
    rs = [i for i in indices if isinstance(i, sympy.Basic) and RINDEX in i.free_symbols]
    # loads that do not move with xindex (a LayerNorm's per-row statistics, read by its weight gradient, a
    # column sum) are the same for every column of a tile: the loads that move with it decide
    rs = [i for i in rs if XINDEX in i.free_symbols] or rs
    return not rs or any(steps_by_one(i, RINDEX) for i in rs)


IDENTITY = {"sum": 0, "prod": 1, "any": 0, "all": 1, "welford": 0}


def _identity(rt: str, dt: torch.dtype) -> str:
    if rt in IDENTITY:
        return literal(IDENTITY[rt], dt if rt not in ("any", "all") else torch.int32)
    if dt.is_floating_point:
        return literal(float("-inf") if rt == "amax" else float("inf"), dt)
    if dt is torch.bool:
        return "0" if rt == "amax" else "1"
    info = torch.iinfo(dt)
    return str(info.min if rt == "amax" else info.max)


def _acc_dtype(rt: str, dt: torch.dtype) -> torch.dtype:
    return torch.int32 if rt in ("any", "all") or dt is torch.bool else compute_dtype(dt)


def _reduce(rt: str, x: str, dt: torch.dtype) -> str:
    f = dt.is_floating_point
    return {"sum": f"tl.sum({x}, 1)", "prod": f"tl.reduce({x}, 1, _h.prod_combine)",
            "amax": f"tl.reduce({x}, 1, _h.maximum)" if f else f"tl.max({x}, 1)",
            "amin": f"tl.reduce({x}, 1, _h.minimum)" if f else f"tl.min({x}, 1)",
            "any": f"tl.max({x}, 1)", "all": f"tl.min({x}, 1)"}[rt] + "[:, None]"


def _combine(rt: str, a: str, b: str, dt: torch.dtype) -> str:
    f = dt.is_floating_point
    return {"sum": f"{a} + {b}", "prod": f"{a} * {b}",
            "amax": f"_h.maximum({a}, {b})" if f else f"tl.maximum({a}, {b})",
            "amin": f"_h.minimum({a}, {b})" if f else f"tl.minimum({a}, {b})",
            "any": f"tl.maximum({a}, {b})", "all": f"tl.minimum({a}, {b})"}[rt]


def _finish(rt: str, x: str, dt: torch.dtype) -> str:
    if rt in ("any", "all") or dt is torch.bool:
        return f"({x} != 0)"
    return f"{x}.to({ctl(dt)})"


class _Gen:
    def __init__(self, body: KernelBody, cfg: LaunchConfig, name: str, part: bool = False,
                 table: Any = None) -> None:
        """``part``: a function of a combo kernel (``triton_combo``), taking its program id as ``pid``.
        ``table``: the ``SymbolTable`` of a kernel over symbolic sizes (whose tails are always masked)."""
        self.body, self.cfg, self.name, self.part = body, cfg, name, part
        k = body.kernel
        self.xnumel, self.rnumel = _numel(k.xnumel), _numel(k.rnumel)
        self.red = k.is_reduction
        self.p = IndexPrinter(index_ranges(body, table))
        self.xmask = sym.is_symbolic(self.xnumel) or self.xnumel % cfg.xblock != 0
        # a reduction over nothing (a sum over a zero-size dim) masks every lane: its result is the identity
        self.rmask = self.red and (sym.is_symbolic(self.rnumel) or self.rnumel % cfg.rblock != 0
                                   or self.rnumel == 0)
        self.lines: list[str] = []
        self.ind = 1
        self.levels: dict[str, str] = {}
        self.dtypes: dict[str, torch.dtype] = dict(body.dtypes)
        self.accs: dict[str, tuple[str, torch.dtype]] = {}
        self.row_accs: set[str] = set()       # accumulators of one value per row (``online``)
        self.scalar_shape = "[1, 1]" if self.red else "[1]"

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.ind + line)

    def ptr(self, buf: str) -> str:
        return f"p_{buf}"

    # -- masks and pointer shapes --------------------------------------------------------------------------
    def level_syms(self, level: str) -> list:
        return [XINDEX, RINDEX] if level == "r" and self.red else [XINDEX]

    def mask(self, level: str, extra: str | None = None) -> str | None:
        parts = [extra] if extra else []
        if self.xmask:
            parts.append("xmask")
        if level == "r" and self.rmask:
            parts.append("rmask")
        return " & ".join(parts) if parts else None

    def offset(self, index: sympy.Expr, syms: list) -> str:
        have = index.free_symbols if isinstance(index, sympy.Basic) else set()
        out = self.p(index)
        for s in syms:
            if s not in have:
                out = f"{out} + 0 * {s}"
        return out

    # -- statements ----------------------------------------------------------------------------------------
    def assign(self, st: Assign) -> None:
        self.levels[st.var] = st.level
        rhs = getattr(self, f"_{st.kind}")(st)
        self.emit(f"{st.var} = {rhs}")

    def _load(self, st: Assign) -> str:
        buf, index, bmask = st.args
        dt = self.body.buffers[buf][0]
        if bmask is sympy.false or bmask is False:
            return f"tl.full({self.scalar_shape}, 0, {ctl(dt)})"
        if bmask is sympy.true or bmask is True:
            bmask = None
        free = index.free_symbols if isinstance(index, sympy.Basic) else set()
        if not free and bmask is None:
            val = f"tl.load({self.ptr(buf)} + {self.p(index)})"
        else:
            mstr = self.p(bmask) if bmask is not None else None
            mask = self.mask(st.level, mstr)
            syms = set(free) | (bmask.free_symbols if bmask is not None else set())
            if self.xmask:
                syms.add(XINDEX)
            if st.level == "r" and self.rmask:
                syms.add(RINDEX)
            need = [s for s in (XINDEX, RINDEX) if s in syms]
            off = self.offset(index, need)
            val = f"tl.load({self.ptr(buf)} + ({off})" + (f", {mask}, other=0)" if mask else ")")
        return val + (".to(tl.float32)" if dt != compute_dtype(dt) else "")

    def _const(self, st: Assign) -> str:
        return f"tl.full({self.scalar_shape}, {literal(st.args[0], st.dtype)}, {ctl(st.dtype)})"

    def _index(self, st: Assign) -> str:
        e = st.args[0]
        if not (isinstance(e, sympy.Basic) and any(not sym.is_size_symbol(s) for s in e.free_symbols)):
            return f"tl.full({self.scalar_shape}, {self.p(e)}, {ctl(st.dtype)})"
        return cast_expr(f"({self.p(e)})", torch.int64 if self.cfg.int64 else torch.int32, st.dtype)

    def _cast(self, st: Assign) -> str:
        src = st.args[0]
        return cast_expr(src, self.dtypes[src], st.dtype)

    def _op(self, st: Assign) -> str:
        name, *args = st.args
        return op_expr(name, list(args), [self.dtypes[a] for a in args], st.dtype)

    def _reduced(self, st: Assign) -> str:
        acc, rt = st.args
        _, dt = self.accs[acc]
        if self.cfg.persistent or not self.red or acc in self.row_accs:
            return _finish(rt, acc, dt)
        if rt == "welford":
            shape = f"[{self.cfg.xblock}, {self.cfg.rblock}]"
            n = f"{acc}_n" if self.rmask else f"tl.full({shape}, {self.rnumel // self.cfg.rblock}.0, tl.float32)"
            return _finish(rt, f"_h.welford_finish({acc}_mean, {acc}, {n})", dt)
        return _finish(rt, _reduce(rt, acc, dt), dt)

    def _reduced_online(self, st: Assign) -> str:
        acc_m, acc_s = st.args      # NaN for a row of -inf only, as exp(-inf - -inf) gives in the two-pass form
        return f"tl.where({acc_m} == float('-inf'), float('nan'), {acc_s})"

    def online(self, st: OnlineAccumulate) -> None:
        """Running max and rescaled sum of exp in one looped pass (ember.loopir.online): one running max and
        sum per row, updated once per step from the step's block: its max (a reduction across the program's
        threads), then ``s * exp(m - m') + sum(exp(g - m'))``: per point a subtraction, an exp and an add. A
        max and sum per lane, updated at every point, did twice the ALU work per point, which bound a bf16
        cross-entropy over 32k logits at ~73% of the H100's copy bandwidth (88% per row;
        ``bench/ce_variants.py (in git history)``)."""
        self.accs[st.acc_max] = ("amax", st.dtype)
        self.accs[st.acc_sum] = ("sum", st.dtype)
        vals = []
        for v in (st.var_max, st.var_sum):
            if compute_dtype(self.dtypes[v]) != torch.float32:
                v = f"{v}.to(tl.float32)"
            vals.append(f"tl.where(rmask, {v}, float('-inf'))" if self.rmask else v)
        shape = f"[{self.cfg.xblock}, {self.cfg.rblock}]"
        vals = [f"tl.broadcast_to({v}, {shape})" for v in vals]
        m, s = st.acc_max, st.acc_sum
        if st.var_max == st.var_sum:        # both fold the one value: name it once
            self.emit(f"{m}_x = {vals[0]}")
            vals = [f"{m}_x"] * 2
        self.emit(f"{m}_new = _h.maximum({m}, tl.reduce({vals[0]}, 1, _h.maximum)[:, None])")
        self.emit(f"{m}_base = tl.where({m}_new == float('-inf'), 0.0, {m}_new)")
        self.emit(f"{s} = {s} * tl.exp({m} - {m}_base) + tl.sum(tl.exp({vals[1]} - {m}_base), 1)[:, None]")
        self.emit(f"{m} = {m}_new")

    def accumulate(self, st: Accumulate) -> None:
        rt, dt = st.reduce_type, st.dtype
        adt = _acc_dtype(rt, dt)
        v = st.var
        vdt = self.dtypes[v]
        if rt in ("any", "all") or vdt is torch.bool:
            v = f"({v} != 0).to(tl.int32)" if vdt is not torch.bool else f"{v}.to(tl.int32)"
        elif compute_dtype(vdt) != adt:
            v = f"{v}.to({tl_dtype(adt)})"
        ident = _identity(rt, dt)
        shape = f"[{self.cfg.xblock}, {self.cfg.rblock}]"
        w = f"tl.where(rmask, {v}, {ident})" if self.rmask else v
        self.accs[st.acc] = (rt, dt)
        if rt == "welford":
            self.welford(st.acc, v, shape)
        elif not self.red:     # a reduction over a single point (rnumel == 1)
            self.emit(f"{st.acc} = {v}")
        elif self.cfg.persistent:
            self.emit(f"{st.acc} = {_reduce(rt, f'tl.broadcast_to({w}, {shape})', adt)}")
        else:
            self.emit(f"{st.acc} = ({_combine(rt, st.acc, w, adt)}).to({tl_dtype(adt)})")

    def welford(self, acc: str, v: str, shape: str) -> None:
        """M2 of ``v`` over the row (``ember.loopir.welford``): the mean, then the squared deviations' sum, where
        the row is held whole; else a running mean, M2 and count per lane (``_h.welford_update``)."""
        if not self.red:
            self.emit(f"{acc} = ({v} - {v}) * ({v} - {v})")       # 0, or NaN for inf and NaN as eager
            return
        if self.cfg.persistent:
            w = f"tl.broadcast_to({f'tl.where(rmask, {v}, 0.0)' if self.rmask else v}, {shape})"
            count = f"({self.p(self.rnumel)} * 1.0)" if sym.is_symbolic(self.rnumel) else f"{max(self.rnumel, 1)}.0"
            self.emit(f"{acc}_mean = tl.sum({w}, 1)[:, None] / {count}")
            d = f"tl.where(rmask, {v} - {acc}_mean, 0.0)" if self.rmask else f"{v} - {acc}_mean"
            self.emit(f"{acc}_d = tl.broadcast_to({d}, {shape})")
            self.emit(f"{acc} = tl.sum({acc}_d * {acc}_d, 1)[:, None]")
            return
        if self.rmask:
            self.emit(f"{acc}_mean, {acc}, {acc}_n = _h.welford_update({acc}_mean, {acc}, {acc}_n, "
                      f"tl.broadcast_to({v}, {shape}), rmask)")
        else:       # every lane holds a point in every step: the count is the step's, its inverse one division
            self.emit(f"{acc}_mean, {acc} = _h.welford_update_dense({acc}_mean, {acc}, tl.broadcast_to({v}, {shape}), "
                      f"1.0 / (roffset // {self.cfg.rblock} + 1))")

    def store(self, st: Store) -> None:
        dt = self.body.buffers[st.buf][0]
        off = self.offset(st.index, self.level_syms(st.level))
        mask = self.mask(st.level, self.p(st.mask) if st.mask is not None else None)
        val = f"{st.var}.to({tl_dtype(dt)})"
        if st.mode == "add":        # two points may add to one address (ember.loopir.scatter)
            # the value as a block of the pointer's shape: a constant (one element) broadcast by tl.broadcast_to
            # is a stride-0 view that Triton's interpreter adds from the wrong memory; a select makes a block.
            # The mask and value may both be of one element (a scatter through a one-element index tensor: the
            # gradient of x[idx]): both are selected into full blocks (a broadcast mask is a stride-0 view too,
            # and the interpreter then added the first lane only)
            shape = f"[{self.cfg.xblock}, 1]" if self.red else f"[{self.cfg.xblock}]"
            if mask:
                val = f"tl.where({mask}, {val}, tl.zeros({shape}, {tl_dtype(dt)}))"
                mask = f"tl.where({mask}, tl.full({shape}, 1, tl.int1), tl.full({shape}, 0, tl.int1))"
            else:
                val = f"tl.broadcast_to({val}, {shape})"
            self.emit(f"tl.atomic_add({self.ptr(st.buf)} + ({off}), {val}" + (f", {mask}" if mask else "")
                      + ", sem='relaxed')")
            return
        self.emit(f"tl.store({self.ptr(st.buf)} + ({off}), {val}" + (f", {mask})" if mask else ")"))

    # -- the kernel ----------------------------------------------------------------------------------------
    def prologue(self) -> None:
        c = self.cfg
        pid = "pid" if self.part else "tl.program_id(0)"
        pid = f"{pid}.to(tl.int64)" if c.int64 else pid
        if self.red:
            self.emit(f"xindex = {pid} * {c.xblock} + tl.arange(0, {c.xblock})[:, None]")
        else:
            self.emit(f"xindex = {pid} * {c.xblock} + tl.arange(0, {c.xblock})")
        if self.xmask:
            self.emit(f"xmask = xindex < {self.p(self.xnumel)}")
        if self.red:
            cast = ".to(tl.int64)" if c.int64 else ""
            self.emit(f"rbase = tl.arange(0, {c.rblock})[None, :]{cast}")
            if c.persistent:
                self.emit("rindex = rbase")
                if self.rmask:
                    self.emit(f"rmask = rindex < {self.p(self.rnumel)}")

    def section(self, sec) -> None:
        looped = sec.level == "r" and not self.cfg.persistent
        if looped:
            shape = f"[{self.cfg.xblock}, {self.cfg.rblock}]"
            self.row_accs |= {a for st in sec.stmts if isinstance(st, OnlineAccumulate)
                              for a in (st.acc_max, st.acc_sum)}
            for acc, rt, dt in sec.accumulators:
                adt = _acc_dtype(rt, dt)
                ashape = f"[{self.cfg.xblock}, 1]" if acc in self.row_accs else shape
                self.emit(f"{acc} = tl.full({ashape}, {_identity(rt, dt)}, {tl_dtype(adt)})")
                if rt == "welford":
                    self.emit(f"{acc}_mean = tl.zeros({shape}, {tl_dtype(adt)})")
                    if self.rmask:
                        self.emit(f"{acc}_n = tl.zeros({shape}, tl.float32)")
            self.emit(f"for roffset in range(0, {self.p(self.rnumel)}, {self.cfg.rblock}):")
            self.ind += 1
            self.emit("rindex = roffset + rbase")
            if self.rmask:
                self.emit(f"rmask = rindex < {self.p(self.rnumel)}")
        for st in _stores_last(sec.stmts, self.body.memory):
            if isinstance(st, Assign):
                self.assign(st)
            elif isinstance(st, Accumulate):
                self.accumulate(st)
            elif isinstance(st, OnlineAccumulate):
                self.online(st)
            elif isinstance(st, Store):
                self.store(st)
        if looped:
            self.ind -= 1

    def generate(self) -> str:
        params = ", ".join([self.ptr(b) for b in self.body.buffers] + list(self.cfg.symbols)
                           + (["pid"] if self.part else []))
        k = self.body.kernel
        kind = "persistent" if self.cfg.persistent else "looped"
        head = [(f"# ember triton kernel {k.name}: xnumel={self.xnumel} rnumel={self.rnumel} {kind}"
                 f" XBLOCK={self.cfg.xblock} RBLOCK={self.cfg.rblock} num_warps={self.cfg.num_warps}"
                 f"{f' num_stages={self.cfg.num_stages}' if self.cfg.num_stages else ''}"
                 f"{' int64' if self.cfg.int64 else ''}"),
                f"# fuses: {k.fused()}", "@triton.jit", f"def {self.name}({params}):"]
        self.prologue()
        for sec in self.body.sections:
            self.section(sec)
        if len(self.lines) == 0:
            self.emit("pass")
        return "\n".join(head + self.lines) + "\n"


def _stores_last(stmts: list, memory: dict[str, str]) -> list:
    """A section's statements with its stores moved to its end, in their order (as Inductor's kernels do): a
    program then issues every load before its first store. The compiler cannot move a load above a store that
    may alias it, so a kernel interleaving them waits for memory once per store: an Adam update (load m, store m,
    load v, store v, load p, store p) three times. Kept in order when a load reads, after a store, memory that
    store wrote (``memory``: buffers stored in place -> the buffer whose memory they use)."""
    stores = [st for st in stmts if isinstance(st, Store)]
    if not stores or all(isinstance(st, Store) for st in stmts[len(stmts) - len(stores):]):
        return stmts
    written: set[str] = set()
    for st in stmts:
        if isinstance(st, Store):
            written.add(memory.get(st.buf, st.buf))
        elif isinstance(st, Assign) and st.kind == "load" and memory.get(st.args[0], st.args[0]) in written:
            return stmts
    return [st for st in stmts if not isinstance(st, Store)] + stores


HEADER = ("import triton\nimport triton.language as tl\n"
          "from ember.codegen import triton_helpers as _h\nfrom ember.codegen.triton_helpers import libdevice\n\n\n")


def body_indices(body: KernelBody) -> list:
    out = []
    for sec in body.sections:
        for st in sec.stmts:
            if isinstance(st, Assign) and st.kind == "load":
                out += [st.args[1], st.args[2]]
            elif isinstance(st, Assign) and st.kind == "index":
                out.append(st.args[0])
            elif isinstance(st, Store):
                out += [st.index, st.mask]
    return [e for e in out if isinstance(e, sympy.Basic)]


def _numel(n: Any) -> Any:
    """A kernel extent: an int, or a sympy expression over size symbols (a symbolic kernel)."""
    return n if sym.is_symbolic(n) else int(n)


def index_ranges(body: KernelBody, table: Any = None) -> dict:
    """Each index symbol's extent (values in [0, extent)): xindex, rindex, and every loaded value a load's
    address depends on (a gather's index lies in the gathered dimension; torch raises on any other). In a
    symbolic kernel the extents are expressions, and each size symbol maps to its range ``(lo, hi)``."""
    k = body.kernel
    out = {XINDEX: _numel(k.xnumel), RINDEX: _numel(k.rnumel),
           **{bound_symbol(v): n for v, n in body.extents.items()}}
    syms = body_symbols(body)
    if syms:
        out.update(sym.symbol_ranges(table, syms))
    return out


def body_symbols(body: KernelBody) -> tuple[sympy.Symbol, ...]:
    """The size symbols of ``body`` (sorted by name): its int parameters after the buffers."""
    got = body.__dict__.get("_triton_symbols")      # kept: asked several times per generation
    if got is None:
        k = body.kernel
        got = sym.kernel_symbols([k.xnumel, k.rnumel, *body_indices(body), *body.extents.values()])
        body.__dict__["_triton_symbols"] = got
    return got


def _sizes(body: KernelBody, persistent: bool, table: Any = None) -> tuple:
    """The arguments of ``launch_config``/``candidate_configs`` for ``body``: a symbolic kernel's at the hints,
    with 32-bit indexing where the hints allow it (the size class recorded in ``table``)."""
    k = body.kernel
    inner = inner_reduction(reduced_load_indices(k))
    if not body_symbols(body):
        xnumel, rnumel = int(k.xnumel), int(k.rnumel)
        int64 = needs_int64(body_indices(body), index_ranges(body))
        return xnumel, rnumel, k.is_reduction, persistent, inner, int64
    sym.require_table(table, f"kernel {k.name}")
    numel = {XINDEX: k.xnumel, RINDEX: k.rnumel, **{bound_symbol(v): n for v, n in body.extents.items()}}
    int64 = sym.needs_int64(body_indices(body), numel, table)
    # a persistent row is sized for the longest row the ranges allow (persistent_for), a looped one at the hint
    rnumel = sym.row_bound(table, k.rnumel) if persistent and sym.is_symbolic(k.rnumel) else sym.hint(table, k.rnumel)
    hinted_row = not persistent and sym.is_symbolic(k.rnumel)     # a looped row sized at its hint
    return sym.hint(table, k.xnumel), rnumel, k.is_reduction, persistent, inner, int64, hinted_row


def _symbolic(cfg: LaunchConfig, body: KernelBody, table: Any) -> LaunchConfig:
    """``cfg`` (chosen at the hints) made a symbolic kernel's: its parameters and grid over the symbols. A
    persistent reduction holds the row whole for every size the table admits (relation ``rnumel <= RBLOCK``)."""
    k = body.kernel
    syms = body_symbols(body)
    if not syms:
        return cfg
    if cfg.persistent and k.is_reduction and sym.is_symbolic(k.rnumel) and \
            not table.decide(sympy.Le(k.rnumel, cfg.rblock)):
        raise sym.SymbolicUnsupported(f"ember.codegen.triton: kernel {k.name}: a persistent reduction over "
                                      f"{k.rnumel} points does not fit RBLOCK={cfg.rblock} at the hints")
    return dataclasses.replace(cfg, symbols=tuple(s.name for s in syms), grid_expr=sym.grid_expr(k.xnumel,
                                                                                                cfg.xblock))


def configs(body: KernelBody, persistent: bool, table: Any = None) -> list[LaunchConfig]:
    """The heuristic launch configuration of ``body`` first, then the other candidates max-autotune tries."""
    return [_symbolic(c, body, table) for c in candidate_configs(*_sizes(body, persistent, table))]


def generate(body: KernelBody, persistent: bool, name: str = "", cfg: LaunchConfig | None = None,
             table: Any = None) -> tuple[str, str, LaunchConfig]:
    """(module source, kernel function name, launch configuration) for ``body``, with the heuristic
    configuration unless ``cfg`` (one of ``configs(body, persistent, table)``) is given. ``table``: the graph's
    ``SymbolTable``, needed when ``body`` has symbolic sizes."""
    k = body.kernel
    cfg = cfg or _symbolic(launch_config(*_sizes(body, persistent, table)), body, table)
    if k.is_reduction and not persistent and ONLINE_SOFTMAX:
        body = online_softmax(body)
    if name:
        return HEADER + _Gen(body, cfg, name, table=table).generate(), name, cfg
    text = canonical(_Gen(body, cfg, _PLACEHOLDER, table=table).generate(), list(body.buffers))
    fn_text = text[text.index("@triton.jit"):]
    fname = _SHARED.setdefault(fn_text, f"ember_{k.name}")
    return HEADER + text.replace(_PLACEHOLDER, fname), fname, cfg


_PLACEHOLDER = "ember_kernel_fn_"
_SHARED: dict[str, str] = {}     # a kernel function's text -> the name of the first kernel that had it
_ACC = re.compile(r"\bacc_\w+")


def canonical(src: str, buffers: list[str]) -> str:
    """``src`` with the names that come from the graph (buffer parameters ``p_buf17``, accumulators
    ``acc_buf18``) numbered by position instead, so that kernels doing the same work on other buffers (the layers
    of a transformer) have the same function text, hence one compile and one Triton cache entry. The comment
    lines above the function keep the graph's names."""
    head, sep, fn = src.partition("@triton.jit")
    params = {f"p_{b}": f"p{i}" for i, b in enumerate(buffers)}
    accs: dict[str, str] = {}
    for m in _ACC.finditer(fn):
        accs.setdefault(m.group(0), f"acc{len(accs)}")
    names = params | accs
    if not names:
        return src
    head += f"# parameters: {', '.join(f'{v}={k[2:]}' for k, v in params.items())}\n"
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")\b")
    return head + sep + pattern.sub(lambda m: names[m.group(0)], fn)
