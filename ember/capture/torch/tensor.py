"""Rules for tensor values: attributes read as guarded constants, methods recorded as nodes, indexing,
iteration over the first dimension, and the operations whose result depends on tensor data (reported)."""
from __future__ import annotations

import contextvars
import operator

import torch

from .. import rules as R
from ..interpreter import NULL, UserException
from ..sources import AttrSource
from ..values import Const, ListVar, MethodOf, TupleVar, Value
from .graph import TensorVar
from .ops import BINARY_FNS, binary, compare, record, unary
from .symsize import COMPARE_FNS
from . import symsize as S
from . import unbacked as _unbacked
from . import float_item as _float_item

# metadata attributes: constants derived from the meta tensor and the real device
_META_ATTRS = {
    "shape": lambda t: t.meta.shape, "dtype": lambda t: t.meta.dtype, "layout": lambda t: t.meta.layout,
    "ndim": lambda t: t.meta.dim(), "requires_grad": lambda t: t.meta.requires_grad,
    "is_leaf": lambda t: t.meta.is_leaf if t.source is None else t.meta.is_leaf,
    "device": lambda t: t.device, "is_cuda": lambda t: t.device.type == "cuda",
    "is_cpu": lambda t: t.device.type == "cpu", "is_meta": lambda t: t.device.type == "meta",
    "is_sparse": lambda t: t.meta.is_sparse, "is_quantized": lambda t: t.meta.is_quantized,
    "is_nested": lambda t: t.meta.is_nested, "is_mkldnn": lambda t: False, "names": lambda t: t.meta.names,
    "itemsize": lambda t: t.meta.element_size(), "nbytes": lambda t: t.meta.numel() * t.meta.element_size(),
    "__class__": lambda t: t.cls, "is_mps": lambda t: t.device.type == "mps",
}
# metadata methods: called on the meta tensor, result is a constant
_META_METHODS = {"size", "dim", "stride", "numel", "nelement", "element_size", "is_contiguous",
                 "is_floating_point", "is_complex", "storage_offset", "ndimension", "is_signed",
                 "is_inference", "has_names", "is_set_to", "is_pinned", "is_shared"}
_TENSOR_ATTRS = {"T", "mT", "H", "mH", "real", "imag", "data"}
# what depends on a tensor's requires_grad even under no_grad: reading one keeps the requires_grad guards
_GRAD_STATE = {"requires_grad", "is_leaf", "grad", "grad_fn", "retains_grad", "requires_grad_", "__getattribute__"}
_DATA_DEPENDENT = {
    "item": "Tensor.item() turns a tensor value into a Python number",
    "tolist": "Tensor.tolist() turns tensor values into Python numbers",
    "numpy": "Tensor.numpy() leaves torch", "__bool__": "converting a tensor to bool depends on its value",
    "__int__": "int(tensor) depends on its value", "__float__": "float(tensor) depends on its value",
    "__index__": "using a tensor as a Python index depends on its value",
    "data_ptr": "Tensor.data_ptr()", "untyped_storage": "Tensor.untyped_storage()",
}
_UNSUPPORTED_METHODS = {"backward": "Tensor.backward() inside compiled code",
                        "retain_grad": "Tensor.retain_grad inside compiled code",
                        "apply_": "Tensor.apply_", "map_": "Tensor.map_", "storage": "Tensor.storage()"}
_HINT = "keep the value as a tensor (use torch ops such as torch.where instead of Python control flow), " \
        "or move this outside the compiled function"


def _sym_size(d, f, t, args, kwargs):
    dim = args[0] if args else kwargs.get("dim")
    if dim is None:
        return S.shape_value(d, f, t)
    return S.dim_value(d, f, t, d.as_python(f, dim))


def _sym_stride(d, f, t, args, kwargs):
    raise S.SymbolicUnsupported("capture: Tensor.stride() of a tensor with symbolic sizes")


# metadata that depends on symbolic sizes: symbolic values (symsize.py)
_SYM_ATTRS = {"shape": lambda d, f, t: S.shape_value(d, f, t),
              "nbytes": lambda d, f, t: d.binary(f, "*", S.numel_value(d, f, t), Const(t.meta.element_size()))}
_SYM_METHODS = {"size": _sym_size, "numel": lambda d, f, t, a, k: S.numel_value(d, f, t),
                "nelement": lambda d, f, t, a, k: S.numel_value(d, f, t), "stride": _sym_stride}


