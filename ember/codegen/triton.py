"""The Triton kernel backend: one ``@triton.jit`` kernel per ``KernelBody`` (CUDA tensors, or CPU tensors under
``TRITON_INTERPRET=1``, set before triton is imported, with ``cpu_backend="triton"``).

Interface used by ``ember.codegen.compile_graph``: ``persistent(kernel, options)``, ``compile_kernel(body,
options)`` / ``compile_kernels(bodies, options, name)`` -> ``callable(*tensors)`` (tensors in the order of
``body.buffers``), and ``source(body)``.

Symbolic sizes (dynamic shapes, docs/dynamic-contract.md): each of these takes ``symbols=`` (the graph's
``SymbolTable``, ``gm.meta["ember_symbols"]``); a kernel whose sizes contain symbols raises
``SymbolicUnsupported`` without it. Such a kernel is a ``SymbolicTritonKernel``, launched as
``kernel(*tensors, *sizes)``: the tensors in the order of ``body.buffers``, then one Python int per symbol of
``kernel.symbols`` (names, sorted: ``("s0", "s1")``), the values of this call (``s0 = arg0.size(0)``). The grid
is computed from them at each launch; one source serves every size. Its block sizes come from the hints, and
the size classes it relies on (``rnumel <= RBLOCK`` of a persistent reduction, indices below ``2**31`` for
32-bit indexing) are recorded in the table with ``decide`` while ``persistent``/``compile_kernel(s)`` run, so
the entry's guard covers them. The kernel cache key (the source's hash) holds no hint.

Kernels are written to the ``diskcache`` store ``$EMBER_CACHE_DIR/triton`` (default ``~/.cache/ember/triton``)
under the hash of their source and imported from there, so Triton's own on-disk cache (keyed by source) applies and a warm start
compiles nothing. ``compile_kernels`` compiles a graph's kernels in a thread pool (Triton's async compile
mode) before the first call. A launch binds only tensors: sizes and block sizes are literals in the source, the
grid is precomputed, and after the first call a kernel launches through Triton's compiled launcher directly,
skipping ``JITFunction.run``'s argument binding and specialization (keyed by the pointers' 16-byte alignment,
which is all Triton specializes on here).
"""
from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ember import counters
from ember.loopir.combo import ComboBody
from ember.loopir.kernel import KernelBody
from ember.loopir.schedule import Kernel

from . import triton_sym
from .triton_modules import cache_dir, load_module  # noqa: F401  (part of this module's interface)
from .triton_combo import generate_combo
from .triton_gen import LaunchConfig, generate, inner_reduction, is_persistent, next_pow2, reduced_load_indices

def available() -> bool:
    return importlib.util.find_spec("triton") is not None


def persistent(kernel: Kernel, options: Any = None, symbols: Any = None) -> bool:
    """Whether ``kernel``'s reductions hold their rows whole. Over a symbolic row, decided at the hints and,
    where persistent, only for rows up to its RBLOCK (recorded in ``symbols``, the graph's ``SymbolTable``)."""
    if not kernel.is_reduction:
        return True
    inner = inner_reduction(reduced_load_indices(kernel))
    if triton_sym.is_symbolic(kernel.rnumel):
        triton_sym.require_table(symbols, f"kernel {kernel.name}")
        return triton_sym.persistent_for(symbols, kernel.rnumel, inner, is_persistent, next_pow2)
    return is_persistent(int(kernel.rnumel), inner)


def source(body: KernelBody | ComboBody, symbols: Any = None) -> str:
    text = getattr(body, "_triton_source", None)     # the heuristic configuration's, kept by _build
    if text is not None:
        return text
    if isinstance(body, ComboBody):
        return generate_combo(body, symbols)[0]
    return generate(body, persistent(body.kernel, None, symbols), table=symbols)[0]


