"""NumPy code on tensors' arrays, traced as tensor code (issue 32): ``a = t.numpy()`` is an ``NdarrayVar`` that
holds ``t``'s value; NumPy functions, ndarray methods, attributes and operators on it become graph nodes that
run ``torch._numpy`` (NumPy's API written with torch ops) on tensors; ``torch.from_numpy(a)`` is a tensor again,
and an array the function returns is made a NumPy array by the glue (``.numpy()`` of the graph's output).

Only what cannot change an array in place is traced: in-place operators, item assignment, ``out=`` and the
mutating methods and functions stay graph breaks (an in-place change of ``t.numpy()`` writes ``t``'s memory)."""
from __future__ import annotations

import functools
import operator
from typing import Any, Callable

import numpy as np
import torch

from .. import rules as R
from ..interpreter import UserException
from ..sources import CallSource, Source
from ..values import Const, ListVar, TupleVar, Value
from .graph import TensorVar


class NdarrayVar(Value):
    """A NumPy array whose data is the tensor ``t``'s. ``scalar``: a 0-d result NumPy gives as a scalar
    (``np.float32``: reductions, ufuncs, indexing), not as a 0-d array (``np.asarray``, ``copy``)."""
    __slots__ = ("t", "scalar")
    op_priority = 8         # above numbers read at run time (``a * random.random()`` is NumPy's op), below tensors

    def __init__(self, t: TensorVar, scalar: bool = False):
        super().__init__(None)
        self.t = t
        self.scalar = scalar and t.meta.dim() == 0

    def python_type(self):
        return np.ndarray

    def describe(self):
        return f"ndarray of {self.t.describe()}"


# ndarray methods that return new arrays or values (never write the receiver)
_METHODS = {"copy", "transpose", "reshape", "max", "min", "sum", "mean", "all", "any", "astype", "flatten",
            "ravel", "squeeze", "std", "var", "prod", "argmax", "argmin", "cumsum", "cumprod", "round", "clip",
            "dot", "nonzero", "swapaxes", "tolist", "item", "__getitem__", "__len__", "__abs__", "__neg__"}
_ATTRS = {"T", "real", "imag"}                            # array-valued attributes
_META_ATTRS = {"shape", "ndim", "size", "itemsize", "strides", "nbytes"}
_MUTATING_FUNCTIONS = {"copyto", "put", "place", "putmask", "fill_diagonal"}
# NumPy functions that make a new ndarray from a torch tensor argument through its __array__ (NumPy's own
# result type); on other functions a tensor argument may come back a tensor, so those stay untraced
_TENSOR_SAFE = {"ones_like", "zeros_like", "full_like", "empty_like", "asarray", "array", "concatenate", "stack"}


def _tnp():
    import torch._numpy as tnp
    return tnp


def _to_nd(x):
    if isinstance(x, torch.Tensor):
        return _tnp().ndarray(x)
    if type(x) in (tuple, list):
        return type(x)(_to_nd(y) for y in x)
    if isinstance(x, dict):
        return {k: _to_nd(v) for k, v in x.items()}
    return x


def _to_tensor(x):
    if isinstance(x, _tnp().ndarray):
        return x.tensor
    if type(x) in (tuple, list):
        return type(x)(_to_tensor(y) for y in x)
    return x


@functools.lru_cache(None)
def np_target(fn: Callable, name: str) -> Callable:
    """The graph's function for NumPy's ``name``: tensors in as ``torch._numpy`` arrays, arrays out as tensors."""
    def run(*args, **kwargs):
        a, k = _to_nd(args), _to_nd(kwargs)
        return _to_tensor(fn(*a, **k))
    run.__name__ = run.__qualname__ = f"numpy_{name.replace('.', '_')}"
    return run


@functools.lru_cache(None)
def _method_fn(name: str) -> Callable:
    return lambda self, *a, **k: getattr(self, name)(*a, **k)


@functools.lru_cache(None)
def _attr_fn(name: str) -> Callable:
    return operator.attrgetter(name)


