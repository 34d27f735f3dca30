"""The torch plugin of the symbolic interpreter: wraps tensors, modules and torch constants, turns torch
calls into graph nodes, installs tensor and global-state guards, and builds the FX graph at the end."""
from __future__ import annotations

import types
from typing import Any, Callable

import numpy as _np
import torch
import torch.fx as fx

from ...dynamo_free import avoid_dynamo_import
from ...errors import BackendCompilerFailed, InternalError
from ...shapes import SymbolicUnsupported
from ..objects import lookup_type_attr
from ..sources import AttrSource, ConstSource, ItemSource, Source
from ..values import IMMUTABLE_TYPES, Const, ListVar, MethodOf, TupleVar, Value
from . import ctx as _ctx
from . import comptime as _comptime
from . import pyrandom as _pyrandom
from . import tensor_ctor as _tensor_ctor
from .autograd_fn import APPLY as _APPLY, call_function_apply, function_apply_class
from . import fastguard
from . import tensor as _tensor  # noqa: F401  (registers tensor rules)
from .legacy_types import call_legacy_constructor, is_legacy_constructor
from .graph import TensorVar, TorchState, to_meta
from .located import graph_error
from . import dynamic as DYN
from . import float_item as _float_item
from .dynamic import module_weight as _module_weight
from . import symsize as _symsize  # noqa: F401  (registers the rules of symbolic ints)
from . import symfloat as _symfloat   # (registers the rules of symbolic floats)
from . import minmax as _minmax
from .modules import NNModuleVar, _has_hooks, _own_getattribute, construct_module
from .ops import record



IMMUTABLE_TYPES.update({torch.dtype, torch.device, torch.Size, torch.layout, torch.memory_format})
_CTX = _ctx.ctx_classes()
_TORCH_PY_MODULES = ("torch.nn.functional", "torch.functional", "torch.nn.init", "torch.linalg", "torch.fft",
                     "torch.special", "torch.random", "torch._tensor", "torch.overrides", "torch.nn.modules.utils")
_DENY_PREFIX = ("torch.autograd", "torch.utils", "torch._dynamo", "torch.compiler", "torch.jit",
                "torch.distributed", "torch.cuda", "torch.backends", "torch.testing", "torch.fx", "torch.export",
                "torch._inductor", "torch.multiprocessing", "torch.profiler", "torch.onnx", "torch.package")
_IMPURE_NO_TENSOR = {torch.set_default_dtype, torch.set_printoptions, torch.set_num_threads,
                     torch.use_deterministic_algorithms, torch.set_default_tensor_type}
# Functions that read or replace the state of torch's global generator. A graph break runs them eagerly
# between graphs, where the state is the real one: the graphs draw from that generator in program order, so
# saving the state, drawing and restoring it behaves as in eager. Traced, they would run once, at compile time.
_RNG_STATE = {torch.manual_seed, torch.seed, torch.get_rng_state, torch.set_rng_state}
REQUIRES_GRAD = "requires_grad"     # the tag of a tensor's requires_grad guard
# torch helpers run natively (a graph break at the call): context managers that save and restore process state
_NATIVE_CALLS = {torch.random.fork_rng: "torch.random.fork_rng saves and restores the random generators' state"}


