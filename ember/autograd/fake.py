"""ember's fake tensors: tensors with metadata and a device but no data.

Input: real ``torch.Tensor`` values (inputs, parameters, buffers, constants) or nothing (factory ops).
Output: ``FakeTensor`` values — ``torch.Tensor`` wrapper subclasses whose shape, dtype, strides, storage
offset, ``requires_grad`` and *fake* device (``cpu`` or ``cuda:N``, also on a machine without CUDA) match what
eager PyTorch would produce, and that hold only a ``meta`` tensor (``_meta``) describing their storage.

Invariants:
- Every ATen op on fake tensors runs the op's meta kernel on the ``_meta`` tensors; outputs are wrapped with
  the device eager would give them: the ``device`` kwarg if there is one, else the device of the first tensor
  input that is not a CPU scalar, else CPU.
- An in-place or ``out=`` op returns the very fake tensor object it mutated, as eager returns ``self``.
- ``FakeMode.to_fake`` is memoized by tensor identity (same real tensor -> same fake), and real tensors that
  share a storage with the same dtype get meta tensors that share one meta storage, so views stay views.
- Data-dependent ops (``item``, ``nonzero``, ...) raise ``DataDependentOpError`` naming the op: a fake tensor
  has no values to answer them with.
- Autograd runs on fake tensors as on real ones (above the dispatch key), except for fake CUDA tensors on a
  machine without CUDA, where PyTorch's engine would abort the process; ember raises ``FakeDeviceError``.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from ember.decomp.trees import tree_leaves, tree_map
from ember.dynamo_free import avoid_dynamo_import
from ember.errors import EmberError

aten = torch.ops.aten


class DataDependentOpError(EmberError):
    """An op whose output shape or value depends on tensor data reached a fake tensor."""


class FakeDeviceError(EmberError):
    """A fake device cannot do what was asked on this machine (autograd on fake CUDA without CUDA)."""


class MissingMetaKernelError(EmberError):
    """An ATen op has no meta kernel, so ember cannot compute its output metadata."""


# Ops whose output shape or value needs the data itself. Keyed by OpOverloadPacket name.
DATA_DEPENDENT_OPS: frozenset[str] = frozenset({
    "aten::_local_scalar_dense", "aten::item", "aten::nonzero", "aten::masked_select", "aten::unique_dim",
    "aten::_unique", "aten::_unique2", "aten::unique_consecutive", "aten::equal", "aten::is_nonzero",
    "aten::repeat_interleave", "aten::bincount", "aten::argwhere", "aten::_assert_async",
    "aten::tolist", "aten::nonzero_numpy", "aten::count_nonzero_static_check",
})

# Ops that change a tensor's own sizes/strides in place: a wrapper subclass's metadata is fixed at creation.
METADATA_MUTATING_OPS: frozenset[str] = frozenset({"aten::set_"})
# in-place view ops: the fake tensor itself takes the new shape and strides (same storage, same numel)
INPLACE_VIEW_OPS: frozenset[str] = frozenset({
    "aten::as_strided_", "aten::t_", "aten::transpose_", "aten::squeeze_", "aten::unsqueeze_",
    "aten::swapdims_", "aten::swapaxes_", "aten::resize_", "aten::resize_as_",
})


def _cuda_missing(device: torch.device) -> bool:
    return device.type == "cuda" and not torch.cuda.is_available()


class FakeTensor(torch.Tensor):
    """A tensor without data: metadata from ``_meta`` (a meta tensor), device from ``fake_device``."""

    _meta: torch.Tensor
    fake_mode: "FakeMode"

    @staticmethod
    def __new__(cls, meta: torch.Tensor, device: torch.device, mode: "FakeMode",
                requires_grad: bool = False) -> "FakeTensor":
        assert meta.device.type == "meta", meta.device
        if requires_grad and _cuda_missing(device):
            raise FakeDeviceError(
                f"autograd on a fake {device} tensor needs a CUDA build of PyTorch (this one has none): "
                "PyTorch's autograd engine aborts on CUDA tensors here. Trace for training on a CUDA machine, "
                "or trace with training=False.")
        self = torch.Tensor._make_wrapper_subclass(
            cls, meta.shape, strides=meta.stride(), storage_offset=meta.storage_offset(), dtype=meta.dtype,
            device=device, requires_grad=requires_grad, layout=meta.layout)
        self._meta = meta
        self.fake_mode = mode
        return self

    @property
    def fake_device(self) -> torch.device:
        return self.device

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # noqa: ARG002 - torch passes this kwarg
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"FakeTensor(shape={tuple(self.shape)}, dtype={self.dtype}, device={self.device}{grad})"

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        mode = next(a.fake_mode for a in tree_leaves((args, kwargs)) if isinstance(a, FakeTensor))
        return mode.dispatch(func, args, kwargs or {})


class FakeMode(TorchDispatchMode):
    """Inside ``with FakeMode():`` every ATen op computes on fake tensors; real tensors become fake on entry."""

    def __init__(self) -> None:
        super().__init__()
        self._memo: dict[int, tuple[torch.Tensor, FakeTensor]] = {}
        self._storages: dict[tuple[int, str, torch.dtype], torch.Tensor] = {}
        self.symbolic = False       # inputs with symbolic sizes (ember.autograd.symbolic.symbolic_inputs)
        self.table = None           # their SymbolTable: data-dependent ops get unbacked sizes in it (unbacked.py)

    def __enter__(self) -> "FakeMode":
        avoid_dynamo_import()           # meta kernels would import torch._dynamo (ember.dynamo_free)
        # Factories with device="cuda" run torch.cuda._lazy_init while parsing arguments, before any dispatch;
        # on a machine without CUDA that raises although no CUDA memory is touched. Skip it while faking.
        self._skips_cuda_init = not torch.cuda.is_available()
        if self._skips_cuda_init:
            _CUDA_INIT.enter()
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._skips_cuda_init:
            _CUDA_INIT.exit()
        return super().__exit__(*exc)

    # -- real -> fake -------------------------------------------------------------------------------------
    def to_fake(self, t: torch.Tensor, *, device: torch.device | None = None) -> FakeTensor:
        """The fake tensor of ``t`` (memoized by identity); ``device`` overrides the fake device."""
        if isinstance(t, FakeTensor):
            return t
        hit = self._memo.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
        with _disable_current_modes():
            meta = self._meta_like(t)
        fake = FakeTensor(meta, _with_index(device or t.device), self, requires_grad=t.requires_grad)
        self._memo[id(t)] = (t, fake)
        return fake

    def _meta_like(self, t: torch.Tensor) -> torch.Tensor:
        if t.layout != torch.strided:
            raise EmberError(f"ember fake tensors support strided tensors only, got layout {t.layout}")
        if t.device.type == "meta":
            return t.detach()
        storage = t.untyped_storage()
        key = (storage.data_ptr(), str(t.device), t.dtype)
        base = self._storages.get(key) if storage.data_ptr() != 0 else None
        if base is None:
            base = torch.empty(storage.nbytes() // t.element_size(), dtype=t.dtype, device="meta")
            if storage.data_ptr() != 0:
                self._storages[key] = base
        return base.as_strided(t.shape, t.stride(), t.storage_offset())

    def fake_empty(self, shape: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype,
                   device: torch.device, requires_grad: bool = False) -> FakeTensor:
        """A fresh fake tensor (no real counterpart), e.g. a tangent input of a joint graph; sizes and strides
        may be ``torch.SymInt``s (a graph input with symbolic sizes)."""
        with _disable_current_modes():
            meta = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
        return FakeTensor(meta, device, self, requires_grad=requires_grad)

    # -- dispatch -----------------------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        return self.dispatch(func, args, kwargs or {})

    def dispatch(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Run ``func`` on the meta tensors behind ``args``; wrap outputs as fake tensors."""
        if self.table is not None and (func._schema.name in DATA_DEPENDENT_OPS or _bool_mask_index(func, args)):
            from ember.autograd.unbacked import unbacked_meta
            out = unbacked_meta(self.table, func, args, kwargs)
            if out is not None:     # an output size read from the result at run time (an unbacked symbol)
                device = _output_device(args, kwargs)
                return tree_map(lambda o: self._wrap(o, device, {}), out)
        _check_supported(func, args)
        args, kwargs = tree_map(self._fakeify, (args, kwargs))
        device = _output_device(args, kwargs)
        meta_args, meta_kwargs = tree_map(_to_meta, (args, kwargs))
        if "device" in meta_kwargs and meta_kwargs["device"] is not None:
            meta_kwargs["device"] = torch.device("meta")
        if _cuda_missing(device) and _grad_needed(args, kwargs):
            raise FakeDeviceError(
                f"{func}: autograd on fake {device} tensors needs a CUDA build of PyTorch (this one has none)")
        out = _run_meta(func, meta_args, meta_kwargs, self.symbolic)
        layout_rule = DEVICE_LAYOUT_RULES.get(func._schema.name)
        if layout_rule is not None and device.type in ("cpu", "cuda"):
            out = layout_rule(out, meta_args, meta_kwargs)
        if func._schema.name in INPLACE_VIEW_OPS and isinstance(args[0], FakeTensor):
            _restride(args[0])
            return args[0]
        by_meta = {id(a._meta): a for a in tree_leaves((args, kwargs)) if isinstance(a, FakeTensor)}
        return tree_map(lambda o: self._wrap(o, device, by_meta), out)

    def _fakeify(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor):
            return self.to_fake(x)
        return x

    def _wrap(self, out: Any, device: torch.device, by_meta: dict[int, FakeTensor]) -> Any:
        if not isinstance(out, torch.Tensor):
            return out
        same = by_meta.get(id(out))
        if same is not None:
            return same
        if out.device.type != "meta":
            # an op applied to a Python number (torch hands wrapped scalars to dispatch modes as numbers, as in
            # torch.func's batching rule for ``batched + 1``) made its result on the CPU: keep its metadata only
            out = torch.empty_strided(out.shape, out.stride(), dtype=out.dtype, device="meta")
        return FakeTensor(out, device, self)