class TritonKernel:
    """A compiled kernel: ``kernel(*tensors)`` launches it on the precomputed grid. Its module (the
    ``@triton.jit`` function) is imported only where it is needed: a kernel a worker compiled is loaded from
    Triton's cache by the worker's hash (``load_compiled``)."""

    def __init__(self, src: str, fname: str, cfg: LaunchConfig, name: str, interpret: bool) -> None:
        self.source, self.fname, self.cfg, self.name = src, fname, cfg, name
        self._fn: Any = None
        self.grid = cfg.grid
        self.empty = cfg.grid[0] == 0
        self.fast: dict[tuple, Callable[..., Any]] = {}
        self.interpreted = interpret
        self.meta = {"num_warps": cfg.num_warps} | ({"num_stages": cfg.num_stages} if cfg.num_stages else {})
        # Triton specializes a kernel on which pointers are 16-byte aligned. ``checked``: the argument positions
        # whose alignment may change between calls (None: all); the wrapper leaves out the buffers it allocates
        # itself (always aligned). With none to check, ``fixed`` is the one launcher, called without a lookup.
        self.checked: tuple[int, ...] | None = None
        self.fixed: Callable[..., None] | None = None
        self.pending: Any = None        # the worker compile (triton_pool) its first launch waits for
        self.worker_dtypes: tuple = ()  # the argument dtypes the worker compiled it for
        if interpret:
            self._fn = getattr(load_module(src), fname)

    @property
    def fn(self) -> Any:
        """The ``@triton.jit`` function (its module imported at first use)."""
        if self._fn is None:
            self._fn = getattr(load_module(self.source), self.fname)
        return self._fn

    @property
    def launch(self) -> Callable[..., Any]:
        return self.fn[self.grid]

    def set_checked(self, positions: Sequence[int]) -> None:
        self.checked = tuple(positions)

    def __call__(self, *args: torch.Tensor) -> None:
        fixed = self.fixed
        if fixed is not None:
            fixed(*args)
            return
        if self.empty:
            return
        if self.interpreted:
            self.launch(*args)
            return
        chk = self.checked
        key = tuple((a.data_ptr() & 15) == 0 for a in (args if chk is None else [args[i] for i in chk]))
        fast = self._launcher(key, args)
        if chk == ():
            self.fixed = fast
        fast(*args)

    def _launcher(self, key: tuple, args: tuple) -> Callable[..., None]:
        """The launcher for this alignment key (made at its first call, from that call's arguments)."""
        fast = self.fast.get(key)
        if fast is None:
            fast = self.fast[key] = self._first_launch(args)
        return fast

    def aligned_launcher(self, args: tuple) -> Callable[..., None]:
        """The launcher for calls whose arguments are all 16-byte aligned, ``args`` being the first such call's:
        the wrapper checks the arguments that may not be once per call (``_aligned``) and calls this launcher
        itself, without the per-launch alignment key of ``__call__``."""
        if self.empty:
            return _no_launch
        if self.interpreted:
            return self.launch
        return self._launcher((True,) * (len(args) if self.checked is None else len(self.checked)), args)

    def _first_launch(self, args: tuple) -> Callable[..., None]:
        """The launcher for this alignment of the arguments (it does not launch): the worker's compile where it
        made this variant (every pointer 16-byte aligned: the buffers the wrapper allocates too, which are not
        all aligned, e.g. a slice of a concatenation's output), else Triton's JIT path (compiling, or loading from
        its disk cache)."""
        reply = compiled = None
        same = False
        if self.pending is not None:
            from . import triton_pool
            reply = triton_pool.wait(self)
            # the worker's variant: every pointer 16-byte aligned, each argument of the dtype it was made for
            same = all((a.data_ptr() & 15) == 0 for a in args) and \
                tuple(a.dtype for a in args) == self.worker_dtypes
            if reply is not None and not same:
                triton_pool.note_variant(self, args)
            elif reply is not None:
                compiled = load_compiled(self, reply)
                if compiled is not None:
                    triton_pool.count_loaded()
        if compiled is None:        # warmup=True: compiled for these arguments, not launched (the caller launches)
            counters.bump("kernel_compiles")
            compiled = self.fn.run(*args, grid=self.grid, warmup=True, **self.meta)
            if reply is not None and same:
                triton_pool.check_hit(self, reply["hash"], compiled)
        return _direct_launcher(compiled, self.grid, args) or self._slow

    def _slow(self, *args: torch.Tensor) -> None:
        self.launch(*args, **self.meta)

    def warmup(self, args: list[torch.dtype]) -> None:
        if self.pending is not None:
            from .triton_pool import wait
            wait(self)
        self.fn.warmup(*args, grid=self.grid, **self.meta)


