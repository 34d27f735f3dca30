"""Code generation: scheduled loop IR -> kernels (Triton for CUDA, C++/OpenMP for CPU, or the Python
reference backend) and the generated Python wrapper that runs them.

``compile_graph(gm, kind, options)`` is the kernel compiler AOT autograd calls for each final prim graph
(``aot_compile(..., compile_graph=...)``): lower, schedule, generate, wrap. A graph the loop IR cannot
represent runs as the FX graph (with a perf hint).

With ``options.max_autotune`` the Triton kernels are ``autotune.Autotuned`` choices between configurations, and
CUDA matmuls become ``triton_mm.MatmulStep``s (templates with fused epilogues against cuBLAS). Autotuning lives
here rather than in ``ember.runtime`` (DESIGN.md's table) because the candidates are generated code and imports
go one way: the runtime package may import codegen, not the reverse.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Callable

import torch
import torch.fx as fx

from ember import logs

_COUNTER = itertools.count()


def cache_root() -> Path:
    """Where generated code and its artifacts are cached: ``$EMBER_CACHE_DIR``, default ``~/.cache/ember``, or a
    private temporary directory where that one is unsafe or unusable (``ember.diskcache.root``)."""
    from ember import diskcache
    return diskcache.root()


def kernel_backend(device: torch.device, options: Any) -> str | None:
    """The kernel backend for data on ``device``: Triton on CUDA, ``options.cpu_backend`` on CPU, None on any
    other device (``meta``, ``mps``: their graphs run as FX graphs, ``loopir.lower.check_devices``)."""
    if device.type == "cuda":
        return "triton"
    if device.type == "cpu":
        return getattr(options, "cpu_backend", None) or "cpp"
    return None


def _check_kernel_devices(graph: Any, bodies: list) -> None:
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


def _backend_module(name: str) -> Any:
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


def _has_templates(nodes: Any, options: Any) -> bool:
    """Whether max-autotune runs matmul templates here: a CUDA matmul among ``nodes`` under max-autotune."""
    from ember.loopir.ir import Extern
    return getattr(options, "max_autotune", False) and any(
        isinstance(s, Extern) and s.op in ("mm", "addmm", "bmm") and kernel_backend(s.device, options) == "triton"
        for s in nodes)


def graph_symbols(gm: fx.GraphModule) -> Any:
    """The graph's ``ember.shapes.SymbolTable`` when it has symbolic sizes, else None."""
    table = gm.meta.get("ember_symbols")
    return table if table is not None and table.symbols else None


def _int_tuple(v: Any) -> tuple | None:
    try:
        return tuple(int(x) for x in v)
    except TypeError:
        return None


def compile_graph(gm: fx.GraphModule, kind: str = "inference", options: Any = None) -> Callable[..., Any]:
    """The compiled callable of a prim graph. A graph with symbolic sizes (``gm.meta["ember_symbols"]``,
    docs/dynamic-contract.md) compiles once for every size the table's relations allow; where some stage cannot
    handle it, ``SymbolicUnsupported`` says why (the caller then compiles with static sizes)."""
    if graph_symbols(gm) is None:
        return _compile_graph(gm, kind, options)
    from ember.shapes import SymbolicUnsupported, using
    try:
        with using(graph_symbols(gm)):      # decisions on sizes go through the graph's table
            return _compile_graph(gm, kind, options)
    except SymbolicUnsupported:
        raise
    except Exception as e:      # noqa: BLE001 - a stage met a symbolic size it cannot handle: compile static
        raise SymbolicUnsupported(f"ember.codegen: {kind} graph: {type(e).__name__}: {e}") from e


def _plan_inplace(graph: Any, sched: Any, gm: fx.GraphModule, backends: set, templates: bool) -> dict[str, str]:
    """Which buffers are stored into the memory of another (``{buffer: memory owner}``)."""
    from ember.loopir.inplace import inplace_stores, reused_buffers, scatter_in_place
    from ember.loopir.ir import Scatter
    # a scatter writes into its target's memory; its kernels read and write it (autotuning times them on copies)
    inplace = {n.name: n.target for n in graph.nodes if isinstance(n, Scatter)}
    inplace.update(inplace_stores(graph, sched, gm.meta.get("ember_write_backs", ())))
    if backends == {"cpp"}:     # CPU: a new large tensor costs page faults; write over a dead one
        inplace.update(reused_buffers(graph, sched, inplace))
    elif backends == {"triton"} and not templates:
        # GPU: less memory held (a CUDA graph's pool keeps its peak); matmul templates fuse their epilogues instead
        inplace.update(reused_buffers(graph, sched, inplace, reductions=True))
    scatter_in_place(graph, sched, gm.meta.get("ember_write_backs", ()), inplace)
    return inplace