def _constant_rules() -> dict[Any, Callable]:
    out: dict[Any, Callable] = {
        torch.is_grad_enabled: lambda d, f, a, k: Const(d.torch.grad_enabled),
        torch.is_tensor: lambda d, f, a, k: Const(isinstance(a[0], TensorVar)),
        torch.jit.is_scripting: lambda d, f, a, k: Const(False),
        torch.jit.is_tracing: lambda d, f, a, k: Const(False),
        torch._C._get_tracing_state: lambda d, f, a, k: Const(None),
        torch.compiler.is_compiling: lambda d, f, a, k: Const(True),
        torch.is_autocast_enabled: lambda d, f, a, k: Const(d.torch.autocast_dtype(
            d.as_python(f, a[0]) if a else "cuda") is not None),
    }
    if hasattr(torch.compiler, "is_dynamo_compiling"):
        # True, as under torch.compile: code asks it to skip what a bytecode tracer cannot follow (and torch's
        # own helpers then call the function directly instead of compiling it again inside the trace)
        out[torch.compiler.is_dynamo_compiling] = lambda d, f, a, k: Const(True)
    if hasattr(torch._utils, "is_compiling"):
        # the deprecated spelling of torch.compiler.is_compiling: inlined, it warns (a graph break), and the
        # rest, run natively, read the real flag, which is False
        out[torch._utils.is_compiling] = lambda d, f, a, k: Const(True)
    for name, dev in (("is_autocast_cpu_enabled", "cpu"), ("is_autocast_cuda_enabled", "cuda")):
        if hasattr(torch, name):
            out[getattr(torch, name)] = lambda d, f, a, k, dev=dev: Const(d.torch.autocast_dtype(dev) is not None)
    out[torch._C._set_grad_enabled] = _set_grad_call
    for fn in (torch._C._has_torch_function, torch._C._has_torch_function_unary,
               torch._C._has_torch_function_variadic):
        out[fn] = lambda d, f, a, k, fn=fn: _has_torch_function(fn, a)
    from .checkpoint import RULES as _checkpoint_rules
    out.update(_checkpoint_rules)
    from .unbacked import RULES as _unbacked_rules     # torch._check / torch._check_is_size
    out.update(_unbacked_rules)
    from .functorch_hop import RULES as _functorch_rules
    out.update(_functorch_rules)
    from .control_flow import RULES as _control_flow_rules
    out.update(_control_flow_rules)
    for fn, what in _GLOBAL_STATE.items():
        out[fn] = lambda d, f, a, k, fn=fn, what=what: _read_global_state(d, fn, what)
    return out


def _has_torch_function(fn: Any, args: list) -> Any:
    """``torch._C._has_torch_function*`` (torch's functions ask it of their arguments before dispatching):
    whether an argument's class overrides ``__torch_function__``, answered from the classes the traced values
    stand for. Recorded in the graph instead, it was asked of the trace's stand-ins, which answered True."""
    items = args[0].items if fn is torch._C._has_torch_function and type(args[0]) in (TupleVar, ListVar) else args
    if torch._C._is_torch_function_mode_enabled():
        return None
    try:
        classes = [v.python_type() for v in items]
    except NotImplementedError:
        return None
    disabled = torch._C._disabled_torch_function_impl
    return Const(any(c is not torch.Tensor and getattr(c, "__torch_function__", disabled) is not disabled
                     for c in classes))


# Process-wide state a trace may read: its value is a constant of the trace and a guard of the entry.
_GLOBAL_STATE = {torch.autograd._profiler_enabled: "the autograd profiler is on",
                 torch.are_deterministic_algorithms_enabled: "deterministic algorithms are on",
                 torch.is_deterministic_algorithms_warn_only_enabled: "deterministic algorithms only warn",
                 torch.get_default_dtype: "the default dtype",
                 torch.autograd._is_checkpoint_valid: "checkpointed recomputation is allowed"}


def _unwrapped(fn: Any, table: Any) -> Any:
    """``fn``, or the first function it wraps that ``table`` holds: once torch._dynamo is imported, torch puts
    ``_disable_dynamo`` wrappers on some of its functions (``torch.manual_seed``), and the tables hold the
    functions as they were (themselves maybe wrappers: ``fork_rng`` is a ``contextmanager``)."""
    for _ in range(4):
        try:
            if fn in table:
                return fn
        except TypeError:       # an unhashable callable (a weakref to a dict hashes its referent)
            return None
        inner = getattr(fn, "__wrapped__", None)
        if inner is None:
            break
        fn = inner
    return fn


def _read_global_state(d, fn: Callable, what: str):
    value = fn()
    d.guards.add(f"{d.cg.bind(fn, fn.__name__)}() is {d.cg.bind(value, 'state')}", f"{what}: {value}")
    return Const(value)


def _explicit_break(fn: Any) -> str | None:
    """Why a call is a graph break the user asked for, or None: ``torch._dynamo.graph_break()``, and a function
    wrapped by ``torch.compiler.disable`` / ``torch._dynamo.disable`` (it must run eagerly). Inlined as plain
    Python, both were silently traced through: no break, and no error under ``fullgraph=True``."""
    if type(fn) is not types.FunctionType:
        return None
    if fn.__name__ == "graph_break" and fn.__module__ == "torch._dynamo.decorators":
        return "torch._dynamo.graph_break() forces a graph break"
    if fn.__dict__.get("_torchdynamo_disable") is True:
        inner = fn.__dict__.get("_torchdynamo_orig_callable", fn)
        name = getattr(inner, "__qualname__", None) or repr(inner)
        return f"call to {name}, which is marked torch.compiler.disable"
    return None


