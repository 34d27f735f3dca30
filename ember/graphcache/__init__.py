"""The whole-graph cache: what AOT autograd, lowering and codegen made of a captured graph, kept on disk so that
a new process compiling the same model runs only capture and guards (``ember.compile``'s warm start).

Key: a SHA-256 over a text form of everything the result depends on: the captured graph's code, its
placeholders' symbolic-size metadata and symbol table, the call's input metadata (type, dtype, device, sizes,
strides, storage offset, ``requires_grad``, which inputs share memory, non-tensor values), the variant (training
or inference, grad mode), the ambient state tracing reads (autocast, default dtype, inference mode, threads),
the ``CompileOptions``, ``EMBER_*`` settings, and the versions (this format, ember and a hash of its source,
torch, Python, the C++ compiler, the processor identity; Triton's and the GPU's where a CUDA tensor is involved).

Value (store ``graphs``, one signed entry ``<key>.graph`` per variant, ``ember.diskcache``): plain data, no
pickle: a JSON header with each compiled graph's wrapper source and the table of its free names
(``ember.deploy.package``'s describe/bind), the runtime metadata the autograd runtime needs (outputs, write
backs, saved values, differentiable outputs, aliases, grad mode, output structure), the relations about sizes
tracing added to the symbol table, followed by the raw bytes of the wrapper's constant tensors. C++ kernels
are referenced by their entry in the kernel store (read and checked there when the graph is loaded). Triton
kernels (CUDA, or CPU under Triton's interpreter) are held as their source and launch configuration, with
max-autotune's choices (``graphcache.kernels``): a hit makes them again from source, and Triton's own cache
(``TRITON_CACHE_DIR``) supplies their binaries.

Submodules and attributes a graph names (``get_attr``/``call_module``): a subgraph capture made for a
higher-order operator (``torch.cond``, ``torch.func``) is keyed by its own text, recursively, with the plain-data
attributes capture set on it (``ember_hop``); a constant tensor by its metadata and a hash of its bytes. A training
graph with several differentiable outputs is cached; a call whose loss leaves some unused builds the backward
variant again (``rebuild.py``).

What is not cached (each logged under ``EMBER_LOGS=cache`` with the reason, and compiled as before): a graph
that names another kind of submodule or attribute, holds an argument that is not plain data, or calls a function
outside torch/operator/math/ember; inputs that are tensor subclasses or not strided; a compiled graph that is
not a generated wrapper of C++ or Triton kernels (the Python fallback); output views with symbolic
layouts; a build that added symbols or runtime assertions to the table; a training graph with several
differentiable outputs and symbolic sizes, or inputs that are views or share memory (``rebuild.Rebuilder.of``).
A hit never trusts its entry beyond its signature: anything unreadable is a miss (the entry is rebuilt and
rewritten).

Import order: this package sits in the top layer, with ``ember.deploy`` whose wrapper description it reuses; the
``ember`` backend (a layer below) reaches it through ``ember.backends.GRAPH_CACHE``, where importing
``ember.api`` registers ``make``.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import struct
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from .. import counters, diskcache, logs

FORMAT_VERSION = 1
STORE = "graphs"
MAGIC = b"EMBER-GRAPH\0"
_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout)
_MODULES = ("torch", "operator", "_operator", "math", "builtins", "ember.")
# settings that change what is compiled are part of the key; these only where output goes or how much is kept
# (ember sets TRITON_CACHE_MANAGER itself when it first uses Triton: a key read before and one read after
# must be the same)
_ENV_IGNORED = ("EMBER_LOGS", "EMBER_CACHE_DIR", "EMBER_CACHE_MAX_BYTES", "EMBER_GRAPH_CACHE",
                "TRITON_CACHE_DIR", "TRITON_CACHE_MANAGER")


class NotCacheable(Exception):
    """Why a graph is not put in (or read from) the whole-graph cache."""


def enabled() -> bool:
    return os.environ.get("EMBER_GRAPH_CACHE", "1").strip() not in ("0", "false", "no", "off")


class GraphCache:
    """The cache for one captured graph (one ``ember`` backend call). ``compiler`` wraps the backend's kernel
    compiler so that the raw compiled graphs of a build are recorded; ``build`` is AOT autograd's hook."""

    def __init__(self, gm: Any, options: Any, finish: Callable[[Any, str, Any], Any]) -> None:
        self.gm, self.options, self.finish = gm, options, finish
        self._static: str | NotCacheable | None = None
        self.recorded: list | None = None
        self.on_miss: Callable[[], Any] | None = None       # called before a build runs (the Triton workers)

    def compiler(self, compile_one: Callable[[Any, str], tuple]) -> Callable[[Any, str], Any]:
        """``compile_graph(g, kind)`` for AOT autograd: ``compile_one`` gives (raw callable, info), recorded
        while a build runs, and ``finish`` makes what runs (CUDA graphs, where on)."""
        def compile_graph(g: Any, kind: str) -> Any:
            fn, info = compile_one(g, kind)
            if self.recorded is not None:
                self.recorded.append((kind, fn, info))
            return self.finish(fn, kind, info)
        return compile_graph

    # the hook ---------------------------------------------------------------------------------------------
    def build(self, training: bool, args: Sequence[Any], binder: Any, real: Callable[[], tuple]) -> tuple:
        """``real()`` (AOT autograd's build of one variant: ``(built, out_spec)``), or its result from disk.
        AOT autograd asks only for builds of the captured graph itself (not of a synthetic-base wrapper); the
        variant (training or not, which inputs require grad, grad mode) is in the key through ``args`` and
        the ambient state."""
        try:
            key = self.key(training, args)
        except Exception as e:      # noqa: BLE001 - NotCacheable, or anything odd about the inputs: compile
            logs.log("cache", f"ember graph cache: {self.gm.__class__.__name__} not cached: {_why(e)}")
            self._missed()
            return real()
        name = f"{key}.graph"
        store = diskcache.store(STORE)
        data = store.read(name)
        if data is not None:
            from .entry import load_entry
            try:
                hit = load_entry(data, binder, self.finish, lambda: self._rebuilder(real, args, binder))
            except NotCacheable as e:
                logs.log("cache", f"ember graph cache: {store.entry(name)} cannot be used ({e}); rebuilding it")
                store.discard(name)
                hit = None
            if hit is not None:
                counters.bump("graph_cache_hits")
                logs.log("cache", f"ember graph cache: hit {name} (AOT autograd, lowering and codegen skipped)")
                return hit
        counters.bump("graph_cache_misses")
        self._missed()
        snap = _table_snapshot(binder)
        self.recorded = []
        try:
            built, spec = real()
        finally:
            recorded, self.recorded = self.recorded, None
        from .entry import dump_entry

        def write() -> list:
            untuned: list = []
            store.write(name, dump_entry(built, spec, recorded, binder, snap, training, untuned,
                                         lambda: self._rebuilder(real, args, binder)))
            return untuned
        try:
            untuned = write()
            logs.log("cache", f"ember graph cache: miss, stored {name}")
        except Exception as e:      # noqa: BLE001 - a result that cannot be written is only not cached
            logs.log("cache", f"ember graph cache: miss, not stored: {_why(e)}")
            return built, spec
        if untuned:
            _write_when_tuned(untuned, write, name)
        return built, spec

    def _missed(self) -> None:
        if self.on_miss is not None:
            self.on_miss()

    def _rebuilder(self, real: Any, args: Sequence[Any], binder: Any) -> Any:
        from .rebuild import Rebuilder
        return Rebuilder.of(real, args, binder, self._record)

    def _record(self, build: Callable[[], Any]) -> tuple[Any, list]:
        """``build()``'s result and the wrapper sources of the graphs it compiled."""
        self.recorded = []
        try:
            result = build()
        finally:
            recorded, self.recorded = self.recorded, None
        return result, [(getattr(fn, "__name__", None), getattr(fn, "source", None)) for _, fn, _ in recorded]

    # the key --------------------------------------------------------------------------------------------------
    def key(self, training: bool, args: Sequence[Any]) -> str:
        if self._static is None:
            try:
                self._static = static_text(self.gm, self.options)
            except NotCacheable as e:
                self._static = e
        if isinstance(self._static, NotCacheable):
            raise self._static
        root = diskcache.root()
        if diskcache.store("cpp").path != root / "cpp":
            # the kernels went to a private temporary store: a graph referring to them is of no use later
            raise NotCacheable(f"the kernel store under {root} is not usable, so neither is a cached graph")
        text = "\n".join([self._static, f"training {training}", args_text(args), ambient_text(args)])
        return hashlib.sha256(text.encode()).hexdigest()[:40]