def _plain_arg(d, f, v: Value) -> Value:
    """A NumPy dtype argument becomes its name (``torch._numpy`` takes names, not NumPy's dtype objects); an
    array its tensor."""
    if type(v) is NdarrayVar:
        return v.t
    x = v.value if type(v) is Const else None
    if isinstance(x, np.dtype) or isinstance(x, type) and issubclass(x, np.generic):
        return Const(np.dtype(x).name)
    if type(v) in (TupleVar, ListVar):
        return type(v)([_plain_arg(d, f, x) for x in v.items])
    return v


# what keeps a 0-d result an array (everything else gives NumPy's scalar for one)
_ARRAY_MAKERS = {"asarray", "array", "ascontiguousarray", "asanyarray", "atleast_1d", "ones_like", "zeros_like",
                 "full_like", "empty_like", "ndarray_copy", "ndarray_reshape", "ndarray_astype", "ndarray_squeeze",
                 "ndarray_transpose", "T", "real", "imag"}


def _as_arrays(v: Value, scalar: bool) -> Value:
    if type(v) is TensorVar:
        return NdarrayVar(v, scalar)
    if type(v) in (TupleVar, ListVar):
        return type(v)([_as_arrays(x, scalar) for x in v.items])
    return v


# true division: NumPy gives float64 for integer (and bool) operands, torch._numpy the default dtype (float32)
_TRUE_DIVISIONS = {"op_truediv", "divide", "true_divide", "ndarray___truediv__", "ndarray___rtruediv__"}


def _integral(v: Value) -> bool:
    if type(v) in (NdarrayVar, TensorVar):
        t = v.t if type(v) is NdarrayVar else v
        return not (t.meta.dtype.is_floating_point or t.meta.dtype.is_complex)
    return type(v) is Const and type(v.value) in (int, bool)


@functools.lru_cache(None)
def _in_float64(fn: Callable) -> Callable:
    def run(*args, **kwargs):
        return fn(*[a.astype("float64") if isinstance(a, _tnp().ndarray) else a for a in args], **kwargs)
    return run


def run_numpy(d, f, fn: Callable, name: str, args, kwargs) -> Value:
    """``fn`` (a ``torch._numpy`` callable) on the arrays and values ``args``: one graph node; tensors out are
    arrays, a 0-d result included (NumPy's scalars are 0-d arrays here, as in ``torch._numpy``)."""
    from .ops import record
    if "out" in kwargs:
        raise d.unsupported(f, f"numpy {name}(..., out=...) writes an array in place")
    if name in _TRUE_DIVISIONS and args and all(map(_integral, args)):
        fn, name = _in_float64(fn), f"{name}_float64"
    a = [_plain_arg(d, f, x) for x in args]
    k = {key: _plain_arg(d, f, x) for key, x in kwargs.items()}
    r = _as_arrays(record(d, f, "call_function", np_target(fn, name), a, k), name not in _ARRAY_MAKERS)
    return TupleVar(r.items) if type(r) is ListVar and name in _TUPLE_RESULTS else r


# NumPy functions that give a tuple of arrays where torch._numpy gives a list
_TUPLE_RESULTS = {"meshgrid", "broadcast_arrays", "atleast_1d", "atleast_2d", "atleast_3d"}


# NumPy's array constructors that are not array functions (``is_numpy_function``): made from plain values only
_CONSTANT_MAKERS = {"array", "asarray", "asanyarray", "ascontiguousarray", "zeros", "ones", "empty", "full",
                    "arange", "eye", "identity", "tri", "indices"}


