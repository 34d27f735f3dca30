"""CUDA graphs for compiled graphs (mode ``reduce-overhead``): record each graph once, then replay it.

Input: a compiled graph ``fn(*flat_inputs) -> tuple`` (a ``CompiledGraph``, an FX graph, any callable), its kind
("inference", "forward", "backward") and the ``CudaGraphPool`` of the compile it belongs to. Output:
``cudagraphify(...)``, a callable with the same convention.

How a call runs:
- Per *signature* (shapes, strides, dtypes and devices of the tensor inputs, the other inputs' values, and the
  addresses of static inputs) the first call runs ``fn`` eagerly (warm-up: kernels compile, cuBLAS
  initializes); the next call records a ``torch.cuda.CUDAGraph`` into the pool and every later call replays it.
- Static inputs are read in place, never copied: ``nn.Parameter``s, the same tensor object as in the warm-up
  call (buffers, lifted module attributes), and outputs of a graph of the same pool (saved activations feeding
  the backward, values crossing a graph break). A replay checks that they still have the recorded address;
  other inputs are copied into placeholders allocated at recording.
- Outputs live in the pool. Each call hands out new tensors over that memory (each with its own storage
  object, so their liveness is known from a storage weak reference). Outputs that alias an input are handed out
  as views of the caller's input.

Memory and overwrites (the invariant everything rests on):
- One pool per ``ember.compile`` call (per ``OptimizedModule``): the backend factory makes a ``CudaGraphPool``
  and every graph compiled for it (inference, forward, backward, the graphs between graph breaks, recompiles)
  records into that pool, so their intermediates share memory.
- A recording keeps its static outputs alive for its whole life, so a graph recorded later never allocates
  over them; it can only reuse memory that earlier graphs used for intermediates. Hence replaying recording R
  writes only into the outputs of R and of recordings made after R: exactly those handed-out outputs are *at
  risk* when R replays.
- Before a replay, at-risk outputs still alive are handled: outputs of a forward graph whose backward has not
  run yet (saved activations, say, when two forwards run before one backward) are protected, so another
  recording of the same graph is made (or, past ``cudagraph_max_records``, the call runs without a graph);
  so are live outputs of a backward graph (gradients: ``.grad`` may hold one that the next backward adds
  into); every other live at-risk output is invalidated: accessing it later raises torch's error
  ("accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run", saying to clone it or
  call ``mark_step_begin()``). Where this torch build cannot invalidate storages, outputs are copied out of the
  pool instead, so nothing is ever overwritten silently.
- ``mark_step_begin()`` (the analogue of ``torch.compiler.cudagraph_mark_step_begin()``) says a new step starts:
  forward outputs from before are no longer protected.
- Gradients kept alive across steps (``zero_grad(set_to_none=False)``, gradient accumulation) therefore make
  further recordings and then plain launches, with a hint; ``optimizer.zero_grad()`` (set_to_none) keeps the
  fast path, as does ``mark_step_begin()``, after which such outputs are invalidated instead.

0-dim CPU tensors (attention's philox seed and offset, scalars a user passes) are read on the host while
recording, so their values are part of the signature (a new value records again) and such outputs are
handed out as copies of the value the recording computed (they depend on host values only).

Falls back to plain launches, with a ``perf_hints`` log line, for other CPU tensors (inputs or outputs), inputs
the graph mutates in place that are not the same tensor on the recording call as on the warm-up call (a module's
cache buffer is: the recorded kernels write it directly), inputs that overlap themselves (expanded),
failures while capturing, and past ``cudagraph_max_records`` recordings of one graph.
"""
from __future__ import annotations

import itertools
import operator
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from ember import logs

OVERWRITTEN_MSG = (
    "Error: accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run. To prevent "
    "overwriting, clone the tensor outside of ember.compile() (out = model(x).clone()) or call "
    "ember.runtime.cudagraphs.mark_step_begin() (ember's torch.compiler.cudagraph_mark_step_begin()) before each "
    "model invocation.")
OVERWRITTEN_GRAD_MSG = (
    "Error: accessing gradient tensor output of CUDAGraphs that has been overwritten by a subsequent run. This "
    "happens under mode='reduce-overhead' with gradient accumulation (or zero_grad(set_to_none=False)) when a "
    ".grad tensor was produced by a recorded backward graph. Set .grad to None before each backward "
    "(optimizer.zero_grad()), or preallocate zeroed .grad tensors before the first compiled backward.")