def _write_when_tuned(untuned: list, write: Callable[[], list], name: str) -> None:
    """Max-autotune: the kernels' choices are made at the graph's first call, after its entry was written. Once
    every one is made, the entry is written again with them, so that a hit runs the chosen kernels directly."""
    pending = {id(a) for a in untuned}

    def tuned(a: Any) -> None:
        pending.discard(id(a))
        if pending:
            return
        for b in untuned:
            b.on_chosen.remove(tuned)
        try:
            write()
            logs.log("cache", f"ember graph cache: {name} stored again with its autotuned choices")
        except Exception as e:      # noqa: BLE001 - the first entry stays (its choices are looked up)
            logs.log("cache", f"ember graph cache: {name} not stored again: {_why(e)}")
    for a in untuned:
        a.on_chosen.append(tuned)


def _why(e: Exception) -> str:
    return str(e) if isinstance(e, NotCacheable) else f"{type(e).__name__}: {e}"


def static_text(gm: Any, options: Any) -> str:
    """The part of the key that depends on the graph and the process, not on the call."""
    from ember.heuristics import heuristics
    lines = [f"ember-graph-cache {FORMAT_VERSION}", *_versions(), f"options {options!r}",
             f"heuristics {heuristics()!r}"]       # the tuning constants in force (``ember.heuristics.override``)
    if getattr(options, "cpu_backend", None) == "triton":      # Triton's interpreter runs the CPU kernels
        import triton
        lines.append(f"triton {triton.__version__}")
    lines += [f"env {k}={v}" for k, v in sorted(os.environ.items())
              if k.startswith(("EMBER_", "TRITON_")) and k not in _ENV_IGNORED]
    _graph_text(gm, "", lines)
    return "\n".join(lines)