def _constant_array(d, f, fn: Any, name: str, args, kwargs) -> Value | None:
    """A NumPy function of plain constants (numbers, their lists, shapes, dtypes) that makes an array:
    ``np.full((2, 3), 1.5)``, ``np.linspace(0, 1, 5, endpoint=False)``, ``np.diag([1, 2])``. NumPy itself computes
    it at trace time (these functions are pure: ``purity.is_numpy_function`` or a constructor above), so the
    values and the dtype (NumPy's int64/float64 defaults) are eager's by construction; the graph makes a new
    array of them on every call (an array is mutable: never a shared constant). Where a size is symbolic
    (``np.zeros(x.shape[0])`` after a recompile) ``torch._numpy`` computes it in the graph, cast to the dtype
    NumPy gives; where it cannot, the size is specialized. None: not such a call."""
    from ..purity import is_numpy_function, plain_numpy_args
    if not (is_numpy_function(fn) or name in _CONSTANT_MAKERS and getattr(np, name, None) is fn):
        return None
    try:
        hinted = [_hinted(x) for x in args], {k: _hinted(v) for k, v in kwargs.items()}
    except LookupError:
        return None
    if not plain_numpy_args(*hinted):
        return None
    try:
        made = fn(*hinted[0], **hinted[1])
    except Exception as e:      # noqa: BLE001  (NumPy's own error for these arguments: eager raises it too)
        raise UserException(e) from None
    if _has_symbol(list(args) + list(kwargs.values())):
        v = _symbolic_array(d, f, made, name, args, kwargs)
        if v is not None:
            return v
        from ..objects import all_const
        all_const(args, kwargs)         # specializes the sizes: the array below is this call's
    return _array_value(d, f, made, name, args, kwargs)


_UNIFORM = {"zeros", "ones", "full", "empty"}      # shape first; every element the same value


def _hinted(v: Value) -> Any:
    """The Python value of a plain argument (a symbolic int: its value on this call); LookupError otherwise."""
    from .symsize import SymNumVar, hint_of
    if type(v) is Const:
        return _dtype_class(v.value)
    if type(v) is SymNumVar:
        n = hint_of(v.sym)
        return v.np_type(n) if v.np_type is not None else n
    if type(v) in (TupleVar, ListVar):
        return (tuple if type(v) is TupleVar else list)(_hinted(x) for x in v.items)
    raise LookupError(v)


def _has_symbol(vals: list) -> bool:
    return any(type(v).__name__ == "SymNumVar" or type(v) in (TupleVar, ListVar) and _has_symbol(v.items)
               for v in vals)


def _symbolic_array(d, f, made: Any, name: str, args, kwargs) -> Value | None:
    """``torch._numpy``'s ``name`` on symbolic sizes, cast to NumPy's dtype; None where it has none or its
    meta run fails (nothing was recorded then)."""
    from ...errors import Unsupported
    target = getattr(_tnp(), name, None)
    if target is None or type(made) is not np.ndarray or made.dtype not in _FROM_NUMPY:
        return None
    shape = args[0] if args else kwargs.get("shape")
    if name in _UNIFORM and shape is not None and made.size:   # one value everywhere: torch.full of the sizes
        from .ops import record
        shape = shape if type(shape) in (TupleVar, ListVar) else ListVar([shape])
        t = record(d, f, "call_function", torch.full, [ListVar(list(shape.items)), Const(made.reshape(-1)[0].item())],
                   {"dtype": Const(torch.from_numpy(made[:0].reshape(-1)).dtype)})
        return NdarrayVar(t)
    try:
        v = run_numpy(d, f, target, name, args, kwargs)
    except Unsupported:
        return None
    return _cast(d, f, v, made.dtype)


def _cast(d, f, v: Value, dtype: np.dtype) -> Value:
    if type(v) is NdarrayVar and _np_dtype(v) != dtype:
        v = run_numpy(d, f, _method_fn("astype"), "ndarray_astype", [v, Const(dtype.name)], {})
    return v


def _dtype_class(x: Any) -> Any:
    """A dtype given as a class (``np.float32``, ``float``) as its ``np.dtype`` (a plain value: same result)."""
    if isinstance(x, type) and (issubclass(x, np.generic) or x in (bool, int, float, complex)):
        return np.dtype(x)
    return x