def data_dependent(d, f, what: str):
    return d.unsupported(f, f"{what}: ember cannot capture a value that depends on tensor data", _HINT)


@R.GETATTR.register(TensorVar)
def _tensor_getattr(d, f, t: TensorVar, name: str):
    if name in _GRAD_STATE:
        d.torch.grad_observed = True
    if t.sym is not None and name in _SYM_ATTRS:
        return _SYM_ATTRS[name](d, f, t)
    if name in _META_ATTRS:
        return d.from_python(_META_ATTRS[name](t)) if name != "shape" else Const(t.meta.shape)
    if name in _TENSOR_ATTRS:
        return record(d, f, "call_function", getattr, [t, Const(name)], {})
    if name == "grad":
        if t.source is not None:
            # (by source too: after `t.data = y` the value reads another node)
            real = next(r for s, r, n in d.torch.inputs if n is t.node or s == t.source)
            return d.wrap(real.grad, AttrSource(t.source, "grad"))
        return Const(None)
    if name in ("grad_fn", "_base", "_version"):
        raise d.unsupported(f, f"reading Tensor.{name} inside compiled code")
    attr = getattr(torch.Tensor, name, NULL)
    if attr is NULL:
        raise UserException(AttributeError(f"'Tensor' object has no attribute '{name}'"))
    if callable(attr):
        return MethodOf(t, name)
    raise d.unsupported(f, f"reading Tensor.{name} inside compiled code")


def _tolist(d, f, t: TensorVar) -> Value:
    """``t.tolist()`` of a tensor of static shape: nested lists of its elements' ``item()`` (each a number read
    at run time, under option capture_scalar_outputs, as ``t.item()``)."""
    flat = record(d, f, "call_method", "reshape", [t, Const(-1)], {})
    items = [d.call_method(f, record(d, f, "call_function", operator.getitem, [flat, Const(i)], {}), "item", [], {})
             for i in range(t.meta.numel())]
    for n in reversed(t.meta.shape[1:]):
        items = [ListVar(items[i:i + n]) for i in range(0, len(items), n)]
    return ListVar(items)


@R.SETATTR.register(TensorVar)
def _tensor_setattr(d, f, t, name, value):
    if name == "requires_grad" and value is not NULL:
        # the setter does what requires_grad_(value) does (the same leaf checks and errors), returning nothing
        if not (type(value) is Const and type(value.value) is bool):
            if type(value) is Const:
                raise UserException(TypeError("requires_grad must be a bool"))
            raise d.unsupported(f, "setting Tensor.requires_grad to a value that is not a constant bool")
        if not t.meta.is_leaf:      # the setter refuses any value on a non-leaf (requires_grad_(True) does not)
            raise UserException(_nonleaf_setter_error(value.value))
        _tensor_method(d, f, t, "requires_grad_", [value], {})
        return
    if name == "data" and value is not NULL:
        from .setdata import set_data
        set_data(d, f, t, value)
        return
    raise d.unsupported(f, f"setting Tensor.{name} inside compiled code",
                        "set tensor attributes outside the compiled function")


class HookHandleVar(Value):
    """The handle ``Tensor.register_hook`` returns inside a trace: the registration happens in the glue, so
    the handle is not there to use (reading or returning it is reported)."""
    __slots__ = ()

    def __init__(self):
        super().__init__(None)

    def python_type(self):
        return torch.utils.hooks.RemovableHandle

    def describe(self):
        return "hook handle of Tensor.register_hook"


# set while ember.export checks that a model captures as one graph: an exported program carries no hooks, and
# the check runs on the real parameters (a registration there would outlive the export)
NO_HOOKS: contextvars.ContextVar[bool] = contextvars.ContextVar("ember_no_hooks", default=False)


def _register_hook(d, f, t: TensorVar, args, kwargs):
    """``x.register_hook(fn)`` on a tensor from outside the call (an input, a parameter, a buffer): the forward
    does not depend on it, and the gradient reaches ``x`` only after the compiled call returned, through
    ``x``'s own autograd node, so the glue registers it on the real tensor after the graph ran, in program
    order with the other deferred calls. A tensor computed in the graph has no real tensor to hook."""
    if NO_HOOKS.get():
        raise d.unsupported(f, "Tensor.register_hook in an exported model (an exported program carries no hooks)",
                            "register the hook on the parameters of the module ep.module() returns")
    if t.source is None:
        raise d.unsupported(f, "Tensor.register_hook on a tensor computed inside compiled code",
                            "register the hook on an input, or outside the compiled function")
    if kwargs or len(args) != 1:
        raise UserException(TypeError(f"register_hook() takes 1 argument ({len(args) + len(kwargs)} given)"))
    d.torch.grad_observed = True
    if not t.meta.requires_grad:
        raise UserException(RuntimeError("cannot register a hook on a tensor that doesn't require gradient"))
    d.deferred_calls.append((MethodOf(t, "register_hook"), [args[0]]))
    return HookHandleVar()


