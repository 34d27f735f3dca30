"""Triton matmul templates with fused epilogues (mode ``max-autotune``), chosen per shape against cuBLAS.

Input: a graph's ``Schedule`` whose matmuls (``Extern`` nodes of prim ``mm``, ``addmm`` or ``bmm``) are ATen
calls, and the graph's compiled Triton kernels. For each such matmul ``E`` this module builds a
``MatmulStep`` that replaces it in the schedule:
- its *epilogue* is the first later kernel ``K`` that reads ``E`` when ``K`` is pointwise over exactly ``E``'s
  elements, reads ``E`` only at the point it computes (``xindex``), stores nothing in place, and reads nothing
  produced between ``E`` and ``K``: bias, activation, residual, casts, and whatever else ``K`` fused;
- the step is an ``Autotuned`` choice between the ATen call followed by ``K`` (what runs without
  max-autotune) and one Triton kernel per block configuration that computes a tile of ``E`` with ``tl.dot``
  (fp32 accumulation, grouped tile order) and runs ``K``'s statements on the tile in registers, storing ``E``
  itself only when something else reads it.
``K``'s place in the schedule keeps only its frees (its work moved to ``E``'s place, which is legal because
everything it reads is ready there).

Template source: ``xindex = (batch * M + rm) * N + rn`` is the flat position of each tile element in ``E``'s
row-major layout, so ``K``'s body (indices over ``xindex``) runs unchanged on 2-D tiles, its loads of ``E``
replaced by the accumulator rounded to ``E``'s dtype as eager would have stored it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy
import torch

from ember.loopir.indexing import XINDEX
from ember.loopir.ir import BufferRef, Extern, Layout, contiguous_stride, prod
from ember.loopir.kernel import Assign, KernelBody
from ember.loopir.schedule import Kernel, Schedule

from .triton_gen import HEADER, LaunchConfig, _Gen
from .triton_ops import compute_dtype, ctl, tl_dtype
from ember.heuristics import heuristics

TEMPLATE_OPS = ("mm", "addmm", "bmm")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
PAD_DEVICES = {"cuda"}      # where misaligned matmuls also try zero-padded operands (tests add "cpu")
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) per operand size class
CONFIGS_16BIT = ((128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 8, 3), (128, 128, 32, 4, 4),
                 (64, 128, 64, 4, 4), (64, 64, 64, 4, 3), (64, 64, 32, 2, 5))
CONFIGS_32BIT = ((128, 128, 32, 8, 3), (64, 128, 32, 4, 4), (128, 64, 32, 4, 4), (64, 64, 32, 4, 4),
                 (64, 64, 16, 2, 5))


@dataclass(frozen=True)
class TileConfig:
    bm: int
    bn: int
    bk: int
    num_warps: int
    num_stages: int

    def label(self) -> str:
        return f"triton mm {self.bm}x{self.bn}x{self.bk} w{self.num_warps} s{self.num_stages}"


def _pow2_at_least(n: int, lo: int) -> int:
    p = lo
    while p < n:
        p *= 2
    return p


def tile_configs(m: int, n: int, k: int, dtype: torch.dtype) -> list[TileConfig]:
    table = CONFIGS_32BIT if dtype == torch.float32 else CONFIGS_16BIT
    out: list[TileConfig] = []
    for bm, bn, bk, w, st in table:
        c = TileConfig(min(bm, _pow2_at_least(m, 16)), min(bn, _pow2_at_least(n, 16)),
                       min(bk, _pow2_at_least(k, 16)), w, st)
        if c not in out:
            out.append(c)
    return out


# -- which matmuls and epilogues qualify ---------------------------------------------------------------------
def _mats(e: Extern) -> tuple[BufferRef, BufferRef, BufferRef | None] | None:
    args = e.args
    if e.op in ("mm", "bmm") and len(args) == 2 and not e.kwargs:
        a, b, bias = args[0], args[1], None
    elif e.op == "addmm" and len(args) >= 3:
        bias, a, b = args[0], args[1], args[2]
        scale = list(args[3:5]) + [e.kwargs.get("beta", 1), e.kwargs.get("alpha", 1)]
        if any(s != 1 for s in scale) or not isinstance(bias, BufferRef):
            return None
    else:
        return None
    if not (isinstance(a, BufferRef) and isinstance(b, BufferRef)):
        return None
    return a, b, bias


def _static(lay: Layout) -> bool:
    return all(isinstance(v, int) for v in (*lay.shape, *lay.stride, lay.offset))


def eligible(e: Extern) -> bool:
    mats = _mats(e)
    if mats is None or e.multi or e.layout.dtype not in DTYPES:
        return False
    lays = [r.layout for r in mats if r is not None] + [e.layout]
    if not all(_static(lay) for lay in lays) or any(lay.dtype != e.layout.dtype for lay in lays):
        return False
    if tuple(e.layout.stride) != contiguous_stride(e.layout.shape) or e.layout.offset != 0:
        return False
    return 0 < int(prod(e.layout.shape)) < 2 ** 31 and all(int(s) > 0 for s in mats[0].layout.shape)


def epilogue_of(sched: Schedule, i: int, bodies: dict[str, KernelBody]) -> int | None:
    """The position of the kernel that can run inside the template of the matmul at step ``i``, or None."""
    e = sched.steps[i]
    produced_after = set()
    for j in range(i + 1, len(sched.steps)):
        s = sched.steps[j]
        if s is None:           # a step a memory pass folded into another (a copy a scatter now writes over)
            continue
        if isinstance(s, Kernel) and e.name in s.reads:
            body = bodies.get(s.name)
            if body is None or s.rnumel != 1 or s.xnumel != prod(e.layout.shape) or body.aliased:
                return None
            if set(s.reads) & produced_after:
                return None
            loads = [st for st in body.loads() if st.args[0] == e.name]
            if not loads or any(sympy.sympify(st.args[1]) != XINDEX or st.args[2] not in (None, True, sympy.true)
                                for st in loads):
                return None
            return j
        names = [n.name for n in s.nodes] if isinstance(s, Kernel) else [s.name]
        produced_after.update(names)
        if e.name in (s.reads if isinstance(s, Kernel) else s.reads()):
            return None          # another step reads the matmul first: keep the order as it is
    return None


# -- the template source ---------------------------------------------------------------------------------------
class _EpilogueGen(_Gen):
    """The epilogue kernel's statements on a [BLOCK_M, BLOCK_N] tile; loads of the matmul read the accumulator."""

    def __init__(self, body: KernelBody, mm_buf: str, value: str) -> None:
        cfg = LaunchConfig((1, 1, 1), 1, 1, 4, True, False)
        super().__init__(body, cfg, "")
        self.xmask = True
        self.mm_buf, self.value = mm_buf, value

    def _load(self, st: Assign) -> str:
        if st.args[0] == self.mm_buf:
            return self.value
        return super()._load(st)