def _restride(fake: FakeTensor) -> None:
    """After an in-place view op changed ``fake._meta``: give the wrapper the same shape and strides (with
    dispatch off, so it is the wrapper's own metadata that changes)."""
    from torch.utils._mode_utils import no_dispatch
    m = fake._meta
    with no_dispatch():
        fake.as_strided_(m.shape, m.stride(), m.storage_offset())


class _SkipCudaInit(threading.local):
    """``torch.cuda._lazy_init`` skipped in the threads inside a FakeMode (machines without CUDA only).

    ``torch.cuda._lazy_init`` is one process-wide attribute, but faking is per thread: while any thread fakes,
    the attribute is a stand-in that skips the init in threads that fake and calls the real one in the others;
    the last FakeMode to exit (of any thread) puts the real one back. Saving and restoring it per FakeMode,
    as before, left the stand-in installed for good when two threads' FakeModes overlapped."""
    _lock = threading.Lock()
    _users = 0                   # FakeModes entered, all threads (class attributes: shared, under _lock)
    _real: Callable | None = None

    def __init__(self) -> None:
        self.depth = 0           # FakeModes entered in this thread

    def enter(self) -> None:
        cls = type(self)
        with cls._lock:
            if cls._users == 0:
                cls._real = torch.cuda._lazy_init
                torch.cuda._lazy_init = _lazy_init_unless_faking
            cls._users += 1
        self.depth += 1

    def exit(self) -> None:
        self.depth -= 1
        cls = type(self)
        with cls._lock:
            cls._users -= 1
            if cls._users == 0:
                if torch.cuda._lazy_init is _lazy_init_unless_faking:      # unless someone else replaced it
                    torch.cuda._lazy_init = cls._real
                # _real stays set: a thread that read the stand-in just before this calls the real one through it