def _no_launch(*args: torch.Tensor) -> None:
    """The launcher of a kernel over nothing (a zero-size grid)."""


def _int_class(v: int) -> tuple[bool, bool, bool]:
    """What Triton specializes an int argument on: being 1, divisibility by 16, and fitting 32 bits."""
    return v == 1, v % 16 == 0, -2 ** 31 <= v < 2 ** 31


class SymbolicTritonKernel(TritonKernel):
    """A kernel over symbolic sizes: ``kernel(*tensors, *sizes)``, ``sizes`` the values of ``self.symbols``
    (ints, in order). The grid is computed from them per launch (``triton_sym.grid_function``). On a GPU a
    launcher is compiled per specialization key: the pointers' alignment (as ``TritonKernel``) and each int's
    ``_int_class``; the launch passes the grid. Not compiled by the worker pool (its ints are not known
    before the first call); ``warmup`` compiles it for the hints."""

    def __init__(self, src: str, fname: str, cfg: LaunchConfig, name: str, interpret: bool,
                 hints: tuple[int, ...]) -> None:
        super().__init__(src, fname, cfg, name, interpret)
        self.symbols: tuple[str, ...] = cfg.symbols
        self.nsyms = len(cfg.symbols)
        self.grid_fn = triton_sym.grid_function(cfg.grid_expr, cfg.symbols)
        self.hints = hints
        self.empty = False

    def __call__(self, *args: Any) -> None:
        n = self.nsyms
        grid = self.grid_fn(*args[-n:])
        if grid[0] <= 0:
            return
        if self.interpreted:
            self.fn[grid](*args)
            return
        chk = self.checked
        ptrs = args[:-n] if chk is None else [args[i] for i in chk]
        key = tuple((a.data_ptr() & 15) == 0 for a in ptrs) + tuple(_int_class(v) for v in args[-n:])
        fast = self.fast.get(key)
        if fast is None:
            fast = self.fast[key] = self._first_symbolic_launch(args, grid)
        fast(grid, *args)

    def aligned_launcher(self, args: tuple) -> Callable[..., None]:
        return self         # its ints' specialization is looked up per call

    def _first_symbolic_launch(self, args: tuple, grid: tuple) -> Callable[..., None]:
        counters.bump("kernel_compiles")
        compiled = self.fn.run(*args, grid=grid, warmup=True, **self.meta)
        return _grid_launcher(compiled, args) or self._slow_grid

    def _slow_grid(self, grid: tuple, *args: Any) -> None:
        self.fn[grid](*args, **self.meta)

    def warmup(self, args: list[torch.dtype]) -> None:
        self.fn.warmup(*args, *self.hints, grid=self.grid_fn(*self.hints), **self.meta)


def _grid_launcher(compiled: Any, args: tuple) -> Callable[..., None] | None:
    """``_direct_launcher`` for a grid given per launch: ``launch(grid, *args)``."""
    try:
        from triton import knobs
        from triton.runtime.driver import driver
        if hasattr(compiled, "result"):
            compiled = compiled.result()
        run, function, meta = compiled.run, compiled.function, compiled.packed_metadata
        stream = driver.active.get_current_stream
        dev = args[0].device.index if args and args[0].device.index is not None else 0
        enter, exit_ = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        if _no_hooks(enter) and _no_hooks(exit_):
            def launch(grid: tuple, *a: Any) -> None:
                run(grid[0], grid[1], grid[2], stream(dev), function, meta, None, None, None, *a)
        else:
            def launch(grid: tuple, *a: Any) -> None:
                s = stream(dev)
                run(grid[0], grid[1], grid[2], s, function, meta, compiled.launch_metadata(grid, s, *a), enter,
                    exit_, *a)
        return launch
    except Exception as e:  # noqa: BLE001 - any mismatch with this Triton: keep the regular launch path
        from ember import logs
        logs.log("perf_hints", f"ember.codegen.triton: direct launch unavailable ({type(e).__name__}: {e}); "
                               "kernels launch through JITFunction.run")
        return None