_STEP = itertools.count(1)
_current_step = 0


def mark_step_begin() -> None:
    """A new step (iteration) begins: outputs of earlier calls may be overwritten by the next replays, also
    those of forward graphs whose backward has not run."""
    global _current_step
    _current_step = next(_STEP)


# -- what touches CUDA: replaceable, so the bookkeeping runs on CPU in tests ---------------------------------
class CudaOps:
    """The CUDA side of recording and replaying (tests substitute a fake that "records" a Python callable)."""

    def usable(self, t: torch.Tensor) -> bool:
        return t.is_cuda

    def new_pool(self, device: torch.device) -> Any:
        with torch.cuda.device(device):
            return torch.cuda.graph_pool_handle()

    def record(self, fn: Callable[..., Any], inputs: Sequence[Any], pool: Any, device: torch.device) -> tuple[Any, Any]:
        """Capture ``fn(*inputs)``; return (graph, outputs). The caller replays once to get this call's values.

        cuBLAS keeps a workspace (32 MB on Hopper) per handle and stream. Cached ones are dropped before and after
        the capture (as torch's CUDA graph trees do), so the capture makes its own inside the pool and that
        memory is the pool's again afterwards, like the graph's intermediates, instead of a workspace cached
        for good (in the pool, or outside it when made before)."""
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        with torch.cuda.device(device):
            torch.cuda.synchronize()
            if clear is not None:
                clear()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                outs = fn(*inputs)
            if clear is not None:
                clear()
            return graph, outs

    def replay(self, graph: Any) -> None:
        graph.replay()

    def alias_storage(self, storage: torch.UntypedStorage) -> torch.UntypedStorage:
        """A new storage object over ``storage``'s memory that does not own it (its liveness is the user's)."""
        return torch._C._construct_storage_from_data_pointer(storage.data_ptr(), storage.device, storage.nbytes())

    def can_invalidate(self) -> bool:
        return hasattr(torch._C, "_set_storage_data_ptr_access_error_msg")

    def invalidate(self, weak: int, msg: str) -> None:
        torch._C._set_storage_data_ptr_access_error_msg(weak, msg)


# -- the pool and what it handed out ---------------------------------------------------------------------------
@dataclass(eq=False)
class _Handout:
    """The outputs one replay of a recording handed out: weak refs to their storages."""

    weaks: list[int]                             # one per static output storage of the recording
    step: int

    def live(self, which: Any = None) -> list[int]:
        ws = self.weaks if which is None else [self.weaks[k] for k in which if k < len(self.weaks)]
        return [w for w in ws if not torch.UntypedStorage._expired(w)]

    def release(self) -> None:
        for w in self.weaks:
            torch.UntypedStorage._free_weak_ref(w)
        self.weaks = []


@dataclass(eq=False)
class Recording:
    """One recorded graph: what it reads in place, its placeholders, its static outputs (kept alive)."""

    order: int
    kind: str
    graph: Any
    static_ptrs: dict[int, int]                 # input index -> data_ptr read in place
    placeholders: dict[int, torch.Tensor]       # input index -> tensor copied into before a replay
    out_plan: list[tuple]                       # per output: ("const", v) | ("pool", k, meta) | ("input", i, meta)
    storages: list[torch.UntypedStorage]        # static output storages, in "pool" output order
    sig: tuple = ()                             # the input signature it was recorded for
    handout: _Handout | None = None
    replays: int = 0
    saved: set[int] | None = None               # forward: output storages a backward reads (None: not known yet)