def _array_value(d, f, made: Any, name: str, args, kwargs) -> Value | None:
    """The graph's copy of ``made`` (an ndarray, or a tuple/list of them): a literal up to
    ``CaptureLimits.numpy_constant_elements``, a ``torch.full`` where all elements are equal, else
    ``torch._numpy``'s ``name`` cast to NumPy's dtype."""
    from ...options import CAPTURE_LIMITS
    from .ops import record
    if type(made) in (tuple, list):
        items = [_array_value(d, f, m, "", [], {}) for m in made]
        return None if None in items else (TupleVar if type(made) is tuple else ListVar)(items)
    if type(made) is not np.ndarray or made.dtype not in _FROM_NUMPY or not made.dtype.isnative:
        return None
    dt = torch.from_numpy(made[:0].reshape(-1)).dtype
    if made.size <= CAPTURE_LIMITS.numpy_constant_elements:
        t = record(d, f, "call_function", torch.tensor, [d.from_python(made.tolist())], {"dtype": Const(dt)})
        return NdarrayVar(t)
    first = made.reshape(-1)[0]
    if np.array_equal(made, np.full_like(made, first), equal_nan=made.dtype.kind in "fc"):
        t = record(d, f, "call_function", torch.full, [d.from_python(list(made.shape)), Const(first.item())],
                   {"dtype": Const(dt)})
        return NdarrayVar(t)
    target = getattr(_tnp(), name, None) if name else None
    if target is None:
        raise d.unsupported(f, f"numpy.{name or 'array'} made from constants, with {made.size} elements",
                            "make it outside the compiled function and pass it in")
    return _cast(d, f, run_numpy(d, f, target, name, args, kwargs), made.dtype)


def _np_dtype(v: NdarrayVar) -> np.dtype:
    return np.dtype(_tnp().ndarray(v.t.meta).dtype.name)


def numpy_function(d, f, fn: Any, args, kwargs) -> Value | None:
    """A NumPy function called on arrays or tensors, traced through ``torch._numpy``; None when ``fn`` is not
    one (or no argument is an array or a tensor)."""
    mod = getattr(fn, "__module__", None) or ""
    if not (callable(fn) and mod.startswith("numpy")) or isinstance(fn, type):
        return None
    vals = list(args) + [x for v in args if type(v) in (TupleVar, ListVar) for x in v.items] + list(kwargs.values())
    name = getattr(fn, "__name__", "")
    if any(type(x) is TensorVar for x in vals) and name not in _TENSOR_SAFE:
        return None     # NumPy on a torch tensor may return a tensor (np.exp(t), np.add) or fail (np.sum(t))
    if not any(type(x) in (NdarrayVar, TensorVar) for x in vals):
        return _constant_array(d, f, fn, name, args, kwargs)
    sub = mod.split(".")[1] if mod.count(".") and mod.split(".")[1] in ("linalg", "fft") else None
    owner = getattr(_tnp(), sub) if sub else _tnp()
    target = getattr(owner, name, None)
    if target is None or name in _MUTATING_FUNCTIONS:
        raise d.unsupported(f, f"numpy.{name} on an array made from a tensor",
                            "use the torch equivalent, or call it outside the compiled function")
    return run_numpy(d, f, target, f"{sub}.{name}" if sub else name, args, kwargs)


def tensor_numpy(d, f, t: TensorVar, args, kwargs) -> Value:
    """``t.numpy()``: the array over ``t``'s data (eager refuses a tensor that requires grad, or off the CPU)."""
    if args or kwargs:
        raise d.unsupported(f, "Tensor.numpy(force=...)")
    if t.meta.requires_grad:
        raise UserException(RuntimeError("Can't call numpy() on Tensor that requires grad. Use "
                                         "tensor.detach().numpy() instead."))
    if t.device.type != "cpu":
        raise UserException(TypeError(f"can't convert {t.device.type} device type tensor to numpy. Use "
                                      "Tensor.cpu() to copy the tensor to host memory first."))
    return NdarrayVar(t)




# dtypes torch.from_numpy takes (in native byte order)
_FROM_NUMPY = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.complex64, np.complex128,
                                                np.int8, np.int16, np.int32, np.int64, np.uint8, np.bool_))


