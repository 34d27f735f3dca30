"""The kernel compiler as a list of named passes: ``PIPELINE``, run by ``run_pipeline``.

Each pass reads and fills one ``GraphCompile`` (the state of one graph's compile):

==================  ============================================================  ====================
pass                what it does                                                   IR after it
==================  ============================================================  ====================
check_prims         nothing (its verifier checks the prim graph it is given)       prim graph (FX)
lower               prims -> loop IR (``ember.loopir.lower``)                      ``LoopGraph``
schedule            fusion into kernels, extern steps, buffer lifetimes            ``Schedule``
plan_memory         which buffers are stored into the memory of another            ``Schedule`` + plan
combine             independent GPU kernels launched together (combo kernels)      ``Schedule``
generate_kernels    kernel source per backend (C++, Triton, Python) and builds     kernel sources
matmul_templates    max-autotune: CUDA matmuls as templates with their epilogues   ``Schedule``
wrap                the generated Python wrapper that runs the schedule            wrapper source
==================  ============================================================  ====================

``EMBER_LOGS=passes`` prints each pass's output IR. With ``CompileOptions.verify_ir`` (or
``$EMBER_VERIFY_IR=1``, which the test suite sets) each pass's verifier checks its output: the prim-graph checker
(``ember.decomp.verify``), then the loop-IR and schedule checkers (``ember.loopir.verify``). A pass that ends
the compile early (``lower`` when the loop IR cannot represent the graph: it then runs as the FX graph) sets
``state.result``."""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx as fx

from ember import logs

_COUNTER = itertools.count()


def kernel_backend(device: torch.device, options: Any) -> str | None:
    """The kernel backend for data on ``device``: Triton on CUDA, ``options.cpu_backend`` on CPU, None on any
    other device (``meta``, ``mps``: their graphs run as FX graphs, ``loopir.lower.check_devices``)."""
    if device.type == "cuda":
        return "triton"
    if device.type == "cpu":
        return getattr(options, "cpu_backend", None) or "cpp"
    return None


def check_kernel_devices(graph: Any, bodies: list) -> None:
    """Every buffer a kernel reads or writes is memory of the kernel's device (a C++ kernel: CPU memory), or a
    0-dim CPU input that the wrapper copies to a GPU kernel's device. Checked once per compile from the fake
    tensors' devices (``loopir.lower.check_devices`` sent every other graph to the FX path); the guards check
    the inputs' devices on every call."""
    from ember.errors import InternalError
    nodes = {n.name: n for n in graph.nodes}
    for b in bodies:
        dev = b.kernel.device
        for name in b.buffers:
            n = nodes.get(name)
            if n is None or n.device == dev or (n.device.type == "cpu" and len(n.layout.shape) == 0 and
                                                dev.type != "cpu"):
                continue
            raise InternalError(f"ember.codegen: kernel {b.kernel.name} on {dev} was given buffer {name} on "
                                f"{n.device}")


def backend_module(name: str) -> Any:
    if name == "python":
        from . import python as mod
    elif name == "triton":
        from . import triton as mod  # type: ignore[no-redef]
        from .triton_cache import install
        install()           # Triton's binary cache is signed (triton_cache.py)
    elif name == "cpp":
        from . import cpp as mod  # type: ignore[no-redef]
    else:
        raise ValueError(f"ember.codegen: unknown kernel backend {name!r} (python, triton, cpp)")
    return mod


@dataclass
class GraphCompile:
    """One graph's compile: its input and what the passes made of it so far."""
    gm: fx.GraphModule
    kind: str
    options: Any
    name: str = ""
    graph: Any = None               # LoopGraph (lower)
    sched: Any = None               # Schedule (schedule, combine, matmul_templates)
    templates: bool = False         # max-autotune runs matmul templates here
    spread: set = field(default_factory=set)        # devices whose kernels launch as combos
    inplace: dict = field(default_factory=dict)     # buffer -> memory owner (plan_memory)
    kernels: dict = field(default_factory=dict)     # kernel name -> (compiled callable, body)
    sources: list = field(default_factory=list)     # generated kernel sources
    result: Any = None              # the compiled callable; set by wrap, or early by lower's FX fallback


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[GraphCompile], None]
    show: Callable[[GraphCompile], str]             # the pass's output IR, printed by EMBER_LOGS=passes
    verify: Callable[[GraphCompile], None] | None = None


def _check_prims(st: GraphCompile) -> None:
    st.name = st.name or f"{st.kind}_{next(_COUNTER)}"