def _nonleaf_setter_error(value: bool) -> Exception:
    """The error eager's ``requires_grad`` setter raises on a non-leaf tensor (its own words)."""
    with torch.enable_grad():
        probe = torch.zeros(1, requires_grad=True) * 1
    try:
        probe.requires_grad = value
    except RuntimeError as e:
        return e
    return RuntimeError("you can only change requires_grad flags of leaf variables.")


@R.METHOD.register(TensorVar)
def _tensor_method(d, f, t: TensorVar, name: str, args, kwargs):
    if name in _GRAD_STATE:
        d.torch.grad_observed = True
    if t.sym is not None and name in _SYM_METHODS:
        return _SYM_METHODS[name](d, f, t, args, kwargs)
    if name in _META_METHODS:
        margs = [d.as_python(f, a) for a in args]
        mkw = {k: d.as_python(f, v) for k, v in kwargs.items()}
        try:
            return d.from_python(getattr(t.meta, name)(*margs, **mkw))
        except Exception as e:      # noqa: BLE001
            raise UserException(e) from None
    if name == "get_device":
        return Const(t.device.index if t.device.type != "cpu" else -1)
    if name == "numpy":
        from .numpy_arrays import tensor_numpy
        return tensor_numpy(d, f, t, args, kwargs)
    if name == "tolist" and not args and not kwargs and t.sym is None and t.meta.dim() > 0 and t.meta.numel():
        return _tolist(d, f, t)
    if name == "tolist" and not args and not kwargs and t.meta.dim() == 0 and t.meta.dtype != torch.bool \
            and not t.meta.dtype.is_complex:        # a 0-dim tensor's is its item()
        return d.call_method(f, t, "item", [], {})
    if name in _DATA_DEPENDENT:
        v = _unbacked.item(d, f, t, name, record)
        if v is None:
            v = _float_item.item(d, f, t, name)
        if v is not None:
            return v
        raise data_dependent(d, f, _DATA_DEPENDENT[name])
    if name == "register_hook":
        return _register_hook(d, f, t, args, kwargs)
    if name in _UNSUPPORTED_METHODS:
        raise d.unsupported(f, _UNSUPPORTED_METHODS[name], "call it outside the compiled function")
    if name == "type" and not args and not kwargs:
        prefix = "torch." if t.device.type == "cpu" else f"torch.{t.device.type}."
        return Const(t.meta.type().replace("torch.meta.", prefix))
    if name in ("to", "cuda", "cpu", "type"):
        return _to(d, f, t, name, args, kwargs)
    if name in ("__iter__",):
        return d.iter(f, t)
    return record(d, f, "call_method", name, [t] + list(args), kwargs, device=_method_device(t, kwargs))


def _method_device(t: TensorVar, kwargs) -> torch.device:
    dev = kwargs.get("device")
    if dev is not None and type(dev) is Const and dev.value is not None:
        return torch.device(dev.value)
    return t.device


def _to(d, f, t: TensorVar, name, args, kwargs):
    """Tensor.to/cuda/cpu/type: the meta run changes only the dtype; the device is tracked here."""
    vals = [d.as_python(f, a) if type(a) is not TensorVar else a for a in args]
    kw = {k: d.as_python(f, v) for k, v in kwargs.items()}
    device, dtype = t.device, t.meta.dtype
    if name == "cuda":
        dev = vals[0] if vals else kw.get("device")
        device = torch.device("cuda", dev) if isinstance(dev, int) else torch.device(dev or "cuda")
    elif name == "cpu":
        device = torch.device("cpu")
    elif name == "type":
        dtype = vals[0] if vals else kw.get("dtype")
        if dtype is not None and not isinstance(dtype, torch.dtype):
            legacy = _legacy_tensor_type(dtype)
            on = torch.device("cuda") if legacy.is_cuda else torch.device("cpu")
            rest = {k: v for k, v in kwargs.items() if k == "non_blocking"}
            return _to(d, f, t, "to", [Const(on), Const(legacy.dtype)], rest)
    else:
        for v in vals:
            if isinstance(v, TensorVar):
                device, dtype = v.device, v.meta.dtype
            elif isinstance(v, torch.dtype):
                dtype = v
            elif isinstance(v, (str, torch.device, int)) and not isinstance(v, bool):
                device = torch.device(v) if not isinstance(v, int) else torch.device("cuda", v)
        if kw.get("device") is not None:
            device = torch.device(kw["device"])
        if kw.get("dtype") is not None:
            dtype = kw["dtype"]
    same = device == t.device and dtype == t.meta.dtype and not kw.get("copy", False)

    def meta_fn(s, *a, **k):
        if same:
            return s
        return s.to(dtype=dtype, memory_format=kw.get("memory_format", torch.preserve_format), copy=True)
    out = record(d, f, "call_method", name, [t] + list(args), kwargs, meta_fn=meta_fn, device=device)
    return out