def _numpy_call(d, f, fn: Any, args, kwargs) -> Value | None:
    """NumPy on tensors' arrays (numpy_arrays.py): a NumPy function of arrays, ``torch.from_numpy(a)`` and
    ``torch.as_tensor(a)`` of an array made from a tensor (its tensor, viewed: the memory is shared)."""
    from .numpy_arrays import NdarrayVar, numpy_function
    if fn in (float, int, bool, complex) and args and type(args[0]) is NdarrayVar:
        raise d.unsupported(f, f"{fn.__name__}() of a NumPy array made from a tensor depends on its values",
                            "keep the value in the array (or a tensor), or move this outside the compiled function")
    if fn in (torch.from_numpy, torch.as_tensor) and args and type(args[0]) is NdarrayVar \
            and (fn is torch.from_numpy or not kwargs) and len(args) == 1:
        return record(d, f, "call_method", "view_as", [args[0].t, args[0].t], {})
    return numpy_function(d, f, fn, args, kwargs)


_PLAIN = (bool, int, float, str)


def _state_query(d, f, fn: Any, args, kwargs) -> Value | None:
    """A function of ``torch._C`` itself (not its op namespaces ``_nn``, ``_special``...) called with
    constant arguments reads process state (``_get_mkldnn_enabled()``, ``_is_tracing()``,
    ``_cuda_isCurrentStreamCapturing()``): its answer is a constant of the trace and a guard of the entry,
    re-asked on every call, as ``_GLOBAL_STATE``'s. Recorded as a graph node instead, its answer was baked in
    unguarded (toggling the state later ran the other branch's code) and the node stayed in the graph. A
    result that is not a plain value (None from a setter, an object) returns None: recorded as before."""
    if type(fn) is not types.BuiltinFunctionType or getattr(fn, "__module__", None) != "torch._C":
        return None
    vals = list(args) + list(kwargs.values())
    plain = (lambda x: type(x) in _PLAIN or isinstance(x, (torch.dtype, torch.device)))  # noqa: E731
    if not all(type(v) is Const and plain(v.value) for v in vals):
        return None
    pa, pk = [a.value for a in args], {k: v.value for k, v in kwargs.items()}
    try:
        value = fn(*pa, **pk)
    except Exception as e:      # noqa: BLE001 - eager raises it here too
        from ..interpreter import UserException
        raise UserException(e) from None
    if type(value) not in _PLAIN and not isinstance(value, (torch.dtype, torch.device)):
        return None
    cg = d.cg
    call_args = [cg.bind(a, "arg") for a in pa] + [f"{k}={cg.bind(v, 'arg')}" for k, v in pk.items()]
    op = "is" if type(value) is bool else "=="
    d.guards.add(f"{cg.bind(fn, fn.__name__)}({', '.join(call_args)}) {op} {cg.bind(value, 'state')}",
                 f"torch._C.{fn.__name__}() is {value!r}")
    return Const(value)


def _set_grad_call(d, f, args, kwargs):
    """``torch._C._set_grad_enabled(mode)`` called directly (a user context manager's ``__enter__``): the trace's
    grad mode follows it, so a later ``torch.is_grad_enabled()`` reads what eager reads."""
    from .ctx import set_grad
    set_grad(d, f, bool(d.as_python(f, args[0])))
    return Const(None)


_CONST_RULES = _constant_rules()


def _named_in_module(fn: types.FunctionType, mod: str) -> bool:
    """Whether FX's code for a call_function can name ``fn`` (its module's attribute of its own name): the very
    object (a closure the module holds, ``torch.unique`` from ``boolean_dispatch``), or, where torch rebound the
    name to a wrapper (``torch.manual_seed``), a function that is not a closure."""
    import sys
    held = getattr(sys.modules.get(mod), fn.__name__, None)
    return held is fn or ("<locals>" not in fn.__qualname__ and callable(held))