_LOADED: dict[tuple, Any] = {}      # (Triton cache hash, device) -> the kernel loaded by it


def load_compiled(kernel: TritonKernel, info: dict) -> Any:
    """``kernel`` as its worker compiled it, loaded from Triton's disk cache by the worker's hash and
    specialization (what ``triton.compile`` does on a cache hit, without computing the key: that needs the
    kernel's module imported and its source walked for dependencies); None where it cannot (the JIT path
    then loads it)."""
    if "signature" not in info:
        return None
    try:
        from triton.runtime.driver import driver
        key = (info["hash"], driver.active.get_current_device())
        if key in _LOADED:          # a kernel with the same function (another layer's) loaded it already
            return _LOADED[key]
        from types import SimpleNamespace

        from triton.compiler.compiler import ASTSource, CompiledKernel
        from triton.runtime.cache import get_cache_manager
        name = info["name"]
        group = get_cache_manager(info["hash"]).get_group(f"{name[:150]}.json")
        if not group:
            return None
        fn = SimpleNamespace(__name__=name, arg_names=None, launch_metadata=None)
        src = ASTSource(fn, info["signature"], None, info["attrs"])
        src.constants = info["constants"]
        compiled = CompiledKernel(src, group, info["hash"])
        compiled._init_handles()       # the binary and launcher load now: an error here takes the JIT path
        _LOADED[key] = compiled
        return compiled
    except Exception as e:  # noqa: BLE001 - another Triton's internals: its JIT path loads the kernel
        from ember import logs
        logs.log("perf_hints", f"ember: kernel {kernel.name} not loaded by its worker's hash "
                               f"({type(e).__name__}: {e}); loading it through Triton's JIT")
        return None


def _no_hooks(hook: Any) -> bool:
    """Triton 3.6 keeps launch hooks in a ``HookChain`` that is present even when empty."""
    if hook is None:
        return True
    calls = getattr(hook, "calls", None)
    return calls is not None and len(calls) == 0


def _c_launcher(run: Any) -> tuple | None:
    """(launch, cooperative, pdl) of a Triton 3.x ``CudaLauncher`` that needs no scratch memory: calling its C
    ``launch`` directly skips the Python ``__call__`` (two scratch allocations of nothing, a closure) per launch."""
    try:
        if run.global_scratch_size or run.profile_scratch_size or run.num_ctas != 1:
            return None
        return run.launch, run.launch_cooperative_grid, run.launch_pdl
    except AttributeError:
        return None


def _direct_launcher(compiled: Any, grid: tuple, args: tuple) -> Callable[..., None] | None:
    """Launch through the compiled kernel's launcher (what ``JITFunction.run`` ends in, without re-binding
    and re-specializing the arguments on every call), or None where this Triton does not look as expected.
    Launch hooks (profilers) installed at build time are honoured as ``JITFunction.run`` does."""
    try:
        from triton import knobs
        from triton.runtime.driver import driver
        if hasattr(compiled, "result"):
            compiled = compiled.result()
        run, function, meta = compiled.run, compiled.function, compiled.packed_metadata
        stream = driver.active.get_current_stream
        dev = args[0].device.index if args and args[0].device.index is not None else 0
        g0, g1, g2 = grid
        enter, exit_ = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        if _no_hooks(enter) and _no_hooks(exit_):
            c_launch = _c_launcher(run)
            if c_launch is not None:     # no scratch memory to allocate: the C launcher itself
                launch_fn, coop, pdl = c_launch

                def launch(*a: torch.Tensor) -> None:
                    launch_fn(g0, g1, g2, stream(dev), function, coop, pdl, None, None, meta, None, None, None, *a)
                return launch

            def launch(*a: torch.Tensor) -> None:
                run(g0, g1, g2, stream(dev), function, meta, None, None, None, *a)
        else:
            def launch(*a: torch.Tensor) -> None:
                s = stream(dev)
                run(g0, g1, g2, s, function, meta, compiled.launch_metadata(grid, s, *a), enter, exit_, *a)
        return launch
    except Exception as e:  # noqa: BLE001 - any mismatch with this Triton: keep the regular launch path
        from ember import logs
        logs.log("perf_hints", f"ember.codegen.triton: direct launch unavailable ({type(e).__name__}: {e}); "
                               "kernels launch through JITFunction.run")
        return None


