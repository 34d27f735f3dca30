"""``torch.func`` transforms inside compiled code: ``vmap``, ``grad``, ``grad_and_value``, ``jacrev``, ``jacfwd``,
``hessian``, ``jvp``, ``vjp`` and ``functional_call``.

``torch.func.vmap(fn, ...)`` (and the other transforms that return a function) becomes a ``TransformVar``;
calling it traces ``fn`` into a subgraph (``subgraph.trace_body``: ``fn``'s ops are recorded and its guards
installed) and adds one node, ``apply_func_transform(body, *operands, *free)``, that applies the real
``torch.func`` transform to the subgraph. The transform runs where the graph runs: on meta tensors for the
node's metadata, on ember's fake tensors while AOT autograd traces the graph (functorch's batching and
differentiation happen above ember's dispatch modes, so the recorder sees the plain batched ATen ops, and
their backward where the program trains), and on real tensors under the ``eager`` backend.

``functional_call(module, params, args)`` needs no subgraph: the module's forward is inlined with the given
tensors standing for its parameters and buffers (the module value's attribute overlay).

What cannot be captured (a graph break inside the function, tensors as keyword arguments, symbolic sizes) is
an ``Unsupported`` that names the transform and the inner reason; the call then runs eagerly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.func as tf

from .. import rules as R
from ..values import DictVar, TupleVar, Value
from .graph import TensorVar
from .subgraph import Body, Slot, build, build_values, emit, flatten, hint_metas, meta_call, meta_skeleton, \
    saved_tensors_hooks_aside, tensor_leaves, trace_body

# name -> (the torch.func function, its option names in positional order after the function)
RETURNS_FUNCTION: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "vmap": (tf.vmap, ("in_dims", "out_dims", "randomness", "chunk_size")),
    "grad": (tf.grad, ("argnums", "has_aux")),
    "grad_and_value": (tf.grad_and_value, ("argnums", "has_aux")),
    "jacrev": (tf.jacrev, ("argnums", "has_aux", "chunk_size", "_preallocate_and_copy")),
    "jacfwd": (tf.jacfwd, ("argnums", "has_aux", "randomness")),
    "hessian": (tf.hessian, ("argnums",)),
}


@dataclass(frozen=True)
class HopSpec:
    """What ``apply_func_transform`` applies to a body: ``kind`` with ``opts`` to operands laid out as
    ``in_skel`` (``n_in`` tensors), the body's result laid out as ``out_skel``."""
    kind: str
    opts: tuple[tuple[str, Any], ...]
    in_skel: Any
    n_in: int
    out_skel: Any


def _body_fn(gm: torch.fx.GraphModule, spec: HopSpec, free: tuple) -> Callable:
    def fn(*args: Any) -> Any:
        return build(spec.out_skel, gm(*tensor_leaves(args, []), *free))
    return fn


def _apply_vjp(fn: Callable, args: Any, opts: dict) -> Any:
    *primals, cotangents = args
    return tf.vjp(fn, *primals, **opts)[1](cotangents)


def _vjp_out(fn: Callable, args: Any, opts: dict) -> Any:
    r = tf.vjp(fn, *args, **opts)
    return (r[0], r[2]) if opts.get("has_aux") else r[0]


APPLY: dict[str, Callable[[Callable, Any, dict], Any]] = {
    **{k: (lambda fn, args, o, t=t: t(fn, **o)(*args)) for k, (t, _) in RETURNS_FUNCTION.items()},
    "jvp": lambda fn, args, o: tf.jvp(fn, args[0], args[1], **o),
    "vjp_out": _vjp_out,
    "vjp_apply": _apply_vjp,
}


def structured(gm: torch.fx.GraphModule, *tensors: torch.Tensor) -> Any:
    spec: HopSpec = gm.ember_hop
    args = build(spec.in_skel, tensors[:spec.n_in])
    with saved_tensors_hooks_aside():
        return APPLY[spec.kind](_body_fn(gm, spec, tensors[spec.n_in:]), args, dict(spec.opts))


def apply_func_transform(gm: torch.fx.GraphModule, *tensors: torch.Tensor) -> tuple:
    """The graph node of a ``torch.func`` transform: ``gm.ember_hop`` says which, applied to the body ``gm``;
    returns the tensors of the result (the capture rebuilds its structure)."""
    return tuple(tensor_leaves(structured(gm, *tensors), []))


class TransformVar(Value):
    """``torch.func.<kind>(fn, **opts)``: a function that applies the transform when called."""
    __slots__ = ("kind", "fn", "opts")

    def __init__(self, kind: str, fn: Value, opts: dict[str, Any]):
        super().__init__(None)
        self.kind = kind
        self.fn = fn
        self.opts = opts

    def python_type(self):
        return type(_body_fn)

    def describe(self):
        return f"torch.func.{self.kind} of a function"