def is_torch_op(fn: Any) -> bool:
    if isinstance(fn, type):
        return False
    mod = getattr(fn, "__module__", None) or ""
    if type(fn) is types.BuiltinFunctionType:
        if mod.startswith("torch") and not mod.startswith(_DENY_PREFIX):
            return True
        self_ = getattr(fn, "__self__", None)
        return isinstance(self_, types.ModuleType) and self_.__name__.startswith("torch._C")
    if type(fn) is types.FunctionType:     # a graph node must name it: a closure (torch.nn.modules.utils'
        #                                       _pair is _ntuple's ``parse``) is traced through instead
        return (mod in _TORCH_PY_MODULES or mod == "torch") and _named_in_module(fn, mod)
    if type(fn) in (types.MethodDescriptorType, types.WrapperDescriptorType):
        return getattr(fn, "__objclass__", None) in (torch._C.TensorBase, torch.Tensor)
    return isinstance(fn, torch._ops.OpOverload) or isinstance(fn, torch._ops.OpOverloadPacket)


def _remembered_weight_check(d, first: str, full: str, e: str) -> str:
    """A module weight's guard: the same tensor with the same version as at its last full check, else the full
    check ``full`` (which reads the source again: ``first``) and remember it (ember.capture.torch.fastguard).
    ``__fgon``: the entry's fast path is on (off once its weights keep being rewritten: training)."""
    cg = d.cg
    fastguard.install()
    st: TorchState = d.torch
    if st.records is None:
        st.records = fastguard.Records(getattr(st.options, "weight_guard_rewrites", 4))
        recs = cg.bind(st.records, "records")
        d.guards.add(f"({cg.bind(fastguard.EPOCH, 'data_epoch')}[0] == {recs}.epoch or {recs}.refresh()) "
                     f"and ((__fgon := {recs}.on) or True)",
                     "no tensor had its .data replaced since the last call")
    seen = cg.bind(st.records.new(), "seen")
    return (f"(__fgon and (__sv := {seen}[0])[0]() is ({first}) and {e}._version == __sv[1] or "
            f"({full} and (not __fgon or {cg.bind(fastguard.record, 'record')}({e}, {seen}))))")