def _kernel(src: str, fname: str, cfg: LaunchConfig, name: str, interp: bool, symbols: Any) -> TritonKernel:
    if not cfg.symbols:
        return TritonKernel(src, fname, cfg, name, interp)
    hints = {s.name: v for s, v in symbols.hints.items()}
    return SymbolicTritonKernel(src, fname, cfg, name, interp, tuple(hints[n] for n in cfg.symbols))


def _build(body: KernelBody | ComboBody, cfg: LaunchConfig | None = None,
           is_persistent: bool | None = None, symbols: Any = None) -> TritonKernel:
    from .triton_helpers import interpreting
    interp = interpreting()
    if body.kernel.device.type != "cuda" and not interp:
        raise RuntimeError(f"ember.codegen.triton: kernel {body.name} is on {body.kernel.device}; Triton runs CPU "
                           "tensors only under TRITON_INTERPRET=1, set before triton is first imported "
                           "(or use cpu_backend='cpp')")
    if isinstance(body, ComboBody):        # its parts' configurations are the heuristic ones
        src, fname, cfg = generate_combo(body, symbols)
        body._triton_source = src  # type: ignore[attr-defined]
        return _kernel(src, fname, cfg, body.name, interp, symbols)
    pers = persistent(body.kernel, None, symbols) if is_persistent is None else is_persistent
    heuristic = cfg is None and is_persistent is None
    src, fname, cfg = generate(body, pers, cfg=cfg, table=symbols)
    if heuristic:
        body._triton_source = src  # type: ignore[attr-defined]
    return _kernel(src, fname, cfg, body.name, interp, symbols)


def compile_kernel(body: KernelBody | ComboBody, options: Any = None, symbols: Any = None) -> Callable[..., None]:
    return _build(body, symbols=symbols)


def compile_kernels(bodies: list[KernelBody | ComboBody], options: Any = None,
                    name: str = "", symbols: Any = None) -> list[Callable[..., None]]:
    if getattr(options, "max_autotune", False):
        return _autotuned_kernels(bodies, symbols)
    kernels, rest = [], []
    cuda = torch.cuda.is_available()
    for b in bodies:       # each kernel goes to a worker as soon as it is generated
        k = _build(b, symbols=symbols)
        kernels.append(k)
        if cuda and not k.interpreted and not _submit(k, _dtypes(b)):
            rest.append((k, _dtypes(b)))
    _compile_in_threads(rest)
    return kernels


class _Reordered:
    """A candidate built from another body of the same kernel, whose buffers come in another order."""

    def __init__(self, kernel: TritonKernel, perm: list[int]) -> None:
        self.kernel, self.perm = kernel, perm
        self.source, self.interpreted = kernel.source, kernel.interpreted

    def __call__(self, *args: Any) -> None:
        self.kernel(*[args[i] for i in self.perm], *args[len(self.perm):])     # then a symbolic kernel's sizes

    def warmup(self, dtypes: list[torch.dtype]) -> None:
        self.kernel.warmup([dtypes[i] for i in self.perm])


def _candidates(body: KernelBody, symbols: Any = None) -> list[tuple[str, Any]]:
    """(label, kernel) for each configuration max-autotune tries; the heuristic one first. Reductions whose
    rows fit in registers also try the looped form (a body built with ``persistent=False``)."""
    from ember.loopir.kernel import kernel_body, share_pointers

    from .triton_gen import configs
    k = body.kernel
    pers = persistent(k, None, symbols)
    out: list[tuple[str, Any]] = []
    for cfg in configs(body, pers, symbols):
        out.append((_label(cfg), _build(body, cfg, pers, symbols)))
    rnumel = triton_sym.hint(symbols, k.rnumel) if triton_sym.is_symbolic(k.rnumel) else int(k.rnumel)
    if k.is_reduction and pers and rnumel >= 512:
        looped = kernel_body(k, persistent=False)
        looped.aliased, looped.memory = set(body.aliased), dict(body.memory)
        share_pointers(looped)          # as ``body`` was (ember.codegen.compile_graph): the same parameters
        names = list(body.buffers)
        if set(looped.buffers) == set(names):
            perm = [names.index(b) for b in looped.buffers]
            for cfg in configs(looped, False, symbols):
                out.append((_label(cfg), _Reordered(_build(looped, cfg, False, symbols), perm)))
    return out