def _lower(st: GraphCompile) -> None:
    from ember.loopir.lower import LoweringError, check_devices, lower
    try:
        st.graph = lower(st.gm, st.name, align_matmuls=not getattr(st.options, "max_autotune", False),
                         hoists=lambda dev: kernel_backend(dev, st.options) == "triton")
        check_devices(st.graph, lambda dev: kernel_backend(dev, st.options) is not None)
    except (LoweringError, NotImplementedError) as e:
        if st.gm.meta.get("ember_symbols") is not None and st.gm.meta["ember_symbols"].symbols:
            from ember.shapes import SymbolicUnsupported   # its FX graph holds symbolic constants: not runnable
            raise SymbolicUnsupported(f"ember.loopir: {e}") from e
        logs.log("perf_hints", f"ember: {st.name} runs as an FX graph: {e}")
        st.result = st.gm
        return
    from ember.loopir.ir import BufferRef
    # symbolic strides stay sympy (a channels-last activation saved for the backward: ``aot._adopt_saved_strides``)
    st.gm.meta["ember_output_strides"] = [_int_tuple(o.layout.stride) if isinstance(o, BufferRef) else None
                                          for o in st.graph.outputs]


def _int_tuple(v: Any) -> tuple:
    try:
        return tuple(int(x) for x in v)
    except TypeError:
        return tuple(v)


def _schedule(st: GraphCompile) -> None:
    from ember.loopir.ir import Extern, Layout
    from ember.loopir.schedule import schedule
    opts = st.options
    # a CUDA matmul under max-autotune runs a template (with fused epilogues instead of combo kernels)
    st.templates = getattr(opts, "max_autotune", False) and any(
        isinstance(s, Extern) and s.op in ("mm", "addmm", "bmm") and kernel_backend(s.device, opts) == "triton"
        for s in st.graph.nodes)
    # GPU kernels: independent ones launch together as combo kernels (ember.loopir.combo)
    st.spread = set() if st.templates else {n.layout.device for n in st.graph.nodes if isinstance(
        getattr(n, "layout", None), Layout) and kernel_backend(n.layout.device, opts) == "triton"}
    st.sched = schedule(st.graph, spread=st.spread)
    if logs.enabled("schedule"):
        logs.log("schedule", f"{st.name}:\n{st.sched.python()}")


def _plan_memory(st: GraphCompile) -> None:
    """Which buffers are stored into the memory of another (``{buffer: memory owner}``)."""
    from ember.loopir.inplace import inplace_stores, reused_buffers, scatter_in_place, scatter_into_dead_source
    from ember.loopir.ir import Scatter
    from ember.loopir.schedule import Kernel
    graph, sched, write_backs = st.graph, st.sched, st.gm.meta.get("ember_write_backs", ())
    backends = {kernel_backend(s.device, st.options) for s in sched.steps if isinstance(s, Kernel)}
    # a scatter writes into its target's memory; its kernels read and write it (autotuning times them on copies)
    inplace = {n.name: n.target for n in graph.nodes if isinstance(n, Scatter)}
    inplace.update(inplace_stores(graph, sched, write_backs))
    if backends == {"cpp"}:     # CPU: a new large tensor costs page faults; write over a dead one
        inplace.update(reused_buffers(graph, sched, inplace))
    elif backends == {"triton"} and not st.templates:
        # GPU: less memory held (a CUDA graph's pool keeps its peak); matmul templates fuse their epilogues instead
        inplace.update(reused_buffers(graph, sched, inplace, reductions=True))
    scatter_in_place(graph, sched, write_backs, inplace)
    scatter_into_dead_source(graph, sched, inplace)
    st.inplace = inplace


def _combine(st: GraphCompile) -> None:
    if st.spread:
        from ember.loopir.combo import combine
        st.sched = combine(st.sched, st.inplace, lambda k: k.device in st.spread)


def _make_body(st: GraphCompile, s: Any, mod: Any, share: bool) -> Any:
    from ember.loopir.combo import Combo, ComboBody
    from ember.loopir.inplace import memory_root
    from ember.loopir.kernel import kernel_body, share_pointers
    if isinstance(s, Combo):
        return ComboBody(s, [_make_body(st, p, mod, share) for p in s.parts])
    kw = _sym_kw(st, "triton") if share else {}
    b = kernel_body(s, persistent=mod.persistent(s, st.options, **kw) if hasattr(mod, "persistent") else True)
    b.table = st.graph.symbols
    b.aliased = {n for n in b.buffers if n in st.inplace or n in st.inplace.values()}  # read and written by 2 names
    b.memory = {n: memory_root(n, st.inplace) for n in b.aliased}
    if share:       # Triton: one pointer per memory (C++ kernels keep theirs)
        share_pointers(b)
    return b