def _graph_text(gm: Any, path: str, lines: list[str]) -> None:
    """``gm``'s code, its placeholders' size metadata and symbol table, and what its ``get_attr`` and
    ``call_module`` nodes name: a submodule that is a graph (a higher-order operator's branch or body, as
    capture makes them) by its own text, recursively; a constant tensor by its metadata and a hash of its
    bytes. Anything else an attribute may hold is not shown by the code: ``NotCacheable``."""
    for n in gm.graph.nodes:
        if n.op in ("call_module", "get_attr"):
            lines.append(f"attribute {path}{n.target}: {_attribute_text(gm, n.target, path, lines)}")
        if n.op == "call_function":
            _check_target(n.target)
        _check_plain((n.args, n.kwargs), n)
        if n.op == "placeholder":
            meta = {k: repr(v) for k, v in sorted(n.meta.items()) if k in ("ember_shape", "ember_stride", "ember_int")}
            lines.append(f"placeholder {n.name} {meta}")
    lines.append(gm.code)
    table = gm.meta.get("ember_symbols") if hasattr(gm, "meta") else None
    if table is not None and table.symbols:
        lines.append(table.describe())


def _attribute_text(gm: Any, target: str, path: str, lines: list[str]) -> str:
    import torch.fx as fx
    obj: Any = gm
    for part in str(target).split("."):
        obj = getattr(obj, part, None)
    if isinstance(obj, fx.GraphModule) and _generated(obj):
        _graph_text(obj, f"{path}{target}.", lines)
        return f"graph (above) {_extra_attributes(obj, target)}"
    if isinstance(obj, torch.Tensor) and type(obj) in (torch.Tensor, torch.nn.Parameter) \
            and obj.layout == torch.strided and not obj.is_quantized:
        data = obj.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        return (f"tensor {obj.dtype} {obj.device} {tuple(obj.shape)} {obj.stride()} {obj.storage_offset()} "
                f"rg={obj.requires_grad} sha256={hashlib.sha256(data).hexdigest()}")
    what = "calls a submodule" if isinstance(obj, torch.nn.Module) else "reads a module attribute"
    raise NotCacheable(f"the graph {what} ({target}: {type(obj).__name__}), whose value the graph's code does "
                       "not show")