def _label(cfg: LaunchConfig) -> str:
    kind = "persistent" if cfg.persistent else "looped"
    st = f" s{cfg.num_stages}" if cfg.num_stages else ""
    return f"{kind} X{cfg.xblock} R{cfg.rblock} w{cfg.num_warps}{st}" if cfg.rblock > 1 or not cfg.persistent \
        else f"X{cfg.xblock} w{cfg.num_warps}"


def _autotuned_kernels(bodies: list[KernelBody | ComboBody], symbols: Any = None) -> list[Callable[..., None]]:
    from .autotune import Autotuned, digest
    out: list[Callable[..., None]] = []
    every: list[tuple[Any, list[torch.dtype]]] = []
    for b in bodies:
        cands = _candidates(b, symbols) if isinstance(b, KernelBody) else [("combo", _build(b, symbols=symbols))]
        kernels = [c for _, c in cands]
        every += [(c, _dtypes(b)) for c in kernels]
        if len(kernels) == 1:
            out.append(kernels[0])
            continue
        loaded = {st.args[0] for st in b.loads()}
        scratch = [i for i, (n, (_, role)) in enumerate(b.buffers.items())
                   if n in b.aliased or (role == "out" and n in loaded)]
        out.append(Autotuned(kernels, digest([c.source for c in kernels], b.kernel.device), b.name, scratch,
                             [lab for lab, _ in cands]))
    if every and not every[0][0].interpreted and torch.cuda.is_available():
        precompile(every)
    return out


def _dtypes(body: KernelBody | ComboBody) -> list[torch.dtype]:
    return [dt for dt, _ in body.buffers.values()]


def _unwrap(kernel: Any, dtypes: list[torch.dtype]) -> tuple[TritonKernel, list[torch.dtype]] | None:
    """The ``TritonKernel`` a precompiled callable launches, and its argument dtypes."""
    if isinstance(kernel, TritonKernel):
        return kernel, dtypes
    if isinstance(kernel, _Reordered):
        return kernel.kernel, [dtypes[i] for i in kernel.perm]
    inner = getattr(kernel, "kernel", None)      # a matmul template choice
    return (inner, dtypes) if isinstance(inner, TritonKernel) else None


def precompile(kernels: list[tuple[Any, list[torch.dtype]]]) -> None:
    """Compile every (kernel, argument dtypes) (for 16-byte aligned pointers, what fresh allocations get): in
    worker processes without waiting (``triton_pool``; each kernel's first launch waits for its own), or where
    there are none, in parallel threads here, waiting for all."""
    _compile_in_threads([(k, dtypes) for k, dtypes in kernels if not _submit(k, dtypes)])


def _submit(kernel: Any, dtypes: list[torch.dtype]) -> bool:
    """``kernel`` sent to a compile worker (False: no pool, or nothing Triton compiles)."""
    from .triton_pool import submit
    u = _unwrap(kernel, dtypes)
    return u is not None and not isinstance(u[0], SymbolicTritonKernel) and submit(*u)


def _compile_in_threads(kernels: list[tuple[Any, list[torch.dtype]]]) -> None:
    """Compile (kernel, argument dtypes) pairs in parallel threads here, waiting for all (no worker pool)."""
    try:
        from concurrent.futures import ThreadPoolExecutor

        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:
        return
    workers = min(len(kernels), os.cpu_count() or 1, 16)
    if workers <= 1:
        return
    with ThreadPoolExecutor(workers) as pool, AsyncCompileMode(pool):
        for k, dtypes in kernels:
            k.warmup(dtypes)