class TorchPlugin:
    trusted_prefixes = ("torch",)       # torch's own module globals are not guarded
    def __init__(self, backend: Callable | None = None, backend_name: str = "eager", options: Any = None,
                 dynamic: bool | None = None):
        self.backend = backend
        self.backend_name = backend_name
        self.options = options
        self.dynamic = dynamic      # the compile's dynamic= (dynamic.py)

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self, d) -> None:
        avoid_dynamo_import()           # meta kernels would import torch._dynamo (ember.dynamo_free)
        d.torch = TorchState()
        d.torch.options = self.options      # capture_scalar_outputs / capture_dynamic_output_shape_ops
        g, cg = d.guards, d.cg
        g.add(f"{cg.bind(torch.is_grad_enabled, 'is_grad_enabled')}() is {d.torch.grad_enabled}",
              f"grad mode is {'on' if d.torch.grad_enabled else 'off'}")
        # state that changes what the compiled code computes without the trace reading it: inference mode
        # (tensors made under it), deterministic algorithms (ember's lowering keeps ATen scatters under it)
        inf = torch.is_inference_mode_enabled()
        g.add(f"{cg.bind(torch.is_inference_mode_enabled, 'is_inference_mode_enabled')}() is {inf}",
              f"inference mode is {'on' if inf else 'off'}")
        det = torch.are_deterministic_algorithms_enabled()
        g.add(f"{cg.bind(torch.are_deterministic_algorithms_enabled, 'deterministic')}() is {det}",
              f"deterministic algorithms are {'on' if det else 'off'}")
        any_on = getattr(torch._C, "_is_any_autocast_enabled", None)
        if any_on is not None and not any(on for on, _ in d.torch.autocast.values()):
            g.add(f"not {cg.bind(any_on, 'is_any_autocast_enabled')}()", "autocast is off")
            return
        for dev, (on, _) in d.torch.autocast.items():
            g.add(f"{cg.bind(torch.is_autocast_enabled, 'is_autocast_enabled')}({dev!r}) is {on}",
                  f"autocast on {dev} is {'on' if on else 'off'}")

    # -- values ----------------------------------------------------------------------------------------
    def wrap(self, d, obj: Any, source: Source | None):
        if isinstance(obj, torch.Tensor):
            return self._wrap_tensor(d, obj, source)
        if isinstance(obj, _ctx.GRAD_CTX_TYPES + (torch.autocast,)):
            return _ctx.wrap_ctx(d, obj, source)
        if type(obj) is types.MethodType and isinstance(obj.__self__, _ctx.GRAD_CTX_TYPES + (torch.autocast,)):
            recv = d.wrap(obj.__self__, AttrSource(source, "__self__") if source is not None else None)
            return MethodOf(recv, obj.__func__.__name__)
        if isinstance(obj, torch.nn.Module):
            if source is None:
                source = ConstSource(id(obj), obj)
            # guarded by type, not identity: every fact the trace reads from the module (attributes, parameter
            # metadata, submodule types) is guarded where it is read, so identical layers share compiled code
            d.cg.hoist(source)
            d.guards.type_match(source, type(obj))
            if not _own_getattribute(type(obj)):
                # its attributes are read from its __dict__ (InstAttrSource), fetched here, once per call: the
                # guards assign it before any later line (glue, graph call, return) reads it
                inst = AttrSource(source, "__dict__")
                d.cg.hoist(inst)
                d.guards.add(f"{inst.expr(d.cg)} is not None", f"{d.cg.plain(source)} has a __dict__")
            return NNModuleVar(obj, source)
        if isinstance(obj, (torch.dtype, torch.layout, torch.memory_format)) or (
                isinstance(obj, torch._ops.HigherOrderOperator) and obj in _CONST_RULES):
            # (an operator with a capture rule, torch.ops.higher_order.cond: called through the rule, not
            # traced into as a Python object)
            if source is not None:
                d.guards.id_match(source, obj)
            return Const(obj, source)
        if isinstance(obj, (torch.device, torch.Size)):
            if source is not None:
                d.guards.equals(source, obj)
            return Const(obj, source)
        if type(obj) is _np.ndarray and source is not None:
            from .numpy_arrays import wrap_input_array
            return wrap_input_array(self, d, obj, source)
        return None

    def _wrap_tensor(self, d, t: torch.Tensor, source: Source | None):
        cls = type(t)
        if cls not in (torch.Tensor, torch.nn.Parameter) and not (
                isinstance(t, torch.nn.Parameter) and cls.__torch_function__ is torch.Tensor.__torch_function__):
            from ...errors import Unsupported
            raise Unsupported(f"tensor subclass {cls.__qualname__} is not supported yet")
        if t.layout is not torch.strided or t.is_nested or t.is_quantized:
            from ...errors import Unsupported
            raise Unsupported(f"{t.layout} / nested / quantized tensors are not supported yet")
        sizes = None
        if source is None:
            source = ConstSource(id(t), t)
        else:
            dims = DYN.dynamic_dims(self, d, source, t)
            sizes = DYN.symbolic_input(d, source, t, dims) if dims else None
            self._tensor_guard(d, source, t, sizes)
        st = d.torch
        node = st.placeholder(source, t)
        meta = to_meta(t)
        node.meta["example_value"] = meta
        node.meta["ember_device"] = t.device
        v = TensorVar(node, meta, t.device, cls, source)
        if sizes is not None:
            DYN.input_meta(d, node, meta, sizes)
            v.sym = sizes
        return v

    def wrap_number(self, d, obj: Any, source: Source):
        if isinstance(obj, (float, _np.floating)) and not isinstance(obj, _np.longdouble):
            # np.float32/np.float16 too: torch reads them as the Python float they hold (float_item.narrow)
            return _float_item.wrap_float(self, d, obj, source)
        return DYN.wrap_number(self, d, obj, source)

    @staticmethod
    def _tensor_guard(d, source: Source, t: torch.Tensor, sizes: tuple | None = None) -> None:
        cg = d.cg
        cg.hoist(source)
        first = source.expr(cg)
        e = source.expr(cg)
        dev = t.device
        # the cheapest checks that pin each fact (this runs on every call, for every input and parameter):
        # is_cpu over device objects, is_contiguous() over a stride tuple when the strides are the contiguous ones
        if dev.type == "cpu":
            dev_check = f"{e}.is_cpu"
        elif dev.type == "cuda" and torch.cuda.device_count() == 1:
            dev_check = f"{e}.is_cuda"         # one visible device (fixed for the process): no index to check
        elif dev.type == "cuda":
            dev_check = f"{e}.is_cuda and {e}.get_device() == {dev.index}"
        else:
            dev_check = f"{e}.device == {cg.bind(dev, 'device')}"
        layout = f"{e}.is_contiguous()" if t.is_contiguous() else f"{e}.stride() == {t.stride()!r}"
        shape = f"{e}.shape == {tuple(t.shape)!r}"
        if sizes is not None:       # symbolic sizes: bind the symbols, check ranges and the symbolic layout
            shape, layout = DYN.shape_check(d, e, sizes), DYN.layout_check(d, e, t, sizes)
        meta = f"{e}.dtype is {cg.bind(t.dtype, 'dtype')} and {dev_check} and {shape} and {layout}"
        cls = cg.bind(type(t), type(t).__name__)
        if _module_weight(source) and not t.is_inference() and sizes is None:
            expr = _remembered_weight_check(d, first, f"{first}.__class__ is {cls} and {meta}", e)
        else:
            expr = f"{first}.__class__ is {cls} and {meta}"
        plain = cg.plain(source)
        d.guards.add(expr, f"{plain}: {type(t).__name__} {str(t.dtype).replace('torch.', '')} {tuple(t.shape)} "
                           f"stride {t.stride()} on {dev}")
        # a guard of its own: dropped where the graph runs without gradients and never reads it (graph_hook)
        d.guards.add(f"{e}.requires_grad" if t.requires_grad else f"not {e}.requires_grad",
                     f"{plain}.requires_grad is {t.requires_grad}", tag=(REQUIRES_GRAD, source))

    def const_getattr(self, d, f, v, name):
        if isinstance(v.value, type):       # a hook handle's id counter (hook_ids.py)
            from .hook_ids import read_counter
            return read_counter(d, v.value, name, v.source)
        return None

    @staticmethod
    def callee(obj: Any):
        """For a natively run call (after a graph break): an nn.Module runs its compiled forward."""
        if isinstance(obj, torch.nn.Module) and not _has_hooks(obj) and "forward" not in obj.__dict__:
            fwd = type(obj).forward
            if type(fwd) is types.FunctionType and fwd is not torch.nn.Module.forward \
                    and type(obj).__call__ is torch.nn.Module.__call__ \
                    and not isinstance(lookup_type_attr(type(obj), "forward"), staticmethod):
                return fwd, obj
        return None

    # -- calls -----------------------------------------------------------------------------------------
    def call(self, d, f, fn: Any, args, kwargs):
        # (a compiled function's wrapper, ember's or torch.compile's: objects.compiled_original)
        why = _explicit_break(fn)
        if why is not None:
            raise d.unsupported(f, why, "it runs eagerly at this graph break (fullgraph=True allows none: move the "
                                         "call out of the compiled function)")
        r = _symfloat.call(d, f, fn, args, kwargs)
        if r is None:
            r = _minmax.call(d, f, fn, args, kwargs)
        if r is None:
            r = _pyrandom.call(d, f, fn, args, kwargs)
        if r is None:
            r = _tensor_ctor.call(d, f, fn, args, kwargs)
        if r is None:
            r = _comptime.call(d, f, fn, args, kwargs)
        if r is not None:
            return r
        try:
            special = _CTX.get(fn) or _CONST_RULES.get(fn) or _CONST_RULES.get(_unwrapped(fn, _CONST_RULES))
        except TypeError:
            special = None
        if special is not None:
            if fn in _CTX:
                return special(d, f, fn, args, kwargs)
            return special(d, f, args, kwargs)
        arrays = _numpy_call(d, f, fn, args, kwargs)
        if arrays is not None:
            return arrays
        base = _unwrapped(fn, _NATIVE_CALLS)
        if base in _NATIVE_CALLS:
            raise d.unsupported(f, _NATIVE_CALLS[base], "it runs eagerly at this graph break")
        cls = function_apply_class(fn, args)
        if cls is not None:
            return call_function_apply(d, f, cls, args[1:] if fn is _APPLY else args, kwargs)
        if isinstance(fn, type):
            if is_legacy_constructor(fn):
                return call_legacy_constructor(d, f, fn, args, kwargs)
            if issubclass(fn, torch.nn.Module):
                return construct_module(d, f, fn, args, kwargs)
            if fn in (torch.Size, torch.device, torch.finfo, torch.iinfo, torch.dtype):
                from ..objects import all_const, call_real
                if all_const(args, kwargs):
                    return call_real(d, f, fn, args, kwargs)
                if fn is torch.Size:
                    return Const(torch.Size(d.as_python(f, d.call(f, Const(tuple), args, {}))))
                raise d.unsupported(f, f"{fn.__name__}() of traced values")
            if fn is torch.Tensor or issubclass(fn, torch.Tensor):
                raise d.unsupported(f, f"constructing {fn.__name__} directly inside compiled code",
                                    "use a factory function such as torch.tensor or torch.empty")
            return None
        if not is_torch_op(fn):
            return None
        base = _unwrapped(fn, _IMPURE_NO_TENSOR.union(_RNG_STATE))
        if base in _IMPURE_NO_TENSOR:
            raise d.unsupported(f, f"{fn.__name__} changes global torch state inside compiled code")
        if base in _RNG_STATE:
            raise d.unsupported(f, f"torch.{fn.__name__} reads or sets the random generator's state",
                                "call it outside the compiled function (it runs eagerly at this graph break)")
        state = _state_query(d, f, fn, args, kwargs)
        if state is not None:
            return state
        return record(d, f, "call_function", fn, list(args), dict(kwargs))

    # -- the graph -------------------------------------------------------------------------------------
    def graph_hook(self, d, glue):
        st: TorchState = d.torch
        outs = glue.graph_outputs
        if not (torch.is_grad_enabled() or st.grad_observed or _sets_grad_mode(st.graph)):
            # the whole graph runs under no_grad (the entry's mode, never switched) and no code read a
            # requires_grad: an output requires grad only where it is an input or a view of one (no_grad keeps a
            # view's requires_grad), so the other inputs' requires_grad guards go (ember.autograd picks its
            # variant by grad mode at run time): ~0.08 us per parameter on every call
            keep = _aliased_inputs(st, outs)
            if keep is not None:
                d.guards.drop(lambda g: type(g.tag) is tuple and g.tag[0] == REQUIRES_GRAD and g.tag[1] not in keep)
        if st.n_calls == 0 and not outs:
            if st.table is not None:        # no graph, but the glue relied on sizes (a returned size, a branch)
                _symsize.relation_guards(d, st.table)
            return [], []
        st.graph.output(tuple(t.node for t in outs))
        symbolic = st.table is not None and bool(st.table.symbols)
        if symbolic:
            _drop_unused_sizes(st.graph)
        root = torch.nn.Module()
        for sub_name, sub in st.submodules.items():     # higher-order ops' subgraphs (subgraph.py)
            root.add_module(sub_name, sub)
        gm = fx.GraphModule(root, st.graph, class_name="EmberGraph")
        gm.graph.lint()
        if symbolic:
            gm.meta["ember_symbols"] = st.table
        example_inputs = [real for _, real, _ in st.inputs]
        from ..frontend import STATS
        STATS.bump("graphs_compiled")
        from ... import logs
        if logs.enabled("graph"):
            logs.log("graph", f"captured graph:\n{readable_graph(gm)}")
        grad = torch.is_grad_enabled()
        try:
            compiled = self.backend(gm, example_inputs) if self.backend is not None else gm.forward
        except SymbolicUnsupported as e:
            if symbolic and st.table.unbacked:
                # sizes computed from tensor data cannot be made static: the graph runs as captured (its ops
                # eagerly, one graph, no break), and the reason is a performance hint
                from ... import logs as _logs
                _logs.log("perf_hints", f"{self.backend_name}: a graph with data-dependent sizes runs as "
                                        f"captured: {e}")
                compiled = gm.forward
            elif symbolic:
                STATS.bump("graphs_compiled", -1)
                raise
            else:
                raise BackendCompilerFailed(self.backend_name,
                                            InternalError("SymbolicUnsupported on a static graph"))
        except Exception as e:      # noqa: BLE001
            raise BackendCompilerFailed(self.backend_name, e) from e
        finally:        # a backend that runs the graph while compiling must not leave its grad mode behind
            torch._C._set_grad_enabled(grad)
        if symbolic and not _keeps_symbols(self.backend, compiled, gm):
            STATS.bump("graphs_compiled", -1)
            raise SymbolicUnsupported(f"backend {self.backend_name!r} compiled the graph into its own callable from "
                                      "real example inputs, so it may have specialized the symbolic sizes")
        if symbolic:        # what the trace and the backend relied on about the sizes
            _symsize.relation_guards(d, st.table)
            STATS.bump("symbolic_graphs")
            if logs.enabled("dynamic"):
                logs.log("dynamic", f"graph with symbolic sizes:\n{st.table.describe()}")
        name = f"__graph_{id(gm):x}"
        args = ", ".join(src.expr(d.cg) for src, _, _ in st.inputs)
        call = f"__out = {name}({args})" if outs else f"{name}({args})"
        # no cost unless the graph raises: then the user's line of the op that raised (located.py)
        again = ", ".join(src.expr(d.cg) for src, _, _ in st.inputs)    # hoisted sources: their names now
        lines = ["try:", f"    {call}", "except Exception as __x:",
                 f"    __graph_error(__x, {name}_gm, ({again}{',' if again else ''}))", "    raise"]
        return lines, [{"gm": gm, "bindings": {name: compiled, f"{name}_gm": gm, "__graph_error": graph_error},
                        "n_inputs": len(st.inputs), "n_ops": st.n_calls}]