def _sym_kw(st: GraphCompile, backend: str) -> dict:
    """Triton's generator takes the graph's symbol table (triton.py)."""
    return {"symbols": st.graph.symbols} if backend == "triton" and st.graph.symbols is not None else {}


def _generate_kernels(st: GraphCompile) -> None:
    from ember.loopir.schedule import Kernel
    by_backend: dict[str, list[Any]] = {}
    for step in st.sched.steps:
        if isinstance(step, Kernel):
            by_backend.setdefault(kernel_backend(step.device, st.options), []).append(step)
    for backend, steps in by_backend.items():
        mod = backend_module(backend)
        bodies = [_make_body(st, s, mod, backend == "triton") for s in steps]
        check_kernel_devices(st.graph, bodies)
        kw = _sym_kw(st, backend)
        if hasattr(mod, "compile_kernels"):       # one build for all of a graph's kernels (C++: one TU)
            fns = mod.compile_kernels(bodies, st.options, st.name, **kw)
        else:
            fns = [mod.compile_kernel(b, st.options, **kw) for b in bodies]
        for body, fn in zip(bodies, fns):
            st.kernels[body.name] = (fn, body)
            st.sources.append(mod.source(body, **kw))


def _matmul_templates(st: GraphCompile) -> None:
    if st.templates:
        from .triton_mm import use_templates
        st.sched = use_templates(st.sched, st.kernels, lambda d: kernel_backend(d, st.options) == "triton",
                                 st.sources, epilogues=getattr(st.options, "epilogue_fusion", True))


def _wrap(st: GraphCompile) -> None:
    from .wrapper import make_wrapper
    st.result = make_wrapper(st.sched, st.kernels, st.sources, st.inplace, steal=st.kind == "backward")
    if logs.enabled("output_code"):
        logs.log("output_code", f"# ember wrapper for {st.name}\n{st.result.source}\n" + "\n".join(st.sources))


# -- what each pass shows and checks ------------------------------------------------------------------------------
def _show_plan(st: GraphCompile) -> str:
    plan = "".join(f"\n  {b} -> memory of {m}" for b, m in sorted(st.inplace.items()))
    return st.sched.python() + (f"\nstored in place:{plan}" if plan else "")


def _verify_prims(st: GraphCompile) -> None:
    from ember.decomp.verify import verify_prim_graph
    verify_prim_graph(st.gm, where=f"{st.kind} graph given to the kernel compiler")


def _verify_graph(st: GraphCompile) -> None:
    if st.graph is not None:
        from ember.loopir.verify import verify_graph
        verify_graph(st.graph, where=f"lower ({st.name})")


def _verify_schedule(name: str) -> Callable[[GraphCompile], None]:
    def check(st: GraphCompile) -> None:
        from ember.loopir.verify import verify_schedule
        verify_schedule(st.sched, where=f"{name} ({st.name})", inplace=st.inplace)
    return check


PIPELINE: tuple[Pass, ...] = (
    Pass("check_prims", _check_prims, lambda st: st.gm.code, _verify_prims),
    Pass("lower", _lower, lambda st: st.graph.python() if st.graph is not None else "(runs as the FX graph)",
         _verify_graph),
    Pass("schedule", _schedule, lambda st: st.sched.python(), _verify_schedule("schedule")),
    Pass("plan_memory", _plan_memory, _show_plan, _verify_schedule("plan_memory")),
    Pass("combine", _combine, lambda st: st.sched.python(), _verify_schedule("combine")),
    Pass("generate_kernels", _generate_kernels, lambda st: "\n\n".join(st.sources)),
    Pass("matmul_templates", _matmul_templates, lambda st: st.sched.python(), _verify_schedule("matmul_templates")),
    Pass("wrap", _wrap, lambda st: st.result.source),
)


def verifying(options: Any) -> bool:
    return bool(getattr(options, "verify_ir", False)) or os.environ.get("EMBER_VERIFY_IR") == "1"


def run_pipeline(st: GraphCompile, passes: tuple[Pass, ...] | None = None) -> Any:
    """Run ``passes`` (default ``PIPELINE``) over ``st``, stopping once one sets ``st.result``; return the
    compiled callable."""
    from ember.heuristics import using
    verify, show = verifying(st.options), logs.enabled("passes")
    with using(getattr(st.options, "heuristics", None)):    # the passes' tuning constants (ember.heuristics)
        for p in PIPELINE if passes is None else passes:
            p.run(st)
            if show:
                logs.log("passes", f"{st.name or st.kind} after {p.name}:\n{p.show(st)}")
            if verify and p.verify is not None:
                p.verify(st)
            if st.result is not None:
                return st.result
    raise AssertionError("ember.codegen: the pipeline ended without a compiled graph")