def _generated(gm: Any) -> bool:
    """A ``GraphModule`` whose ``forward`` is its graph's generated code (not a subclass with its own)."""
    import torch.fx as fx
    cls = type(gm)
    fwd = getattr(cls, "forward", None)
    return all(issubclass(fx.GraphModule, b) or b is cls for b in cls.__mro__) and \
        "<eval_with_key>" in getattr(getattr(fwd, "__code__", None), "co_filename", "")


@functools.lru_cache(maxsize=1)
def _plain_graph_module_attributes() -> frozenset:
    import torch.fx as fx
    return frozenset(fx.GraphModule(torch.nn.Module(), fx.Graph()).__dict__)


def _extra_attributes(gm: Any, target: str) -> str:
    """The attributes capture set on a subgraph beyond a plain ``GraphModule``'s (``ember_hop``: which
    transform applies it, and how), as text; ``NotCacheable`` for one that is not plain data."""
    extra = {k: v for k, v in vars(gm).items() if k not in _plain_graph_module_attributes()}
    for k, v in extra.items():
        if not _plain_data(v):
            raise NotCacheable(f"the subgraph {target} has an attribute {k} of type {type(v).__name__}, which the "
                               "key cannot show")
    return repr(sorted(extra.items()))


def _plain_data(v: Any) -> bool:
    import dataclasses
    if isinstance(v, _PLAIN):
        return True
    if isinstance(v, (tuple, list)):
        return all(_plain_data(x) for x in v)
    if isinstance(v, dict):
        return all(_plain_data(k) and _plain_data(x) for k, x in v.items())
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return all(_plain_data(getattr(v, f.name)) for f in dataclasses.fields(v))
    return False


def _check_target(target: Any) -> None:
    """A call the graph's code names completely: a torch op overload, or a module-level function of torch,
    operator, math, builtins or ember (not a closure or an object made at capture time, whose behaviour the
    code does not show)."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return
    mod, qual = getattr(target, "__module__", None) or "", getattr(target, "__qualname__", "") or ""
    if not (mod.split(".")[0] in _MODULES or mod.startswith(_MODULES)) or "<" in qual or not qual:
        raise NotCacheable(f"the graph calls {qual or target!r} of module {mod!r}")
    obj: Any = sys.modules.get(mod)
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    by_name = getattr(sys.modules.get(mod), getattr(target, "__name__", "") or "", None)
    if obj is not target and getattr(obj, "__func__", None) is not target and by_name is not target:
        raise NotCacheable(f"the graph calls {mod}.{qual}, which is not that module's own function")


def _check_plain(v: Any, node: Any) -> None:
    import torch.fx as fx
    if isinstance(v, (fx.Node, slice, type(Ellipsis), *_PLAIN)):
        if isinstance(v, slice):
            _check_plain((v.start, v.stop, v.step), node)
        return
    if isinstance(v, (tuple, list, torch.Size)):
        for x in v:
            _check_plain(x, node)
        return
    if isinstance(v, dict):
        for k, x in v.items():
            _check_plain(k, node)
            _check_plain(x, node)
        return
    raise NotCacheable(f"node {node.name} has an argument of type {type(v).__name__}, which the key cannot show")


@functools.lru_cache(maxsize=None)
def source_hash() -> str:
    """A hash of ember's own source (every ``.py`` of the package): an entry made by other code, a development
    checkout one edit ago, is never used (the version string alone does not change with each edit)."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _versions() -> list[str]:
    import ember
    from ember.deploy import package_format as F
    out = [f"ember {ember.__version__} source {source_hash()}", f"torch {torch.__version__}", f"python {sys.version}",
           f"machine {platform.machine()}", f"cpu {F.target('cpu')}"]
    from ember.codegen.cpp_build import compiler, compiler_identity
    try:
        out.append(f"cxx {compiler_identity(compiler())}")
    except Exception as e:      # noqa: BLE001 - no compiler: the graph is compiled (and fails) as before
        raise NotCacheable(f"the C++ compiler's version is unknown ({e})") from None
    return out