def _keeps_symbols(backend: Any, compiled: Any, gm: fx.GraphModule) -> bool:
    """Whether a symbolic graph stays symbolic in what the backend returned: ember's own backends read the
    sizes' symbols (``gm.meta["ember_symbols"]``); another backend is safe only when it runs the graph itself
    (``gm.forward``: a compile counter, a graph recorder). One that traced the graph into its own callable
    (PyTorch's ``aot_module_simplified``) saw only real example inputs and may have baked their sizes and
    Python ints in: it runs the same answer for every size, so the frame is compiled with static sizes."""
    if backend is None or (getattr(backend, "__module__", None) or "").split(".")[0] == "ember":
        return True
    return compiled is gm or getattr(compiled, "__self__", None) is gm


def _drop_unused_sizes(graph: fx.Graph) -> None:
    """Size reads and int arithmetic the trace recorded but nothing uses (``symsize.make``)."""
    for n in reversed(list(graph.nodes)):
        if n.meta.get("ember_sym") and not n.users:
            graph.erase_node(n)


def _sets_grad_mode(graph: fx.Graph) -> bool:
    """Whether the graph switches grad mode anywhere (a ``set_grad_enabled`` node, however it got there)."""
    return any(n.op == "call_function" and n.target in (torch._C._set_grad_enabled, torch.set_grad_enabled)
               for n in graph.nodes)