def wrap_input_array(plugin, d, a: np.ndarray, source: Source) -> Value | None:
    """An input NumPy array, traced as tensor code like an array made from a tensor: the graph gets
    ``torch.from_numpy(a)`` (the same memory), guarded as a tensor input; the value keeps the array's source,
    so returning it gives the array itself. None (an opaque object) for what from_numpy refuses or would
    warn about: another dtype or byte order, a read-only array, negative strides."""
    if a.dtype not in _FROM_NUMPY or not a.dtype.isnative or not a.flags.writeable \
            or any(st < 0 for st in a.strides) or a.ndim == 0:
        return None
    d.cg.hoist(source)
    d.guards.type_match(source, np.ndarray)
    t = plugin._wrap_tensor(d, torch.from_numpy(a), CallSource(torch.from_numpy, source, "_tensor"))
    v = NdarrayVar(t)
    v.source = source
    return v


@R.GETATTR.register(NdarrayVar)
def _nd_getattr(d, f, v: NdarrayVar, name: str) -> Value:
    if name in _META_ATTRS:
        return _nd_meta_attr(d, f, v, name)
    if name == "dtype":
        return Const(np.dtype(_tnp().ndarray(v.t.meta).dtype.name))
    if name in _ATTRS:
        return run_numpy(d, f, _attr_fn(name), name, [v], {})
    if name in _METHODS:
        from ..values import MethodOf
        return MethodOf(v, name)
    raise d.unsupported(f, f"ndarray.{name} on an array made from a tensor")


@R.METHOD.register(NdarrayVar)
def _nd_method(d, f, v: NdarrayVar, name: str, args, kwargs) -> Value:
    if name not in _METHODS:
        raise d.unsupported(f, f"ndarray.{name}() on an array made from a tensor (it may change the array)")
    if name in ("tolist", "item"):
        raise d.unsupported(f, f"ndarray.{name}() turns array values into Python values")
    if name == "__len__":
        return _nd_len(d, f, v)
    return run_numpy(d, f, _method_fn(name), f"ndarray_{name}", [v] + list(args), kwargs)


@R.BINARY.register(NdarrayVar)
def _nd_binary(d, f, op: str, a: Value, b: Value):
    from .ops import BINARY_FNS
    if op.endswith("=") and op not in ("==", "!=", "<=", ">="):
        if type(a) is NdarrayVar:
            raise d.unsupported(f, f"in-place {op} on an array made from a tensor (it writes the tensor)")
        op = op[:-1]
    return run_numpy(d, f, BINARY_FNS[op], f"op_{BINARY_FNS[op].__name__}", [a, b], {})


@R.COMPARE.register(NdarrayVar)
def _nd_compare(d, f, op: str, a: Value, b: Value):
    from .ops import COMPARE_FNS
    return run_numpy(d, f, COMPARE_FNS[op], f"cmp_{COMPARE_FNS[op].__name__}", [a, b], {})


@R.UNARY.register(NdarrayVar)
def _nd_unary(d, f, op: str, v: NdarrayVar):
    from .ops import UNARY_FNS
    return run_numpy(d, f, UNARY_FNS[op], f"op_{UNARY_FNS[op].__name__}", [v], {})


@R.GETITEM.register(NdarrayVar)
def _nd_getitem(d, f, v: NdarrayVar, k: Value) -> Value:
    return run_numpy(d, f, operator.getitem, "getitem", [v, k], {})


def _nd_meta_attr(d, f, v: NdarrayVar, name: str) -> Value:
    """``shape``, ``size``, ``strides``, ``nbytes``, ``ndim``, ``itemsize``: from the tensor's sizes, symbolic ones
    included (read from the tensor's symbolic sizes, never a value of the call that traced it)."""
    from .symsize import dim_value
    a = _tnp().ndarray(v.t.meta)
    if getattr(v.t, "sym", None) is None or name in ("ndim", "itemsize"):
        return d.from_python(getattr(a, name))
    shape = [dim_value(d, f, v.t, i) for i in range(v.t.meta.dim())]
    if name == "shape":
        return TupleVar(shape)
    if name == "strides":
        st = d.call_method(f, v.t, "stride", [], {})
        return TupleVar([d.binary(f, "*", x, Const(a.itemsize)) for x in d.unpack_all(f, st)])
    n = Const(1)
    for x in shape:
        n = d.binary(f, "*", n, x)
    return n if name == "size" else d.binary(f, "*", n, Const(a.itemsize))