def _options(d, f, kind: str, names: tuple[str, ...], args: list[Value], kwargs: dict[str, Value]) -> dict:
    if len(args) > len(names):
        raise d.unsupported(f, f"torch.func.{kind} with {len(args)} positional options")
    opts = {n: d.as_python(f, v) for n, v in zip(names, args)}
    for k, v in kwargs.items():
        if k not in names:
            raise d.unsupported(f, f"torch.func.{kind} with keyword {k!r}", "check the transform's signature")
        opts[k] = d.as_python(f, v)
    return opts


def _make_transform(kind: str) -> Callable:
    _, names = RETURNS_FUNCTION[kind]

    def rule(d, f, args, kwargs):
        if not args and "func" not in kwargs:
            raise d.unsupported(f, f"torch.func.{kind}() without a function")
        kwargs = dict(kwargs)
        fn = args[0] if args else kwargs.pop("func")
        return TransformVar(kind, fn, _options(d, f, kind, names, list(args[1:]), kwargs))
    return rule


@R.CALL.register(TransformVar)
def _call_transform(d, f, v: TransformVar, args, kwargs):
    leaves: list[TensorVar] = []
    skel = flatten(d, f, TupleVar(list(args)), leaves, f"torch.func.{v.kind}")
    metas, syms = [x.meta for x in leaves], None
    if v.kind == "vmap":
        metas, syms = _per_example(d, f, v.opts.get("in_dims", 0), skel, leaves)
    st = d.torch
    st.transforms += (v.kind,)
    try:
        body = trace_body(d, f, v.fn, list(args), dict(kwargs), metas, f"torch.func.{v.kind}", syms)
    finally:
        st.transforms = st.transforms[:-1]
    return _apply(d, f, v.kind, v.opts, body, skel, leaves)


def _apply(d, f, kind: str, opts: dict, body: Body, skel: Any, leaves: list[TensorVar]) -> Value:
    """The node that applies ``kind`` to ``body``, and the value of its result."""
    spec = HopSpec(kind, tuple(opts.items()), skel, len(leaves), body.out_skel)
    gm = body.gm
    if getattr(gm, "ember_hop", None) not in (None, spec):    # one body, two transforms (vjp): share the graph
        gm = torch.fx.GraphModule(gm, gm.graph, class_name="EmberSubgraph")
    gm.ember_hop = spec
    free_metas = hint_metas(body.free)
    res = meta_call(d, f, structured, [gm] + [x.meta for x in leaves] + free_metas)
    out_metas: list[torch.Tensor] = []
    out_skel = meta_skeleton(res, out_metas)
    device = leaves[0].device if leaves else torch.device("cpu")
    outs = emit(d, f, apply_func_transform, [(gm, f"func_{kind}")], [x.node for x in leaves] + body.free,
                out_metas, device)
    return build_values(d, out_skel, outs)


def _per_example(d, f, in_dims: Any, skel: Any, leaves: list[TensorVar]) -> tuple[list[torch.Tensor], list]:
    """The metadata and symbolic sizes of one example of each vmapped leaf (``in_dims`` broadcast over the
    arguments)."""
    dims: list[Any] = [None] * len(leaves)
    if not _broadcast(in_dims, skel, dims):
        raise d.unsupported(f, f"torch.func.vmap: in_dims={in_dims!r} does not match the arguments' structure")
    out, syms = [], []
    for x, dim in zip(leaves, dims):
        if dim is None:
            out.append(x.meta)
            syms.append(x.sym)
        elif not isinstance(dim, int) or not -x.meta.dim() <= dim < max(x.meta.dim(), 1):
            raise d.unsupported(f, f"torch.func.vmap: in_dim {dim!r} for a tensor of {x.meta.dim()} dims")
        else:
            out.append(x.meta.select(dim, 0))
            rest = None if x.sym is None else x.sym[:dim % x.meta.dim()] + x.sym[dim % x.meta.dim() + 1:]
            syms.append(rest if rest and not all(isinstance(e, int) for e in rest) else None)
    return out, syms


def _broadcast(dims: Any, skel: Any, out: list) -> bool:
    if type(skel) is Slot:
        out[skel.index] = dims
        return dims is None or isinstance(dims, int)
    if dims is None or isinstance(dims, int):
        for s in _slots(skel):
            out[s.index] = dims
        return True
    if isinstance(skel, (tuple, list)) and isinstance(dims, (tuple, list)) and len(skel) == len(dims):
        return all(_broadcast(a, b, out) for a, b in zip(dims, skel))
    if isinstance(skel, dict) and isinstance(dims, dict) and set(skel) == set(dims):
        return all(_broadcast(dims[k], skel[k], out) for k in skel)
    return not _slots(skel)


def _slots(skel: Any) -> list[Slot]:
    if type(skel) is Slot:
        return [skel]
    if isinstance(skel, (tuple, list)):
        return [s for x in skel for s in _slots(x)]
    if isinstance(skel, dict):
        return [s for x in skel.values() for s in _slots(x)]
    return []


