"""Recording torch operations: functions, tensor methods and Python operators on tensors become FX nodes
whose metadata comes from running the same op on meta tensors."""
from __future__ import annotations

import functools
import operator
from typing import Any

import torch

from ..values import NUMPY_SCALARS, Const, ListVar, TupleVar, Value
from .symprop import final_sym, has_symbols, propagate
from . import symrules  # noqa: F401  (registers the shape rules in symprop.RULES)
from . import unbacked
from .asserts import check_no_mutation_after
from .symsize import COMPARE_FNS
from .graph import TensorVar, location_meta, meta_arg, node_arg, result_device, run_meta, tensors_in, wrap_result

# Ops that run in the autocast dtype / in float32 under autocast (the meta run must see the same casts).
AUTOCAST_LOWER = {"linear", "matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm", "conv1d", "conv2d", "conv3d",
                  "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "einsum", "mv", "prelu",
                  "scaled_dot_product_attention", "addmv", "addr", "chain_matmul", "multi_dot", "__matmul__",
                  "__rmatmul__", "_convolution", "convolution"}
AUTOCAST_FP32 = {"softmax", "log_softmax", "layer_norm", "group_norm", "cross_entropy", "nll_loss", "mse_loss",
                 "l1_loss", "smooth_l1_loss", "kl_div", "binary_cross_entropy_with_logits", "exp", "log", "pow",
                 "logsumexp", "cumsum", "cumprod", "norm", "cosine_similarity", "softplus", "rsqrt", "erfinv",
                 "acos", "asin", "cosh", "sinh", "tan", "log1p", "expm1", "reciprocal", "sum", "prod", "dist",
                 "cdist", "pdist", "renorm", "huber_loss", "batch_norm", "instance_norm"}


def _autocast(st, name: str, tensors: list[TensorVar]):
    """The dtype floating inputs are cast to for this op under the trace's autocast state, or None."""
    if not tensors or not st.autocast:
        return None
    dev = tensors[0].device.type
    dt = st.autocast_dtype(dev)
    if dt is None:
        return None
    if name in AUTOCAST_LOWER:
        return dt
    if name in AUTOCAST_FP32 and dev == "cuda":
        return torch.float32
    return None


def _cast_meta(x: Any, dt: torch.dtype) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(dt) if x.is_floating_point() else x
    if isinstance(x, (list, tuple)):
        return type(x)(_cast_meta(y, dt) for y in x)
    return x


def _opname(target: Any) -> str:
    return getattr(target, "__name__", "") or ""


def _is_float(v: Value) -> bool:
    return (type(v).__name__ == "OpaqueVar" and type(v.obj) is float) or type(v).__name__ == "FloatItemVar"


def weak_floats(d, args: list[Value], kwargs: dict[str, Value]) -> tuple[list[Value], dict[str, Value]]:
    """Python floats handed over at a graph break are float64 graph inputs; eager treats a Python float as a weak
    scalar, converted to the dtype the op computes in: the tensors' promoted dtype when floating or complex,
    else the default dtype. Each float argument becomes a 0-dim tensor of that dtype (one cast node per dtype)."""
    if not any(map(_is_float, args)) and not any(map(_is_float, kwargs.values())):
        return args, kwargs
    tens = tensors_in(list(args) + list(kwargs.values()))
    dt = functools.reduce(torch.promote_types, [t.meta.dtype for t in tens]) if tens else None
    if dt is None or not (dt.is_floating_point or dt.is_complex):
        dt = torch.get_default_dtype()

    def conv(v: Value) -> Value:
        return _float_as(d, v, dt) if _is_float(v) else v
    return [conv(a) for a in args], {k: conv(v) for k, v in kwargs.items()}


# ops whose number operands are weak scalars of tensor arithmetic: an unspecialized float argument stays a graph
# input there; any other op gets its value (a guard), since it may need a Python number (dropout's p, eps)
_SCALAR_OPERAND_OPS = {("method", m) for m in ("add", "sub", "mul", "div", "true_divide", "pow", "rsub")} | {
    torch.add, torch.sub, torch.mul, torch.div, torch.true_divide, torch.pow, torch.rsub, torch.where}