def _strides(lay: Layout, ndim: int) -> list[int]:
    """``lay``'s strides right-aligned to ``ndim`` dims, 0 where it broadcasts."""
    st = [0 if n == 1 else int(s) for n, s in zip(lay.shape, lay.stride)]
    return [0] * (ndim - len(st)) + st


def template_source(e: Extern, cfg: TileConfig, body: KernelBody | None, store_mm: bool,
                    name: str) -> tuple[str, list[str]]:
    """(module source, parameter names after the matmul's operands and output) of one template kernel."""
    a, b, bias = _mats(e)  # type: ignore[misc]
    shape = [int(s) for s in e.layout.shape]
    batched = len(shape) == 3
    bsz, m, n = (shape if batched else [1, *shape])
    k = int(a.layout.shape[-1])
    sa, sb = _strides(a.layout, 3), _strides(b.layout, 3)
    dt = e.layout.dtype
    prec = ""
    if dt == torch.float32:
        prec = ', input_precision="tf32"' if torch.backends.cuda.matmul.allow_tf32 else ', input_precision="ieee"'
    epi_bufs = [x for x in (body.buffers if body is not None else {}) if x != e.name]
    params = ["p_a", "p_b"] + (["p_bias"] if bias is not None else []) + ["p_mm"] + [f"p_{x}" for x in epi_bufs]
    bm, bn, bk = cfg.bm, cfg.bn, cfg.bk
    gm_, gn_ = -(-m // bm), -(-n // bn)
    lines = [f"# ember triton matmul template {e.op} {bsz}x{m}x{n}x{k} {str(dt).replace('torch.', '')} "
             f"{cfg.label()}" + (f" + epilogue {body.kernel.name}: {body.kernel.fused()}" if body else ""),
             "@triton.jit", f"def {name}({', '.join(params)}):",
             "    pid = tl.program_id(0)",
             f"    group = pid // {heuristics().mm_group_m * gn_}",
             f"    first_m = group * {heuristics().mm_group_m}",
             f"    group_m = min({gm_} - first_m, {heuristics().mm_group_m})",
             f"    pid_m = first_m + (pid % {heuristics().mm_group_m * gn_}) % group_m",
             f"    pid_n = (pid % {heuristics().mm_group_m * gn_}) // group_m",
             f"    rm = pid_m * {bm} + tl.arange(0, {bm})",
             f"    rn = pid_n * {bn} + tl.arange(0, {bn})",
             f"    ram = rm % {m}" if m % bm else "    ram = rm",
             f"    rbn = rn % {n}" if n % bn else "    rbn = rn",
             f"    rk = tl.arange(0, {bk})"]
    boff = "tl.program_id(1)" if batched else "0"
    lines += [f"    bid = {boff}",
              f"    pa = p_a + bid * {sa[0]} + ram[:, None] * {sa[1]} + rk[None, :] * {sa[2]}",
              f"    pb = p_b + bid * {sb[0]} + rk[:, None] * {sb[1]} + rbn[None, :] * {sb[2]}",
              f"    acc = tl.zeros(({bm}, {bn}), dtype=tl.float32)",
              f"    for k in range(0, {k}, {bk}):"]
    if k % bk:
        lines += [f"        a = tl.load(pa, mask=rk[None, :] < {k} - k, other=0.0)",
                  f"        b = tl.load(pb, mask=rk[:, None] < {k} - k, other=0.0)"]
    else:
        lines += ["        a = tl.load(pa)", "        b = tl.load(pb)"]
    if dt != torch.float32 and _interpreting():   # the interpreter multiplies 16-bit floats' bits
        lines += ["        a = a.to(tl.float32)", "        b = b.to(tl.float32)"]
    lines += [f"        acc += tl.dot(a, b{prec})",
              f"        pa += {bk * sa[2]}",
              f"        pb += {bk * sb[1]}"]
    lines += [f"    xmask = (rm[:, None] < {m}) & (rn[None, :] < {n})",
              f"    xindex = (bid * {m} + rm[:, None]) * {n} + rn[None, :]"]
    if bias is not None:
        sc = _strides(bias.layout, 2)
        lines.append(f"    acc += tl.load(p_bias + rm[:, None] * {sc[0]} + rn[None, :] * {sc[1]}, xmask, "
                     "other=0.0).to(tl.float32)")
    lines.append(f"    mm = acc.to({tl_dtype(dt)})")
    if store_mm:
        lines.append("    tl.store(p_mm + xindex, mm, xmask)")
    if body is not None:
        value = "mm" if compute_dtype(dt) == dt else f"mm.to({ctl(compute_dtype(dt))})"
        gen = _EpilogueGen(body, e.name, value)
        for sec in body.sections:
            gen.section(sec)
        lines += gen.lines
    return HEADER + "\n".join(lines) + "\n", epi_bufs


def _interpreting() -> bool:
    from .triton_helpers import interpreting
    return interpreting()


# -- the step ------------------------------------------------------------------------------------------------
@dataclass
class MatmulStep:
    """A matmul and its epilogue kernel as one autotuned call (in place of the matmul in the schedule)."""
    extern: Extern
    kernel: Kernel | None
    body: KernelBody | None
    fn: Any = None              # Autotuned(...)(a, b, [bias], *epilogue buffers) -> the matmul's result or None

    @property
    def name(self) -> str:
        return self.extern.name

    def reads(self) -> set[str]:
        return self.extern.reads() | (set(self.kernel.reads) - {self.name} if self.kernel else set())

    def python(self) -> str:
        epi = f" + {self.kernel.name} [{self.kernel.fused()}]" if self.kernel else ""
        return f"{self.name} = matmul_template({self.extern.op}{epi})"

    def write(self, w: Any, kernels: dict) -> None:
        """The wrapper's lines for this step (``w`` is the wrapper's writer)."""
        epi = [x for x in (self.body.buffers if self.body is not None else {}) if x != self.name]
        if self.body is not None:
            for x, (_, role) in self.body.buffers.items():
                if role == "out" and x != self.name:
                    w.alloc(x)
        fn = w.bind(f"{self.name}_mm", self.fn)
        a, b, bias = _mats(self.extern)  # type: ignore[misc]
        ops = [w.ref(a), w.ref(b)] + ([w.ref(bias)] if bias is not None else [])
        what = f"{self.extern.op}" + (f" + {self.kernel.fused()}" if self.kernel else "")
        w.lines.append(f"    {self.name} = {fn}({', '.join(ops + epi)})  # autotuned {what}")


class _Fallback:
    """The ATen matmul, then the epilogue kernel (what runs without max-autotune)."""

    def __init__(self, e: Extern, kernel: Any, body: KernelBody | None, nops: int) -> None:
        self.target, self.extra, self.kwargs = e.target, tuple(e.args[nops:]), dict(e.kwargs)
        self.nops, self.kernel, self.mm = nops, kernel, e.name
        self.bias_first = e.op == "addmm"        # the step passes (a, b, bias); addmm takes (bias, a, b)
        self.order = list(body.buffers) if body is not None else []

    def operands(self, ops: tuple) -> tuple:
        return ops

    def result(self, out: torch.Tensor) -> torch.Tensor:
        return out

    def __call__(self, *args: torch.Tensor) -> torch.Tensor:
        ops = self.operands(args[:self.nops])
        if self.bias_first:
            ops = (ops[2], ops[0], ops[1])
        out = self.result(self.target(*ops, *self.extra, **self.kwargs))
        if self.kernel is not None:
            it = iter(args[self.nops:])
            self.kernel(*[out if x == self.mm else next(it) for x in self.order])
        return out


class _PaddedFallback(_Fallback):
    """The ATen matmul on operands zero-padded to aligned inner and output sizes (cuBLAS's fast kernels), its
    result's first N columns copied out, then the epilogue kernel: ``ember.loopir.matmul_align`` at run time."""

    def __init__(self, e: Extern, kernel: Any, body: KernelBody | None, nops: int, k: int, n: int) -> None:
        super().__init__(e, kernel, body, nops)
        align = 16 // e.layout.dtype.itemsize
        self.k, self.n = k, n
        self.kp, self.np = -(-k // align) * align, -(-n // align) * align

    def operands(self, ops: tuple) -> tuple:
        import torch.nn.functional as F
        a, b = ops[0], ops[1]
        a = F.pad(a, (0, self.kp - self.k)) if self.kp != self.k else a.contiguous()
        b = F.pad(b, (0, self.np - self.n, 0, self.kp - self.k))
        if len(ops) == 2:
            return (a, b)
        bias = ops[2]
        if bias.shape[-1] == self.n and self.np != self.n:
            bias = F.pad(bias, (0, self.np - self.n))
        return (a, b, bias)

    def result(self, out: torch.Tensor) -> torch.Tensor:
        return out[..., :self.n].contiguous()


class _Template:
    """One template configuration: allocates the matmul's result (when something reads it) and launches."""

    def __init__(self, kernel: Any, e: Extern, store_mm: bool, nops: int) -> None:
        lay = e.layout
        self.kernel, self.warmup = kernel, kernel.warmup
        self.shape, self.stride, self.dtype, self.device = tuple(lay.shape), tuple(lay.stride), lay.dtype, lay.device
        self.store_mm, self.nops = store_mm, nops
        self.unused: torch.Tensor | None = None     # the output pointer when nothing reads the result

    def __call__(self, *args: torch.Tensor) -> torch.Tensor | None:
        if self.store_mm:
            out = torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device=self.device)
        else:
            if self.unused is None:
                self.unused = torch.empty((1,), dtype=self.dtype, device=self.device)
            out = self.unused
        self.kernel(*args[:self.nops], out, *args[self.nops:])
        return out if self.store_mm else None


def use_templates(sched: Schedule, kernels: dict[str, tuple[Any, KernelBody]], triton_device: Any,
                  sources: list[str], epilogues: bool = True) -> Schedule:
    """``sched`` with each eligible matmul (and, with ``epilogues``, the kernel after it) as an autotuned
    ``MatmulStep``."""
    from .autotune import Autotuned, digest
    from .triton import TritonKernel, precompile
    from .triton_helpers import interpreting
    interp = interpreting()
    bodies = {k: body for k, (_, body) in kernels.items()}
    steps = list(sched.steps)
    outputs = sched.graph.output_names()
    pre: list[tuple[Any, list]] = []
    for i, e in enumerate(sched.steps):
        if not (isinstance(e, Extern) and e.op in TEMPLATE_OPS and eligible(e) and triton_device(e.device)):
            continue
        j = epilogue_of(sched, i, bodies) if epilogues else None
        kern = sched.steps[j] if j is not None else None
        body = bodies[kern.name] if kern is not None else None
        store_mm = e.name in outputs or any(
            e.name in (s.reads if isinstance(s, Kernel) else s.reads()) for s in sched.steps[i + 1:]
            if s is not kern and s is not None)
        if kern is None and not store_mm:
            continue                 # nothing reads it
        a, b, bias = _mats(e)  # type: ignore[misc]
        nops = 3 if bias is not None else 2
        shape = [int(s) for s in e.layout.shape]
        m, n, k = shape[-2], shape[-1], int(a.layout.shape[-1])
        epi_fn = kernels[kern.name][0] if kern else None
        choices: list[Any] = [_Fallback(e, epi_fn, body, nops)]
        labels, srcs = ["aten" + (" + epilogue kernel" if kern else "")], []
        align = 16 // e.layout.dtype.itemsize
        if e.device.type in PAD_DEVICES and (k % align or n % align):    # cuBLAS's slow kernels: try padding
            choices.append(_PaddedFallback(e, epi_fn, body, nops, k, n))
            labels.append("aten padded" + (" + epilogue kernel" if kern else ""))
        for cfg in tile_configs(m, n, k, e.layout.dtype):
            fname = f"ember_mm_{e.name}"
            src, epi = template_source(e, cfg, body, store_mm, fname)
            grid = (-(-m // cfg.bm) * -(-n // cfg.bn), shape[0] if len(shape) == 3 else 1, 1)
            launch = LaunchConfig(grid, cfg.bm, cfg.bn, cfg.num_warps, True, False, cfg.num_stages)
            kernel = TritonKernel(src, fname, launch, e.name, interp)
            t = _Template(kernel, e, store_mm, nops)
            choices.append(t)
            labels.append(cfg.label())
            srcs.append(src)
            dts = [r.layout.dtype for r in (a, b, bias) if r is not None] + [e.layout.dtype]
            dts += [body.buffers[x][0] for x in epi] if body is not None else []
            pre.append((t, dts))
        fn = Autotuned(choices, digest(srcs + [str(store_mm)], e.device), f"{e.name} ({e.op} {shape}x{k})",
                       labels=labels)
        steps[i] = MatmulStep(e, kern, body, fn)
        sources.append(srcs[0])
        if j is not None:
            steps[j] = None          # its work runs in the template step; its frees stay at its place
    if pre and not interp and torch.cuda.is_available():
        precompile(pre)
    return Schedule(sched.graph, steps, sched.frees, sched.input_frees)


__all__ = ["MatmulStep", "eligible", "epilogue_of", "template_source", "tile_configs", "use_templates"]