class CudaGraphPool:
    """The memory pool of one ``ember.compile`` call and the bookkeeping of its recordings (see module doc)."""

    def __init__(self, ops: CudaOps | None = None) -> None:
        self.ops = ops or CudaOps()
        self.handles: dict[Any, Any] = {}
        self.recordings: list[Recording] = []
        self.owner: dict[int, tuple[Recording, int]] = {}   # static output storage data_ptr -> (recording, k)
        self.copy_out = not self.ops.can_invalidate()

    def handle(self, device: torch.device) -> Any:
        h = self.handles.get(device)
        if h is None:
            h = self.handles[device] = self.ops.new_pool(device)
        return h

    def owns(self, t: torch.Tensor) -> Recording | None:
        hit = self.owner.get(t.untyped_storage().data_ptr())
        return hit[0] if hit is not None else None

    def add(self, rec: Recording) -> None:
        self.recordings.append(rec)
        for k, s in enumerate(rec.storages):
            self.owner[s.data_ptr()] = (rec, k)

    def at_risk(self, rec: Recording) -> list[Recording]:
        return [r for r in self.recordings if r.order >= rec.order and r.handout is not None]

    def blocked(self, rec: Recording) -> bool:
        """Would replaying ``rec`` overwrite forward outputs that a backward may still read (the storages a
        backward was seen reading, all of them until one was seen, while alive: autograd frees saved tensors once
        the backward ran), or live gradients (AccumulateGrad keeps a backward's output as ``.grad`` and adds the
        next backward's into it: two forwards before one backward, zero_grad(set_to_none=False))?"""
        for r in self.at_risk(rec):
            h = r.handout
            if h.step != _current_step:
                continue
            if (r.kind == "forward" and h.live(r.saved)) or (r.kind == "backward" and h.live()):
                return True
        return False

    def invalidate_at_risk(self, rec: Recording) -> None:
        for r in self.at_risk(rec):
            h = r.handout
            msg = OVERWRITTEN_GRAD_MSG if r.kind == "backward" else OVERWRITTEN_MSG
            for w in h.live():
                self.ops.invalidate(w, msg)
            h.release()
            r.handout = None

    def backward_ran(self, args: Sequence[Any]) -> None:
        """A backward reads these inputs: learn which output storages of forward recordings it needs."""
        for a in args:
            if isinstance(a, torch.Tensor):
                hit = self.owner.get(a.untyped_storage().data_ptr())
                if hit is not None and hit[0].kind == "forward":
                    r, k = hit
                    r.saved = (r.saved or set()) | {k}


# -- cudagraphify ----------------------------------------------------------------------------------------------
_ORDER = itertools.count()


def _hint(name: str, msg: str) -> None:
    logs.log("perf_hints", f"cudagraphs: {name}: {msg}")