def _settle_floats(kind: str, target: Any, args: list[Value], kwargs: dict[str, Value]):
    def unspec(v):
        if type(v).__name__ == "FloatItemVar":
            return v.origin is not None
        if type(v).__name__ == "SymFloatVar":       # a NumPy float of symbolic ints (np.int64(n) / 2)
            return v.np_type is not None
        return type(v) in (TupleVar, ListVar) and any(map(unspec, v.items))
    if not any(map(unspec, args)) and not any(map(unspec, kwargs.values())):
        return args, kwargs
    key = ("method", target) if kind == "call_method" else target
    try:
        if key in _SCALAR_OPERAND_OPS or target in _ARITH_FNS:
            return args, kwargs
    except TypeError:       # an unhashable target
        pass

    def conv(v):
        if type(v) in (TupleVar, ListVar):
            return type(v)([conv(x) for x in v.items])
        if type(v).__name__ == "SymFloatVar":
            from .symfloat import settle_numpy
            return settle_numpy(v)
        return v.settle() if type(v).__name__ == "FloatItemVar" else v
    return [conv(a) for a in args], {k: conv(v) for k, v in kwargs.items()}


def _float_as(d, v: Value, dt: torch.dtype) -> TensorVar:
    st = d.torch
    node = v.t.node if type(v).__name__ == "FloatItemVar" else st.scalar_input(d, v)
    key = (node, dt)
    hit = st.scalar_casts.get(key)
    if hit is None:
        meta = node.meta["example_value"]
        if dt != meta.dtype:
            with node.graph.inserting_after(node):      # beside the root's input, also from a subgraph
                node = node.graph.call_method("to", (node, dt))
            meta = torch.empty((), dtype=dt, device="meta")
            node.meta["example_value"] = meta
            node.meta["ember_device"] = torch.device("cpu")
        hit = st.scalar_casts[key] = TensorVar(node, meta, torch.device("cpu"), torch.Tensor)
    return hit


def record(d, f, kind: str, target: Any, args: list[Value], kwargs: dict[str, Value],
           meta_fn: Any = None, device: torch.device | None = None) -> Value:
    """Add one node (call_function or call_method) and return its result values."""
    st = d.torch
    rg = kwargs.get("requires_grad")
    if kind == "call_function" and type(rg) is Const and rg.value:
        # a new leaf: a graph output is computed, never a leaf that requires grad (the AOT backends would
        # return it detached, and what depends on it without a grad_fn)
        raise d.unsupported(f, f"{_opname(target)}(..., requires_grad=True) makes a new leaf tensor in compiled "
                               "code", "create it outside the compiled function and pass it in")
    args, kwargs = _settle_floats(kind, target, list(args), dict(kwargs))
    args, kwargs = weak_floats(d, args, kwargs)
    nargs = tuple(node_arg(d, f, a) for a in args)
    nkwargs = {k: node_arg(d, f, v) for k, v in kwargs.items()}
    margs = [meta_arg(a) for a in args]
    mkwargs = {k: meta_arg(v) for k, v in kwargs.items()}
    if "device" in mkwargs and mkwargs["device"] is not None:
        mkwargs["device"] = "meta"
    tens = tensors_in(list(args) + list(kwargs.values()))
    dt = _autocast(st, target if kind == "call_method" else _opname(target), tens)
    if dt is not None:
        margs = [_cast_meta(x, dt) for x in margs]
        mkwargs = {k: _cast_meta(x, dt) for k, x in mkwargs.items()}
    if meta_fn is None and kind == "call_method":
        meta_fn = lambda s, *a, **k: getattr(s, target)(*a, **k)     # noqa: E731
        meta_fn.__name__ = target       # run_meta knows ops by name (graph._SCALAR_PARAM_OPS)
    elif meta_fn is None:
        meta_fn = target
    dd = unbacked.lookup(kind, target)
    dd = dd(d, f, args, kwargs) if dd is not None else None
    if dd is not None:      # an output size that depends on tensor values: an unbacked symbol (unbacked.py)
        out, sym = dd
    else:
        out = check_no_mutation_after(d, f, tens, lambda: run_meta(d, f, st, meta_fn, margs, mkwargs))
        sym = None
        if st.table is not None and has_symbols(args, kwargs):
            sym = propagate(d, f, kind, target, meta_fn, args, kwargs, out)
    if kind == "call_method":
        node = st.graph.call_method(target, nargs, nkwargs)
    else:
        node = st.graph.call_function(target, nargs, nkwargs)
    node.meta.update(location_meta(f))
    st.n_calls += 1
    if device is None:
        device = result_device(tens, kwargs)
    # An op that returns its input object (in-place ops, `contiguous()` of a contiguous tensor) returns the
    # same value: eager's `x.add_(1) is x` holds, and so must the trace's. The node stays in the graph (it
    # runs the mutation); later uses read the input's node, which the graph's order puts after it.
    for t in tens:
        if isinstance(out, torch.Tensor) and out is t.meta:
            node.meta["example_value"] = out
            node.meta["ember_device"] = t.device
            return t
    res = wrap_result(d, f, st, node, out, device)
    if sym is not None:
        _set_sym(res, sym)
    if dd is not None:
        unbacked.note_carriers(st, res)
    return res