_CUDA_INIT = _SkipCudaInit()


def _lazy_init_unless_faking() -> None:
    """Stands in for ``torch.cuda._lazy_init`` while a thread fakes on a machine without CUDA."""
    real = _SkipCudaInit._real
    if _CUDA_INIT.depth == 0 and real is not None:
        real()


def _bool_mask_index(func: Any, args: tuple) -> bool:
    if func._schema.name != "aten::index" or len(args) < 2 or not isinstance(args[1], (list, tuple)):
        return False
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1])


def _check_supported(func: Any, args: tuple) -> None:
    name = func._schema.name
    if name in DATA_DEPENDENT_OPS or _bool_mask_index(func, args):
        raise DataDependentOpError(
            f"{func} depends on tensor values, which ember's fake tensors do not have (stage: autograd "
            "tracing). Move the data-dependent part out of the compiled region or make it shape-static.")
    if name in METADATA_MUTATING_OPS:
        raise EmberError(f"{func} changes a tensor's shape or strides in place; ember's fake tensors do not "
                         "support that yet (stage: autograd tracing). Use the out-of-place op instead.")


def _to_meta(x: Any) -> Any:
    if isinstance(x, FakeTensor):
        return x._meta
    return x


def _channels_last_conv(out: Any, args: tuple, _kwargs: dict | None = None) -> Any:
    """CPU (oneDNN) and CUDA (cuDNN) convolutions return a channels-last result when their input or weight is
    channels-last; the meta kernel always returns a contiguous one."""
    x, w = args[0], args[1]
    if not isinstance(out, torch.Tensor) or out.ndim not in (4, 5):
        return out
    fmt = torch.channels_last if out.ndim == 4 else torch.channels_last_3d
    if any(isinstance(t, torch.Tensor) and t.ndim == out.ndim and _channels_last_order(t) for t in (x, w)):
        return out.contiguous(memory_format=fmt)
    return out