def _dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense (a placeholder copy of it is exact)."""
    if t.numel() <= 1:
        return True
    pairs = sorted((s, n) for n, s in zip(t.shape, t.stride()) if n != 1)
    expected = 1
    for s, n in pairs:
        if s != expected:
            return False
        expected *= n
    return True


def _meta(t: torch.Tensor, base_offset: int = 0) -> tuple:
    return (t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset() - base_offset)


class CudaGraphed:
    """``cudagraphify``'s result: see the module docstring."""

    def __init__(self, fn: Callable[..., Any], kind: str, options: Any, pool: CudaGraphPool, name: str,
                 static_shapes: bool = False) -> None:
        self.fn, self.kind, self.pool, self.name = fn, kind, pool, name
        # a graph compiled with static sizes only runs with the sizes it was compiled for (the frame's guards
        # check them): an input at a recorded static address then has the recorded shape too. A symbolic graph
        # takes every size: a pool output or a reused tensor can come back at the same address with another
        # shape (a slice of a preallocated cache), and the replay of the other size's recording is wrong.
        self.static_shapes = static_shapes
        limit = getattr(options, "cudagraph_max_records", None)
        self.max_records = 8 if limit is None else int(limit)
        self.warm: dict[tuple, list] = {}            # signature -> weak refs of the warm-up call's inputs
        self.mutated: dict[tuple, set[int]] = {}     # signature -> inputs (not parameters) it mutates in place
        self.records: dict[tuple, list[Recording]] = {}
        self.count = 0
        self.disabled: str | None = None             # why this graph runs without CUDA graphs
        self.bad_sigs: set[tuple] = set()
        # the fast path: the first recording of the signature replayed last, a check of its static inputs'
        # addresses (``_same_addresses``), and the indices of the other inputs (whose signature entries are
        # compared)
        self.last: tuple[Recording, Callable[[Sequence[Any]], bool], list[int]] | None = None

    # -- the per-call path
    def __call__(self, *args: Any) -> Any:
        if self.kind == "backward":
            self.pool.backward_ran(args)
        last = self.last
        if last is not None and self._same_as(last, args) and not self.pool.blocked(last[0]):
            return self._replay(last[0], args)
        if self.disabled is not None:
            return self.fn(*args)
        sig = self._signature(args)
        if sig is None or sig in self.bad_sigs:
            return self.fn(*args)
        for rec in self.records.get(sig, ()):
            if self._static_ok(rec, args) and not self.pool.blocked(rec):
                return self._replay(rec, args)
        if sig not in self.warm:
            return self._warm_up(sig, args)
        if self.count >= self.max_records:
            self._give_up(sig, f"more than {self.max_records} recordings (cudagraph_max_records): shapes or "
                               "input addresses keep changing, or outputs of earlier calls are still waiting for "
                               "backward (call backward, detach them, run under torch.no_grad(), or call "
                               "ember.runtime.cudagraphs.mark_step_begin())")
            return self.fn(*args)
        return self._record(sig, args)

    def _signature(self, args: Sequence[Any]) -> tuple | None:
        key: list[Any] = []
        for i, a in enumerate(args):
            k = self._key(a)
            if k is None:
                what = f"a {a.device.type} tensor; CUDA graphs replay device work only" \
                    if isinstance(a, torch.Tensor) else f"a {type(a).__name__}"
                self._disable(f"input {i} is {what}")
                return None
            key.append(k)
        return tuple(key)

    def _key(self, a: Any) -> tuple | None:
        """One input's entry in the signature (None: CUDA graphs cannot take it)."""
        if isinstance(a, torch.Tensor):
            if self.pool.ops.usable(a):
                return (a.dtype, a.device, tuple(a.shape), tuple(a.stride()))
            if _host_scalar(a):                # read on the host while recording: its value keys the recording
                return ("host", a.dtype, a.item())
            return None
        if a is None or isinstance(a, (int, float, bool, str)):
            return ("v", type(a), a)
        return None

    def _same_as(self, last: tuple, args: Sequence[Any]) -> bool:
        """Does this call have the signature and static addresses of the recording replayed last? Static inputs
        are compared by address only: parameters and buffers keep their metadata while their address holds
        (the frame's guards check it), and a pool output's address is that of one recorded tensor."""
        rec, same_addresses, others = last
        if len(args) != len(rec.sig):
            return False
        try:
            if not same_addresses(args):
                return False
        except (AttributeError, TypeError, RuntimeError):
            return False
        sig, key = rec.sig, self._key
        return all(key(args[i]) == sig[i] for i in others)

    def _static_ok(self, rec: Recording, args: Sequence[Any]) -> bool:
        return all(args[i].data_ptr() == p for i, p in rec.static_ptrs.items())

    def _disable(self, why: str) -> None:
        if self.disabled is None:
            self.disabled = why
            _hint(self.name, f"runs without CUDA graphs: {why}")

    def _give_up(self, sig: tuple, why: str) -> None:
        if sig not in self.bad_sigs:
            self.bad_sigs.add(sig)
            _hint(self.name, f"this input signature runs without CUDA graphs: {why}")

    # -- warm-up: run eagerly, learn what is static and what the graph mutates
    def _warm_up(self, sig: tuple, args: Sequence[Any]) -> Any:
        versions = [_version(a) for a in args]
        outs = self.fn(*args)
        # an input it mutates in place (a module's cache buffer) must be static: the same tensor at recording
        # time as now, so the recorded kernels write the caller's tensor (checked in ``_record``)
        self.mutated[sig] = {i for i, a in enumerate(args) if isinstance(a, torch.Tensor)
                             and versions[i] != _version(a) and not self._is_static(a, None)}
        for j, o in enumerate(_flat(outs)):
            if isinstance(o, torch.Tensor) and not self.pool.ops.usable(o) and not _host_scalar(o):
                self._disable(f"output {j} is a {o.device.type} tensor")
                return outs
        self.warm[sig] = [_weak(a) for a in args]
        return outs

    def _is_static(self, a: torch.Tensor, warm_ref: Any) -> bool:
        if isinstance(a, torch.nn.Parameter) or self.pool.owns(a) is not None:
            return True
        return warm_ref is not None and warm_ref() is a

    # -- recording
    def _record(self, sig: tuple, args: Sequence[Any]) -> Any:
        refs = self.warm[sig]
        static_ptrs: dict[int, int] = {}
        placeholders: dict[int, torch.Tensor] = {}
        inputs: list[Any] = list(args)
        device = None
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor) or not self.pool.ops.usable(a):
                continue        # a host scalar: its value is part of the signature
            device = device or a.device
            if self._is_static(a, refs[i]):
                static_ptrs[i] = a.data_ptr()
            elif i in self.mutated.get(sig, ()):
                self._give_up(sig, f"it mutates input {i} in place, a tensor other than the one of the call "
                                   "before (a placeholder copy would not reach the caller's tensor)")
                return self.fn(*args)
            elif not _dense(a):
                self._give_up(sig, f"input {i} overlaps itself (an expanded tensor); it cannot be copied into a "
                                   "placeholder")
                return self.fn(*args)
            else:
                ph = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device)
                ph.copy_(a)
                placeholders[i] = inputs[i] = ph
        if device is None:
            self._disable("it has no tensor inputs")
            return self.fn(*args)
        try:
            graph, outs = self.pool.ops.record(self.fn, inputs, self.pool.handle(device), device)
        except Exception as e:  # noqa: BLE001  (capture fails for syncs, CPU work, unsupported ops: run plainly)
            self._disable(f"recording failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            return self.fn(*args)
        rec = self._plan(graph, outs, inputs, static_ptrs, placeholders)
        rec.sig = sig
        self.count += 1
        self.records.setdefault(sig, []).append(rec)
        self.pool.add(rec)
        if self.count > 1:
            _hint(self.name, f"recording {self.count} of this graph (new shapes, input addresses, or outputs of "
                             "an earlier call still waiting for backward)")
        return self._replay(rec, args, copied=True)

    def _plan(self, graph: Any, outs: Any, inputs: Sequence[Any], static_ptrs: dict[int, int],
              placeholders: dict[int, torch.Tensor]) -> Recording:
        by_storage = {}
        for i, a in enumerate(inputs):
            if isinstance(a, torch.Tensor):
                by_storage.setdefault(a.untyped_storage().data_ptr(), i)
        plan: list[tuple] = []
        storages: list[torch.UntypedStorage] = []
        index: dict[int, int] = {}
        for o in _flat(outs):
            if not isinstance(o, torch.Tensor):
                plan.append(("const", o))
                continue
            if not self.pool.ops.usable(o):     # a host scalar computed while recording from host values only
                plan.append(("host", o.clone()))
                continue
            sp = o.untyped_storage().data_ptr()
            if sp in by_storage:
                i = by_storage[sp]
                plan.append(("input", i, _meta(o, inputs[i].storage_offset())))
                continue
            if sp not in index:
                index[sp] = len(storages)
                storages.append(o.untyped_storage())
            plan.append(("pool", index[sp], _meta(o)))
        return Recording(next(_ORDER), self.kind, graph, static_ptrs, placeholders, plan, storages)

    # -- replay
    def _replay(self, rec: Recording, args: Sequence[Any], copied: bool = False) -> tuple:
        pool = self.pool
        pool.invalidate_at_risk(rec)
        if not copied:
            for i, ph in rec.placeholders.items():
                ph.copy_(args[i])
        pool.ops.replay(rec.graph)
        rec.replays += 1
        if (self.last is None or self.last[0] is not rec) and self.records[rec.sig][0] is rec:
            # the inputs whose signature entries the fast path compares: the copied ones, and, unless the
            # sizes are static, the static ones that are not parameters (their shape may change in place)
            keyed = [i for i in range(len(rec.sig)) if i not in rec.static_ptrs or not (
                self.static_shapes or isinstance(args[i], torch.nn.Parameter))]
            self.last = (rec, _same_addresses(rec.static_ptrs, len(rec.sig)), keyed)
        fresh = [s for s in rec.storages] if pool.copy_out else [pool.ops.alias_storage(s) for s in rec.storages]
        result: list[Any] = []
        for entry in rec.out_plan:
            if entry[0] == "const":
                result.append(entry[1])
                continue
            if entry[0] == "host":
                result.append(entry[1].clone())
                continue
            dtype, shape, stride, offset = entry[2]
            if entry[0] == "input":
                a = args[entry[1]]
                result.append(a.as_strided(shape, stride, a.storage_offset() + offset))
                continue
            t = torch.empty((0,), dtype=dtype, device=fresh[entry[1]].device).set_(fresh[entry[1]], offset,
                                                                                   shape, stride)
            result.append(t.clone() if pool.copy_out else t)
        if not pool.copy_out:
            rec.handout = _Handout([s._weak_ref() for s in fresh], _current_step)
        return tuple(result)


_data_ptr = torch.Tensor.data_ptr
# ``tensors[i].data_ptr() == ptrs[i]`` for every ``i`` of ``indices``, in C++ (CUDA builds of torch)
_PTRS_EQUAL = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)