def _compile_graph(gm: fx.GraphModule, kind: str, options: Any) -> Callable[..., Any]:
    from ember.loopir.combo import Combo, ComboBody, combine
    from ember.loopir.ir import BufferRef, Layout
    from ember.loopir.kernel import kernel_body, share_pointers
    from ember.loopir.lower import LoweringError, check_devices, lower
    from ember.loopir.schedule import Kernel, schedule

    from .wrapper import make_wrapper

    name = f"{kind}_{next(_COUNTER)}"
    try:
        graph = lower(gm, name, align_matmuls=not getattr(options, "max_autotune", False),
                      hoists=lambda dev: kernel_backend(dev, options) == "triton")
        check_devices(graph, lambda dev: kernel_backend(dev, options) is not None)
    except (LoweringError, NotImplementedError) as e:
        if graph_symbols(gm) is not None:       # its FX graph holds symbolic constants: not runnable as is
            from ember.shapes import SymbolicUnsupported
            raise SymbolicUnsupported(f"ember.loopir: {e}") from e
        logs.log("perf_hints", f"ember: {name} runs as an FX graph: {e}")
        return gm
    # symbolic strides: None (the backward checks the layout it gets at run time)
    gm.meta["ember_output_strides"] = [_int_tuple(o.layout.stride) if isinstance(o, BufferRef) else None
                                       for o in graph.outputs]
    # GPU kernels: independent ones launch together as combo kernels (ember.loopir.combo), except under
    # max-autotune with matmul templates (which take epilogue kernels instead)
    templates = _has_templates(graph.nodes, options)
    spread = set() if templates else {n.layout.device for n in graph.nodes if isinstance(
        getattr(n, "layout", None), Layout) and kernel_backend(n.layout.device, options) == "triton"}
    sched = schedule(graph, spread=spread)
    if logs.enabled("schedule"):
        logs.log("schedule", f"{name}:\n{sched.python()}")
    kernels: dict[str, tuple[Callable, Any]] = {}
    sources: list[str] = []
    backends = {kernel_backend(s.device, options) for s in sched.steps if isinstance(s, Kernel)}
    from ember.loopir.inplace import memory_root
    inplace = _plan_inplace(graph, sched, gm, backends, templates)
    if spread:
        sched = combine(sched, inplace, lambda k: k.device in spread)
    by_backend: dict[str, list[Any]] = {}
    for step in sched.steps:
        if isinstance(step, Kernel):
            by_backend.setdefault(kernel_backend(step.device, options), []).append(step)

    def sym_kw(backend: str) -> dict:     # Triton's generator takes the graph's symbol table (triton.py)
        return {"symbols": graph.symbols} if backend == "triton" and graph.symbols is not None else {}

    def make_body(s: Kernel, mod: Any, share: bool) -> Any:
        if isinstance(s, Combo):
            return ComboBody(s, [make_body(p, mod, share) for p in s.parts])
        kw = sym_kw("triton") if share else {}
        b = kernel_body(s, persistent=mod.persistent(s, options, **kw) if hasattr(mod, "persistent") else True)
        b.table = graph.symbols
        b.aliased = {n for n in b.buffers if n in inplace or n in inplace.values()}  # read and written by 2 names
        b.memory = {n: memory_root(n, inplace) for n in b.aliased}
        if share:       # Triton: one pointer per memory (C++ kernels keep theirs)
            share_pointers(b)
        return b
    for backend, steps in by_backend.items():
        mod = _backend_module(backend)
        bodies = [make_body(s, mod, backend == "triton") for s in steps]
        _check_kernel_devices(graph, bodies)
        kw = sym_kw(backend)
        if hasattr(mod, "compile_kernels"):       # one build for all of a graph's kernels (C++: one TU)
            fns = mod.compile_kernels(bodies, options, name, **kw)
        else:
            fns = [mod.compile_kernel(b, options, **kw) for b in bodies]
        for body, fn in zip(bodies, fns):
            kernels[body.name] = (fn, body)
            sources.append(mod.source(body, **kw))
    if templates:
        from .triton_mm import use_templates
        sched = use_templates(sched, kernels, lambda d: kernel_backend(d, options) == "triton", sources,
                              epilogues=getattr(options, "epilogue_fusion", True))
    compiled = make_wrapper(sched, kernels, sources, inplace, steal=kind == "backward")
    if logs.enabled("output_code"):
        logs.log("output_code", f"# ember wrapper for {name}\n{compiled.source}\n" + "\n".join(sources))
    return compiled