def _channels_last_order(t: torch.Tensor) -> bool:
    """Whether ``t``'s strides order its dims as channels-last does (channels innermost, then the spatial dims
    from the last, then the batch), dense or not, and not as contiguous does (what torch's
    ``suggest_memory_format`` tells)."""
    big = [d for d in range(t.ndim) if t.shape[d] != 1]
    by_stride = sorted(big, key=lambda d: t.stride(d))
    channels_last = [d for d in (1, *range(t.ndim - 1, 1, -1), 0) if t.shape[d] != 1]
    contiguous = sorted(big, reverse=True)
    return by_stride == channels_last != contiguous and len(set(map(t.stride, big))) == len(big)


def _vector_norm_shape(out: Any, meta_args: tuple, meta_kwargs: dict | None = None) -> Any:
    """``linalg_vector_norm`` reduces its dims away unless ``keepdim``; torch 2.11's meta kernel kept a reduced
    dim of size 1 (``t.norm(dim=-1)`` of a (4, 1) tensor: (4, 1) where the CPU and CUDA kernels give (4,))."""
    kw = meta_kwargs or {}
    x = meta_args[0]
    dim = meta_args[2] if len(meta_args) > 2 else kw.get("dim")
    keepdim = bool(meta_args[3] if len(meta_args) > 3 else kw.get("keepdim", False))
    if keepdim or not isinstance(x, torch.Tensor) or not isinstance(out, torch.Tensor):
        return out
    dims = range(x.ndim) if dim is None or (isinstance(dim, (list, tuple)) and not dim) else \
        ([dim] if isinstance(dim, int) else dim)
    drop = {d % max(x.ndim, 1) for d in dims}
    shape = [n for d, n in enumerate(x.shape) if d not in drop]
    if list(out.shape) == shape:
        return out
    return out.new_empty(shape)


def _input_memory_format(out: Any, args: tuple, _kwargs: dict | None = None) -> Any:
    """The op's CPU and CUDA kernels allocate their result in the memory format their first input suggests
    (channels-last stays channels-last), where the meta kernel returns a contiguous one. The strides matter
    beyond the result's own layout: ``as_strided`` of the result addresses its memory in eager's order."""
    x = args[0] if args else None
    if not isinstance(out, torch.Tensor) or out.ndim not in (4, 5) or not isinstance(x, torch.Tensor) or \
            x.ndim != out.ndim or not _channels_last_order(x):
        return out
    return out.contiguous(memory_format=torch.channels_last if out.ndim == 4 else torch.channels_last_3d)


# ops whose eager kernels follow the input's suggested memory format (meta: contiguous); torch 2.13
_FOLLOW_INPUT_FORMAT = ("aten::roll", "aten::reflection_pad2d", "aten::reflection_pad3d",
                        "aten::replication_pad2d", "aten::replication_pad3d", "aten::reflection_pad2d_backward",
                        "aten::reflection_pad3d_backward", "aten::replication_pad2d_backward",
                        "aten::replication_pad3d_backward", "aten::pixel_shuffle", "aten::channel_shuffle",
                        "aten::native_channel_shuffle")

# ATen op name -> fix-up of the meta kernel's output to what eager gives on a real CPU or CUDA device (layout,
# and shape where a torch version's meta kernel differs from its real kernels)
DEVICE_LAYOUT_RULES: dict[str, Callable[[Any, tuple, dict], Any]] = {
    "aten::convolution": _channels_last_conv, "aten::linalg_vector_norm": _vector_norm_shape,
    **{name: _input_memory_format for name in _FOLLOW_INPUT_FORMAT}}


class SymbolicRules:
    """Ember's own shape rules for symbolic sizes, filled in by ``ember.autograd.symbolic`` when it is imported
    (it builds on this module, so it registers here rather than being imported from here)."""

    prefers_rule: Callable[..., bool] | None = None
    symbolic_meta: Callable[..., Any] | None = None
    has_symbols: Callable[..., bool] | None = None