def _aliased_inputs(st: TorchState, outs: list) -> set | None:
    """Sources of the graph inputs whose memory a graph output shares (the input itself, a view of it): their
    meta tensors share a storage, also in inference mode, where a view's ``_base`` is not kept. None: unknown."""
    def storage(t: Any) -> int | None:
        return t.untyped_storage()._cdata if isinstance(t, torch.Tensor) else None
    try:
        shared = {storage(getattr(o, "meta", None)) for o in outs} - {None}
        return {src for src, _, node in st.inputs if storage(node.meta.get("example_value")) in shared}
    except (RuntimeError, NotImplementedError, AttributeError):
        return None


def readable_graph(gm: fx.GraphModule) -> str:
    """The graph as Python, each node commented with shape/dtype/device and the user's file:line."""
    lines = []
    for n in gm.graph.nodes:
        ev = n.meta.get("example_value")
        desc = ""
        if isinstance(ev, torch.Tensor):
            desc = f"{str(ev.dtype).replace('torch.', '')}{list(ev.shape)} {n.meta.get('ember_device', '')}"
        loc = n.meta.get("ember_loc", "")
        if n.op == "placeholder":
            lines.append(f"{n.name}: input  # {desc}")
        elif n.op == "output":
            lines.append(f"return {n.args[0]}")
        else:
            tgt = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
            mod = getattr(n.target, "__module__", "") or ""
            tname = f"{mod}.{tgt}" if mod and not isinstance(n.target, str) else (f".{tgt}" if n.op == "call_method" else tgt)
            args = ", ".join([repr(a) if not isinstance(a, fx.Node) else a.name for a in n.args]
                             + [f"{k}={v.name if isinstance(v, fx.Node) else repr(v)}" for k, v in n.kwargs.items()])
            lines.append(f"{n.name} = {tname}({args})  # {desc}  {loc}")
    return "\n".join(lines)


def plugins_factory(backend: Callable | None, backend_name: str, options: Any,
                    dynamic: bool | None = None) -> Callable[[], list]:
    return lambda: [TorchPlugin(backend, backend_name, options, dynamic)]