def _set_sym(v: Value, sym) -> None:
    """Give the result's tensors their symbolic sizes (``symprop``), matched by position."""
    if type(v) is TensorVar:
        v.sym = final_sym(sym) if isinstance(sym, tuple) else None
        if isinstance(sym, tuple):
            v.node.meta["ember_shape"] = sym
    elif type(v).__name__ in ("TupleVar", "ListVar") and isinstance(sym, list):
        for x, s in zip(v.items, sym):
            _set_sym(x, s)


BINARY_FNS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
              "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "@": operator.matmul,
              "<<": operator.lshift, ">>": operator.rshift, "&": operator.and_, "|": operator.or_,
              "^": operator.xor, "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul,
              "/=": operator.itruediv, "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow,
              "@=": operator.imatmul, "<<=": operator.ilshift, ">>=": operator.irshift, "&=": operator.iand,
              "|=": operator.ior, "^=": operator.ixor}
UNARY_FNS = {"-": operator.neg, "+": operator.pos, "~": operator.invert, "abs": operator.abs}
_ARITH_FNS = frozenset(BINARY_FNS.values()) | frozenset(UNARY_FNS.values()) | frozenset(COMPARE_FNS.values())


def _plain_operand(v: Value) -> Value:
    """A NumPy scalar next to a tensor is the Python number it holds: torch reads it as one (its dtype does not
    take part in promotion), and the graph keeps a plain number."""
    if type(v) is Const and isinstance(v.value, NUMPY_SCALARS):
        return Const(v.value.item())
    return v


def binary(d, f, op: str, a: Value, b: Value):
    if not (type(a) is TensorVar or type(b) is TensorVar):
        return NotImplemented
    a, b = _plain_operand(a), _plain_operand(b)
    other = b if type(a) is TensorVar else a
    if type(other) is not TensorVar and not _tensor_operand(other):
        return NotImplemented
    fn = BINARY_FNS[op]
    if op.endswith("=") and type(a) is not TensorVar:      # x += t with x a number: not in place
        fn = BINARY_FNS[op[:-1]]
    return record(d, f, "call_function", fn, [a, b], {})


def _tensor_operand(v: Value) -> bool:
    if type(v).__name__ == "FloatItemVar":      # a float .item() kept in the graph (float_item.py)
        return True
    if type(v).__name__ == "OpaqueVar":
        return type(v.obj) in (int, float)
    if type(v) is Const:
        return isinstance(v.value, (int, float, bool, complex)) or v.value is None
    return type(v).__name__ in ("TupleVar", "ListVar", "SymNumVar", "SymFloatVar")


def compare(d, f, op: str, a: Value, b: Value):
    if not (type(a) is TensorVar or type(b) is TensorVar):
        return NotImplemented
    a, b = _plain_operand(a), _plain_operand(b)
    other = b if type(a) is TensorVar else a
    if type(other) is not TensorVar and not _tensor_operand(other):
        # Tensor's comparison declines it (NotImplemented): the other operand's reflected dunder (a user
        # __eq__) decides, and == / != fall back to identity, as in CPython
        return NotImplemented
    return record(d, f, "call_function", COMPARE_FNS[op], [a, b], {})


def unary(d, f, op: str, v: Value):
    return record(d, f, "call_function", UNARY_FNS[op], [v], {})