# ops that only read a tensor's metadata: answered from the meta tensor's own (maybe symbolic) sizes, as
# PyTorch's dispatch of them on a meta tensor with symbolic sizes fails ("dispatch_on_subclass")
_METADATA_QUERIES: dict[Any, Callable[..., Any]] = {
    aten.size.default: lambda t: list(t.shape), aten.size.int: lambda t, d: t.shape[d],
    aten.stride.default: lambda t: list(t.stride()), aten.stride.int: lambda t, d: t.stride()[d],
    aten.numel.default: lambda t: t.numel(), aten.dim.default: lambda t: t.dim(),
    aten.sym_size.int: lambda t, d: t.shape[d], aten.sym_numel.default: lambda t: t.numel(),
    aten.sym_stride.int: lambda t, d: t.stride()[d],
}


def _run_meta(func: Any, args: tuple, kwargs: dict, symbolic: bool = False) -> Any:
    rules = SymbolicRules
    query = _METADATA_QUERIES.get(func)
    if query is not None and symbolic:
        return query(*args, **kwargs)
    if symbolic and rules.prefers_rule is not None:
        # C++ view kernels that do not fail on symbolic sizes may still specialize them (slice clamps its end
        # with guard_int): view ops with a symbolic rule use it
        if rules.prefers_rule(func, args, kwargs):
            return rules.symbolic_meta(func, args, kwargs, None)
    try:
        return func(*args, **kwargs)
    except NotImplementedError as e:
        if any(a.alias_info is not None for a in func._schema.arguments):      # in-place ops and views
            raise MissingMetaKernelError(f"{func} has no meta kernel, so ember cannot trace it: {e}") from e
        try:
            return _run_on_placeholders(func, args, kwargs)
        except Exception:       # noqa: BLE001 - report the missing meta kernel, the real cause
            raise MissingMetaKernelError(f"{func} has no meta kernel, so ember cannot trace it: {e}") from e
    except EmberError:      # ember's own, also where it is a RuntimeError (errors.py)
        raise
    except RuntimeError as e:
        # a meta kernel that cannot compute with symbolic sizes: ember's own rules (ember.autograd.symbolic)
        if rules.has_symbols is None or not rules.has_symbols(args, kwargs):
            raise
        return rules.symbolic_meta(func, args, kwargs, e)


def _run_on_placeholders(func: Any, args: tuple, kwargs: dict) -> Any:
    """An op without a meta kernel (some backward ops): run it on zero-filled CPU tensors of the same
    metadata and keep only the outputs' metadata. Ops whose output shapes depend on values never get here
    (they are refused before dispatch)."""
    from torch.utils._mode_utils import no_dispatch

    def real(x):
        if isinstance(x, torch.Tensor) and x.device.type == "meta":
            return torch.zeros_like(x, device="cpu") if x.is_contiguous() else \
                torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="cpu").zero_()
        return x

    def meta(x):
        if isinstance(x, torch.Tensor):
            return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        return x
    with no_dispatch():
        out = func(*tree_map(real, args), **tree_map(real, kwargs))
    return tree_map(meta, out)


def _grad_needed(args: tuple, kwargs: dict) -> bool:
    if not torch.is_grad_enabled():
        return False
    return any(isinstance(a, torch.Tensor) and a.requires_grad for a in tree_leaves((args, kwargs)))


def _output_device(args: tuple, kwargs: dict) -> torch.device:
    """The device eager gives the outputs: ``device=`` kwarg, else the first non-CPU-scalar tensor's."""
    dev = kwargs.get("device")
    if dev is not None:
        return _with_index(torch.device(dev))
    tensors = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
    for t in tensors:
        if not (t.device.type == "cpu" and t.dim() == 0):
            return t.device
    return tensors[0].device if tensors else torch.device("cpu")


def _with_index(device: torch.device) -> torch.device:
    """``cuda`` -> ``cuda:<current>``, as eager places a factory's output."""
    if device.type != "cuda" or device.index is not None:
        return device
    return torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)


def fake_call(mode: FakeMode, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn`` under ``mode`` with every real tensor in ``args``/``kwargs`` replaced by its fake."""
    args, kwargs = tree_map(mode._fakeify, (args, kwargs))
    with mode:
        return fn(*args, **kwargs)