def _jvp(d, f, args, kwargs):
    if len(args) != 3:
        raise d.unsupported(f, "torch.func.jvp(func, primals, tangents) with other arguments")
    fn, primals, tangents = args
    opts = {k: d.as_python(f, v) for k, v in kwargs.items()}
    if type(primals) is not TupleVar or type(tangents) is not TupleVar:
        raise _user_error("jvp: Expected primals to be a tuple and tangents to be a tuple")
    leaves: list[TensorVar] = []
    skel = flatten(d, f, TupleVar([primals, tangents]), leaves, "torch.func.jvp")
    n_primal = len(_slots(skel[0]))
    body = trace_body(d, f, fn, list(primals.items), {}, [x.meta for x in leaves[:n_primal]], "torch.func.jvp")
    return _apply(d, f, "jvp", opts, body, skel, leaves)


def _user_error(msg: str) -> Exception:
    """Eager's own error for a misused transform, raised in the program."""
    from ..interpreter import UserException
    return UserException(RuntimeError(msg))


class VjpFnVar(Value):
    """The ``vjp_fn`` that ``torch.func.vjp`` returns: calling it adds a node that reapplies ``vjp``."""
    __slots__ = ("body", "primals", "opts")

    def __init__(self, body: Body, primals: list[Value], opts: dict):
        super().__init__(None)
        self.body = body
        self.primals = primals
        self.opts = opts

    def python_type(self):
        return type(_body_fn)

    def describe(self):
        return "the vjp_fn of torch.func.vjp"


def _vjp(d, f, args, kwargs):
    if not args:
        raise d.unsupported(f, "torch.func.vjp() without a function")
    fn, *primals = args
    opts = {k: d.as_python(f, v) for k, v in kwargs.items()}
    leaves: list[TensorVar] = []
    skel = flatten(d, f, TupleVar(list(primals)), leaves, "torch.func.vjp")
    body = trace_body(d, f, fn, list(primals), {}, [x.meta for x in leaves], "torch.func.vjp")
    out = _apply(d, f, "vjp_out", opts, body, skel, leaves)
    fn_v = VjpFnVar(body, list(primals), opts)
    if opts.get("has_aux"):
        return TupleVar([out.items[0], fn_v, out.items[1]])
    return TupleVar([out, fn_v])


@R.CALL.register(VjpFnVar)
def _call_vjp_fn(d, f, v: VjpFnVar, args, kwargs):
    if kwargs or len(args) != 1:
        raise d.unsupported(f, "calling torch.func.vjp's vjp_fn with other than one cotangent argument")
    leaves: list[TensorVar] = []
    skel = flatten(d, f, TupleVar(v.primals + [args[0]]), leaves, "torch.func.vjp")
    return _apply(d, f, "vjp_apply", v.opts, v.body, skel, leaves)


def _functional_call(d, f, args, kwargs):
    """``functional_call(module, params, args=(), kwargs=None)``: the module's forward with ``params``'
    tensors in place of its parameters and buffers (dotted names reach submodules)."""
    from .modules import NNModuleVar
    names = ("module", "parameter_and_buffer_dicts", "args", "kwargs", "tie_weights", "strict")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    module, params = bound.get("module"), bound.get("parameter_and_buffer_dicts")
    if type(module) is not NNModuleVar or params is None:
        raise d.unsupported(f, "torch.func.functional_call of something other than an nn.Module and a dict")
    dicts = list(params.items) if type(params) in (TupleVar,) else [params]
    if not all(type(x) is DictVar for x in dicts):
        raise d.unsupported(f, "torch.func.functional_call with parameters that are not dicts")
    call_args = bound.get("args", TupleVar([]))
    call_args = list(call_args.items) if type(call_args) is TupleVar else [call_args]
    call_kwargs = bound.get("kwargs")
    call_kwargs = dict(call_kwargs.items) if type(call_kwargs) is DictVar else {}
    saved = []
    try:
        for dct in dicts:
            for key, value in dct.items.items():
                if type(key) is not str:
                    raise d.unsupported(f, "torch.func.functional_call with a non-string parameter name")
                *path, name = key.split(".")
                owner = module
                for p in path:
                    owner = d.getattr(f, owner, p)
                if type(owner) is not NNModuleVar:
                    raise d.unsupported(f, f"torch.func.functional_call: {key!r} is not a module's attribute")
                saved.append((owner, name, owner.overlay.get(name, _MISSING)))
                owner.overlay[name] = value
        return d.call(f, module, call_args, call_kwargs)
    finally:
        for owner, name, old in reversed(saved):
            if old is _MISSING:
                owner.overlay.pop(name, None)
            else:
                owner.overlay[name] = old


_MISSING = object()

RULES: dict[Any, Callable] = {t: _make_transform(k) for k, (t, _) in RETURNS_FUNCTION.items()}
RULES.update({tf.jvp: _jvp, tf.vjp: _vjp, tf.functional_call: _functional_call})
if torch.vmap is not tf.vmap:
    RULES[torch.vmap] = _make_transform("vmap")