@R.LEN.register(NdarrayVar)
def _nd_len(d, f, v: NdarrayVar):
    if v.t.meta.dim() == 0:
        raise UserException(TypeError("len() of unsized object"))
    from .symsize import dim_value
    return dim_value(d, f, v.t, 0)


@R.RECONSTRUCT.register(NdarrayVar)
def _nd_reconstruct(glue, v: NdarrayVar) -> str:
    return f"{glue.output_ref(v.t)}.numpy()" + ("[()]" if v.scalar else "")


def _probe(v: Value):
    """A small real operand of ``v``'s type and dtype (one element per dim, ones): what eager does with a
    tensor and an array depends on their types and dtypes only, so eager itself is asked on these."""
    if type(v) is TensorVar:
        m = v.meta
        grad = m.requires_grad and (m.dtype.is_floating_point or m.dtype.is_complex)
        return torch.ones([min(int(s), 1) for s in m.shape], dtype=m.dtype, requires_grad=grad)
    dt = np.dtype(_tnp().ndarray(v.t.meta).dtype.name)
    if v.scalar:
        return dt.type(1)
    return np.ones([min(int(s), 1) for s in v.t.meta.shape], dtype=dt)


def tensor_with_array(d, f, fn: Callable, name: str, a: Value, b: Value) -> Value:
    """``fn`` (an operator) on a tensor and an array, either side (issue 32). Torch's operators do not take an
    ndarray: ``Tensor.__add__`` declines it, NumPy computes with the tensor read as an array, and
    ``Tensor.__array_wrap__`` makes NumPy's result a tensor (its dtype NumPy's); the reflected side differs
    by operator (``ndarray + tensor`` raises, ``ndarray / tensor`` is a tensor, ``tensor < ndarray`` raises).
    Eager is run on small probes of the same types and dtypes: its error is raised as the user's, its result
    is computed in the graph the way NumPy computes it, and a dtype that differs from eager's is a graph break,
    never a different answer."""
    import warnings
    t = a if type(a) is TensorVar else b
    if t.device.type != "cpu":
        raise d.unsupported(f, f"{t.describe()} (not on the CPU) with a NumPy array in `{name}`")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pa, pb = _probe(a), _probe(b)
        try:
            eager = fn(pa, pb)
        except Exception as e:      # noqa: BLE001  (eager's own error for these operand types)
            raise UserException(type(e)(*e.args)) from None
    if type(eager) is not torch.Tensor or eager is pa or eager is pb:
        raise d.unsupported(f, f"`{name}` of a tensor and a NumPy array gives a {type(eager).__name__} or "
                               "changes an operand in place", "convert the array with torch.from_numpy first")
    fn = BINARY_FNS_PLAIN.get(fn, fn)
    if any(type(x) is NdarrayVar and x.scalar for x in (a, b)):
        # a NumPy scalar: torch reads it as a number; a 0-d tensor promotes like it for equal kinds only
        from .ops import record
        r = record(d, f, "call_function", fn, [x.t if type(x) is NdarrayVar else x for x in (a, b)], {})
    else:
        arrs = [NdarrayVar(x) if type(x) is TensorVar else x for x in (a, b)]
        r = run_numpy(d, f, fn, f"op_{fn.__name__}", arrs, {})
        r = r.t if type(r) is NdarrayVar else r
    if type(r) is not TensorVar or r.meta.dtype != eager.dtype:
        raise d.unsupported(f, f"`{name}` of a tensor and a NumPy array: eager gives {eager.dtype}, the trace "
                               f"{getattr(getattr(r, 'meta', None), 'dtype', type(r).__name__)}",
                            "convert the array with torch.from_numpy (and .to(dtype)) first")
    return r


# an in-place operator that eager does not run in place (the probe said so): its plain form
BINARY_FNS_PLAIN = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
                    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv,
                    operator.imod: operator.mod, operator.ipow: operator.pow, operator.imatmul: operator.matmul,
                    operator.ilshift: operator.lshift, operator.irshift: operator.rshift,
                    operator.iand: operator.and_, operator.ior: operator.or_, operator.ixor: operator.xor}