_TENSORTYPE = type(torch.FloatTensor)


def _legacy_tensor_type(spec):
    """A legacy tensor type (``torch.HalfTensor``, ``torch.cuda.FloatTensor``) from itself or its name (the
    string ``Tensor.type()`` returns): ``t.type(spec)`` is then ``t.to(device, dtype)``."""
    obj = spec
    if isinstance(spec, str):
        obj = torch if spec.split(".")[0] == "torch" else None
        for part in spec.split(".")[1:]:
            obj = getattr(obj, part, None)
    if type(obj) is not _TENSORTYPE:
        raise UserException(ValueError(f"invalid type: {spec!r}"))
    return obj


@R.GETITEM.register(TensorVar)
def _tensor_getitem(d, f, t, k):
    return record(d, f, "call_function", operator.getitem, [t, k], {})


@R.SETITEM.register(TensorVar)
def _tensor_setitem(d, f, t, k, v):
    if v is NULL:
        raise UserException(TypeError("'Tensor' object does not support item deletion"))
    record(d, f, "call_function", operator.setitem, [t, k, v], {}, meta_fn=_meta_setitem)


def _meta_setitem(a, i, x):
    """Check the assignment on meta tensors where meta kernels can (a boolean mask cannot: its metadata
    effect is nil anyway, since setitem never changes the target's shape)."""
    try:
        a.__setitem__(i, x)
    except (NotImplementedError, RuntimeError) as e:
        if "meta" not in str(e).lower() and "nonzero" not in str(e).lower():
            raise
    return None


@R.LEN.register(TensorVar)
def _tensor_len(d, f, t):
    if t.meta.dim() == 0:
        raise UserException(TypeError("len() of a 0-d tensor"))
    if t.sym is not None:
        return S.dim_value(d, f, t, 0)
    return t.meta.shape[0]


@R.ITER.register(TensorVar)
def _tensor_iter(d, f, t):
    from ..values import IterVar
    n = _tensor_len(d, f, t)
    if type(n) is S.SymNumVar:
        n = S.specialize(n, "iterating over a tensor unrolls a loop over its first dimension", f)
    elif type(n) is Const:
        n = n.value
    return IterVar(iter([_tensor_getitem(d, f, t, Const(i)) for i in range(n)]), "tensor iterator")


@R.TRUTH.register(TensorVar)
def _tensor_truth(d, f, t):
    from .asserts import capture_assert
    passing = capture_assert(d, f, t, record) if f is not None else None
    if passing is not None:     # `assert t, "msg"`: checked after the graph runs; the trace passes it
        return passing
    raise data_dependent(d, f, "branching on a tensor (if/while/and/or/not on its value)")


def _with_array(table, fns):
    """The tensor rule, with a NumPy array on the other side computed as eager does (numpy_arrays)."""
    def rule(d, f, op: str, a, b):
        from .numpy_arrays import NdarrayVar, tensor_with_array
        if type(a) is NdarrayVar or type(b) is NdarrayVar:
            return tensor_with_array(d, f, fns[op], op, a, b)
        return table(d, f, op, a, b)
    return rule


R.BINARY.register(TensorVar)(_with_array(binary, BINARY_FNS))
R.COMPARE.register(TensorVar)(_with_array(compare, COMPARE_FNS))
R.UNARY.register(TensorVar)(unary)


@R.RECONSTRUCT.register(TensorVar)
def _tensor_reconstruct(glue, t):
    return glue.output_ref(t)


_ = TupleVar