def _same_addresses(static_ptrs: dict[int, int], n: int) -> Callable[[Sequence[Any]], bool]:
    """``args -> whether args[i].data_ptr() == static_ptrs[i] for every i``: one C++ loop where torch has one
    (a ResNet-50 has ~320 static inputs), else the addresses of an ``itemgetter``'s tensors."""
    idx = sorted(static_ptrs)
    if _PTRS_EQUAL is not None:
        ptrs = [static_ptrs.get(i, 0) for i in range(n)]
        try:
            _PTRS_EQUAL((), [], [])
            return lambda args: _PTRS_EQUAL(args, ptrs, idx)
        except TypeError:           # a binding that wants a list
            return lambda args: _PTRS_EQUAL(list(args), ptrs, idx)
    get, want = _getter(idx), [static_ptrs[i] for i in idx]
    return lambda args: list(map(_data_ptr, get(args))) == want


def _getter(idx: list[int]) -> Callable[[Sequence[Any]], tuple]:
    """``args -> tuple(args[i] for i in idx)``, at C speed."""
    if len(idx) >= 2:
        return operator.itemgetter(*idx)
    return lambda args: tuple(args[i] for i in idx)


def _host_scalar(t: torch.Tensor) -> bool:
    """A 0-dim CPU tensor: ATen reads it on the host (a wrapped scalar, attention's philox seed and offset), so
    a recording bakes in its value; recordings are keyed by it."""
    return t.device.type == "cpu" and t.dim() == 0