def args_text(args: Sequence[Any]) -> str:
    from ember.autograd.aliasing import alias_key
    lines = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            if type(a) not in (torch.Tensor, torch.nn.Parameter) or a.layout != torch.strided or a.is_quantized:
                raise NotCacheable(f"input {i} is a {type(a).__name__} ({a.layout})")
            lines.append(f"T{i} {type(a).__name__} {a.dtype} {a.device} {tuple(a.shape)} {a.stride()} "
                         f"{a.storage_offset()} rg={a.requires_grad} leaf={a.is_leaf} view={a._is_view()} "
                         f"conj={a.is_conj()} neg={a.is_neg()}")
        elif isinstance(a, _PLAIN):
            lines.append(f"V{i} {type(a).__name__} {a!r}")
        else:
            raise NotCacheable(f"input {i} is a {type(a).__name__}")
    lines.append(f"aliases {alias_key(list(args))}")
    return "\n".join(lines)


def ambient_text(args: Sequence[Any]) -> str:
    """The process state tracing and code generation read."""
    ac = [(d, torch.is_autocast_enabled(d), str(torch.get_autocast_dtype(d))) for d in ("cpu", "cuda")]
    out = [f"grad {torch.is_grad_enabled()} inference {torch.is_inference_mode_enabled()}", f"autocast {ac}",
           f"default dtype {torch.get_default_dtype()}", f"threads {torch.get_num_threads()}",
           f"deterministic {torch.are_deterministic_algorithms_enabled()}",
           f"matmul precision {torch.get_float32_matmul_precision()} cudnn {torch.backends.cudnn.enabled} "
           f"{torch.backends.cudnn.deterministic} {torch.backends.cudnn.allow_tf32}",
           f"sdp {torch.backends.cuda.flash_sdp_enabled()} {torch.backends.cuda.mem_efficient_sdp_enabled()} "
           f"{torch.backends.cuda.math_sdp_enabled()}"]
    if any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in args):
        import triton
        from ember.deploy import package_format as F
        out.append(f"triton {triton.__version__} gpu {F.target('cuda')}")
    return "\n".join(out)


# the symbol table (graphs with symbolic sizes) --------------------------------------------------------------
def _table_snapshot(binder: Any) -> tuple | None:
    if binder is None:
        return None
    t = binder.table
    return (len(t.symbols), len(t.relations), len(t.asserts), dict(t.ranges))


def table_delta(binder: Any, snap: tuple | None) -> list:
    """The relations a build added to the table; ``NotCacheable`` when it changed anything else."""
    if binder is None:
        return []
    t = binder.table
    n_sym, n_rel, n_assert, ranges = snap
    if len(t.symbols) != n_sym or len(t.asserts) != n_assert or dict(t.ranges) != ranges:
        raise NotCacheable("the build added symbols, runtime assertions or ranges to the symbol table")
    return [r.expr for r in t.relations[n_rel:]]


def entry_path(key: str) -> Path:
    return diskcache.store(STORE).entry(f"{key}.graph")


def make(gm: Any, options: Any, finish: Callable[[Any, str, Any], Any]) -> GraphCache | None:
    """The ``ember`` backend's whole-graph cache for one captured graph (None when ``EMBER_GRAPH_CACHE=0``)."""
    return GraphCache(gm, options, finish) if enabled() else None


def register() -> None:
    from ember.backends import GRAPH_CACHE
    if make not in GRAPH_CACHE:
        GRAPH_CACHE.append(make)


__all__ = ["GraphCache", "make", "register", "NotCacheable", "enabled", "FORMAT_VERSION", "STORE", "MAGIC"]