def _flat(outs: Any) -> list[Any]:
    return list(outs) if isinstance(outs, (tuple, list)) else [outs]


def _version(a: Any) -> int | None:
    if not isinstance(a, torch.Tensor):
        return None
    try:
        return a._version
    except RuntimeError:      # inference tensors have no version counter
        return None


def _weak(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        try:
            return weakref.ref(a)
        except TypeError:
            return None
    return None


def graph_on_cuda(gm: Any) -> bool | None:
    """Whether an FX graph's placeholders hold CUDA tensors (None when its metadata does not say)."""
    nodes = getattr(getattr(gm, "graph", None), "nodes", None)
    if nodes is None:
        return None
    devices = set()
    for n in nodes:
        if n.op == "placeholder":
            v = n.meta.get("val")
            dev = getattr(v, "device", None)
            if dev is not None:
                devices.add(torch.device(dev).type)
    if not devices:
        return None
    return "cuda" in devices


def graph_static_shapes(gm: Any) -> bool:
    """Whether an FX graph is known to have static sizes: no symbol table with symbols, and no placeholder
    whose value has a symbolic size. False where that is not known (not an FX graph)."""
    nodes = getattr(getattr(gm, "graph", None), "nodes", None)
    if nodes is None:
        return False
    if getattr(getattr(gm, "meta", {}).get("ember_symbols"), "symbols", None):
        return False
    for n in nodes:
        v = n.meta.get("val") if n.op == "placeholder" else None
        if isinstance(v, torch.SymInt) or (isinstance(v, torch.Tensor) and any(
                isinstance(x, torch.SymInt) for x in (*v.shape, *v.stride()))):
            return False
    return True


def cudagraphify(fn: Callable[..., Any], kind: str, options: Any, pool_owner: CudaGraphPool,
                 name: str | None = None, static_shapes: bool = False) -> CudaGraphed:
    """Record ``fn`` (flat tensors -> tuple) into a CUDA graph in ``pool_owner``'s pool after a warm-up call,
    and replay it (see the module docstring). ``static_shapes``: the graph was compiled with static sizes
    (``graph_static_shapes``), so static inputs are recognized by address alone."""
    name = name or f"{kind} graph {getattr(fn, '__name__', '')}".strip()
    return CudaGraphed(fn, kind, options, pool_owner, name, static_shapes)


__all__ = ["cudagraphify", "graph_static_shapes", "note_cpu_graph",
           "CudaGraphPool", "CudaGraphed", "CudaOps", "Recording", "mark_step_begin",
           "graph_on_cuda", "OVERWRITTEN_MSG", "OVERWRITTEN_GRAD_MSG"]


def note_cpu_graph(kind: str) -> None:
    _hint(f"{kind} graph", "cuda_graphs is on but this graph's tensors are on the CPU: it runs without CUDA graphs")
