"""``torch.cond`` and ``torch.while_loop`` inside compiled code: graph nodes whose branches and loop body are
subgraphs (``subgraph.trace_body``), never a graph break and never specialized on the predicate's value.

``cond(pred, true_fn, false_fn, operands)`` with a tensor predicate becomes ``apply_cond(true, false, pred,
*operands, *free)`` (the autograd function ``_Cond``), which computes both branches and selects each output with
``torch.where``: the branches of ``torch.cond`` are functional and their outputs agree in shape and dtype, so the
selection is the taken branch's value, and the graph stays one straight-line graph that fuses like any other.
Its backward takes each branch's input gradients (``torch.func.vjp``) and selects those, so a non-finite value
inside the branch not taken (``sqrt`` of a negative, the domain the predicate guards) never reaches a gradient.
A flipped predicate takes the other branch with no recompile. The price: both branches run, in the forward and
again in the backward. A Python ``bool`` predicate is a constant: its branch is inlined, as ``torch.cond``
itself does.

``while_loop(cond_fn, body_fn, carried)`` becomes one call of the custom op ``ember_hop::while_loop`` (a real
loop at run time, over the subgraphs run as FX graphs): the trip count depends on tensor values, so the loop
cannot be traced through. Fake tensors get its outputs from the carried values' metadata (``torch.while_loop``
requires the body to keep them). Its gradient (as eager's and torch.compile's ``while_loop``) is a second custom
op, ``ember_hop::while_loop_backward``, that the backward graph calls: it runs the loop again from the saved
inputs keeping each iterate, then walks them backwards through the body's vector-Jacobian product
(``_loop_vjp``): the gradient of the carried inputs, and of the tensors the body reads (summed over the
iterations). The trip count is known only at run time, so the backward cannot be traced through either.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.fx as fx

from ..values import ListVar, TupleVar, Value
from .graph import TensorVar
from .subgraph import Body, build_values, emit, flatten, hint_metas, meta_call, saved_tensors_hooks_aside, \
    trace_body


# -- cond ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CondSpec:
    n_operands: int
    n_free_true: int


def _branches(true_gm: fx.GraphModule, false_gm: fx.GraphModule, tensors: tuple) -> tuple[tuple, tuple]:
    spec: CondSpec = true_gm.ember_cond
    ops, free = tensors[:spec.n_operands], tensors[spec.n_operands:]
    return true_gm(*ops, *free[:spec.n_free_true]), false_gm(*ops, *free[spec.n_free_true:])


class _Cond(torch.autograd.Function):
    """Both branches forward, each output selected by the predicate; backward: each branch's input gradients,
    selected by the predicate *after* its backward, so a non-finite value inside the branch not taken (``sqrt``
    of a negative) never reaches a gradient (a ``where`` over the outputs would multiply it by zero: NaN)."""
    generate_vmap_rule = True

    @staticmethod
    def forward(true_gm, false_gm, pred, *tensors):
        a, b = _branches(true_gm, false_gm, tensors)
        p = pred.reshape(())
        return tuple(torch.where(p, x, y) for x, y in zip(a, b))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.gms = inputs[:2]
        # a size the branches read from an enclosing tensor is an int operand: kept aside, not saved
        ctx.ints = {i: x for i, x in enumerate(inputs[2:]) if not isinstance(x, torch.Tensor)}
        ctx.save_for_backward(*[x for x in inputs[2:] if isinstance(x, torch.Tensor)])

    @staticmethod
    def backward(ctx, *grads):
        saved = iter(ctx.saved_tensors)
        pred, *tensors = [ctx.ints[i] if i in ctx.ints else next(saved) for i in range(len(ctx.needs_input_grad) - 2)]
        diff = [i for i, t in enumerate(tensors) if ctx.needs_input_grad[3 + i]]
        if not diff:
            return (None,) * (3 + len(tensors))
        p = pred.reshape(())
        per = []
        for which in (0, 1):        # torch.func.vjp, so that this also runs under torch.func transforms
            def branch(*xs, which=which):
                full = list(tensors)
                for i, x in zip(diff, xs):
                    full[i] = x
                return _branches(*ctx.gms, tuple(full))[which]
            with saved_tensors_hooks_aside():
                outs, vjp_fn = torch.func.vjp(branch, *[tensors[i] for i in diff])
                cot = tuple(torch.zeros_like(o) if g is None else g for o, g in zip(outs, grads))
                per.append(vjp_fn(cot))
        out = [None] * len(tensors)
        for k, i in enumerate(diff):
            out[i] = torch.where(p, per[0][k], per[1][k])
        return (None, None, None, *out)


def apply_cond(true_gm: fx.GraphModule, false_gm: fx.GraphModule, pred: torch.Tensor, *tensors: torch.Tensor
               ) -> tuple:
    """The graph node of ``torch.cond``: both branches, each output (and each input gradient) selected by the
    predicate."""
    return _Cond.apply(true_gm, false_gm, pred, *tensors)


def _operand_list(d, f, operands: Value | None, what: str) -> list[Value]:
    if operands is None:
        return []
    if type(operands) in (TupleVar, ListVar):
        return list(operands.items)
    raise d.unsupported(f, f"{what}: operands must be a tuple or list (got {operands.describe()})")


def _call_cond(d, f, args, kwargs):
    names = ("pred", "true_fn", "false_fn", "operands")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    if not {"pred", "true_fn", "false_fn"} <= set(bound) or set(bound) - set(names):
        raise d.unsupported(f, "torch.cond(pred, true_fn, false_fn, operands) with other arguments")
    pred = bound["pred"]
    operands = _operand_list(d, f, bound.get("operands"), "torch.cond")
    if type(pred) is not TensorVar:
        value = d.as_python(f, pred)        # a constant predicate: torch.cond specializes on it too
        return d.call(f, bound["true_fn"] if value else bound["false_fn"], operands, {})
    if pred.meta.numel() != 1 or pred.meta.dtype != torch.bool:
        raise d.unsupported(f, f"torch.cond with a predicate of shape {tuple(pred.meta.shape)} and dtype "
                               f"{pred.meta.dtype}", "pass a one-element bool tensor (or a Python bool)")
    leaves: list[TensorVar] = []
    flatten(d, f, TupleVar(operands), leaves, "torch.cond")
    metas = [x.meta for x in leaves]
    true = trace_body(d, f, bound["true_fn"], operands, {}, metas, "torch.cond's true_fn")
    false = trace_body(d, f, bound["false_fn"], operands, {}, metas, "torch.cond's false_fn")
    _check_same(d, f, true, false)
    true.gm.ember_cond = CondSpec(len(leaves), len(true.free))
    free = true.free + false.free
    free_metas = hint_metas(free)
    out = meta_call(d, f, apply_cond, [true.gm, false.gm, pred.meta] + metas + free_metas)
    outs = emit(d, f, apply_cond, [(true.gm, "cond_true"), (false.gm, "cond_false")],
                [pred.node] + [x.node for x in leaves] + free, list(out), pred.device)
    return build_values(d, true.out_skel, outs)


def _check_same(d, f, a: Body, b: Body) -> None:
    """torch.cond's contract: both branches return the same structure of tensors of one shape and dtype."""
    same = _shape(a.out_skel) == _shape(b.out_skel) and len(a.out_metas) == len(b.out_metas) and all(
        x.shape == y.shape and x.dtype == y.dtype for x, y in zip(a.out_metas, b.out_metas))
    if not same:
        desc = [[(tuple(m.shape), str(m.dtype)) for m in body.out_metas] for body in (a, b)]
        raise d.unsupported(f, f"torch.cond: the branches return different results ({desc[0]} vs {desc[1]})",
                            "return tensors of the same shapes and dtypes from both branches")


def _shape(skel: Any) -> Any:
    """The structure of a skeleton with its slots' positions (constants must agree too)."""
    if isinstance(skel, (tuple, list)):
        return (type(skel).__name__, tuple(_shape(x) for x in skel))
    if isinstance(skel, dict):
        return ("dict", tuple((k, _shape(v)) for k, v in skel.items()))
    return skel


# -- while_loop ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Loop:
    cond: fx.GraphModule
    body: fx.GraphModule
    n_carried: int
    n_free_cond: int
    carried_skel: Any
    ints: tuple[int, ...] = ()      # positions of the free values that are ints (sizes the bodies read)


_LOOPS: dict[int, Loop] = {}         # the op's loop number -> its subgraphs (this process's captures)
_NUMBERS = itertools.count()
_LIB = torch.library.Library("ember_hop", "DEF")
_LIB.define("while_loop(int loop, Tensor[] carried, Tensor[] free, SymInt[] ints) -> Tensor[]")


def _full(spec: Loop, free: list, ints: list) -> list:
    """The bodies' free values in order: the op's tensors with its ints (symbolic sizes) at their places."""
    out, t, i = [], iter(free), iter(ints)
    for k in range(len(free) + len(ints)):
        out.append(next(i) if k in spec.ints else next(t))
    return out


def _run_loop(loop: int, carried: list[torch.Tensor], free: list[torch.Tensor], ints: list) -> list[torch.Tensor]:
    spec = _LOOPS[loop]
    free = _full(spec, free, ints)
    fc, fb = free[:spec.n_free_cond], free[spec.n_free_cond:]
    vals = list(carried)
    while True:
        (c,) = spec.cond(*vals, *fc)
        if not bool(c):
            break
        vals = list(spec.body(*vals, *fb))
    # fresh tensors, as a functional op's outputs must be (zero trips: the inputs themselves)
    return [v.clone() if any(v is x for x in carried) else v for v in vals]


def _loop_meta(loop: int, carried: list[torch.Tensor], free: list[torch.Tensor], ints: list) -> list[torch.Tensor]:
    return [torch.empty_like(c) for c in carried]


_LIB.impl("while_loop", _run_loop, "CompositeExplicitAutograd")
_LIB.impl("while_loop", _loop_meta, "Meta")
_LIB.define("while_loop_backward(int loop, Tensor[] carried, Tensor[] free, SymInt[] ints, Tensor[] grads) "
            "-> Tensor[]")


def _iterates(spec: Loop, carried: list[torch.Tensor], free: list) -> list[list[torch.Tensor]]:
    """The carried values entering each trip of the loop (the forward, run again; ``free`` in full)."""
    fc, fb = free[:spec.n_free_cond], free[spec.n_free_cond:]
    out, vals = [], list(carried)
    while True:
        (c,) = spec.cond(*vals, *fc)
        if not bool(c):
            return out
        out.append(vals)
        vals = list(spec.body(*vals, *fb))


def _loop_vjp(loop: int, carried: list[torch.Tensor], free: list[torch.Tensor], ints: list,
              grads: list[torch.Tensor]) -> list[torch.Tensor]:
    """Gradients of the loop's carried inputs and free tensors (zeros for the condition's and for integer
    tensors) given the gradients of its results: the body's vector-Jacobian product at each iterate, last
    trip first."""
    spec = _LOOPS[loop]
    free = _full(spec, free, ints)
    fb = free[spec.n_free_cond:]
    diff_c = [i for i, c in enumerate(carried) if _differentiable(c)]
    diff_f = [i for i, t in enumerate(fb) if _differentiable(t)]
    g = [grads[i] for i in diff_c]
    g_free = [torch.zeros_like(fb[i]) for i in diff_f]
    for vals in reversed(_iterates(spec, carried, free)):
        with torch.enable_grad():
            xs = [v.detach().requires_grad_(i in diff_c) for i, v in enumerate(vals)]
            ws = [t.detach().requires_grad_(i in diff_f) if isinstance(t, torch.Tensor) else t
                  for i, t in enumerate(fb)]
            outs = spec.body(*xs, *ws)
            pairs = [(outs[i], gi) for i, gi in zip(diff_c, g) if outs[i].requires_grad]
            wrt = [xs[i] for i in diff_c] + [ws[i] for i in diff_f]
            got = torch.autograd.grad([o for o, _ in pairs], wrt, [gi for _, gi in pairs], allow_unused=True) \
                if pairs else [None] * len(wrt)
        g = [torch.zeros_like(xs[i]) if r is None else r for i, r in zip(diff_c, got[:len(diff_c)])]
        g_free = [a if r is None else a + r for a, r in zip(g_free, got[len(diff_c):])]
    gc = [torch.zeros_like(c) for c in carried]
    for i, gi in zip(diff_c, g):
        gc[i] = gi.clone() if any(gi is x for x in grads) else gi
    gf = [torch.zeros_like(t) if isinstance(t, torch.Tensor) else None for t in free]
    for i, gi in zip(diff_f, g_free):
        gf[spec.n_free_cond + i] = gi
    return gc + [x for x in gf if x is not None]


def _differentiable(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())


def _loop_vjp_meta(loop: int, carried: list[torch.Tensor], free: list[torch.Tensor], ints: list,
                   grads: list[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.empty_like(t) for t in list(carried) + list(free)]


_LIB.impl("while_loop_backward", _loop_vjp, "CompositeExplicitAutograd")
_LIB.impl("while_loop_backward", _loop_vjp_meta, "Meta")


def _setup_loop(ctx, inputs, output) -> None:
    loop, carried, free, ints = inputs
    ctx.loop, ctx.n, ctx.ints = loop, len(carried), list(ints)
    ctx.save_for_backward(*carried, *free)


def _loop_backward(ctx, grads):
    saved = ctx.saved_tensors
    carried, free = list(saved[:ctx.n]), list(saved[ctx.n:])
    gs = [torch.zeros_like(c) if g is None else g for c, g in zip(carried, grads)]
    out = torch.ops.ember_hop.while_loop_backward(ctx.loop, carried, free, ctx.ints, gs)
    out = [g if _differentiable(t) else None for g, t in zip(out, carried + free)]
    return None, out[:ctx.n], out[ctx.n:], None if ctx.ints else []      # the SymInt[] operand


torch.library.register_autograd("ember_hop::while_loop", _loop_backward, setup_context=_setup_loop)


def apply_while(cond_gm: fx.GraphModule, body_gm: fx.GraphModule, *tensors: torch.Tensor) -> tuple:
    """The graph node of ``torch.while_loop``: one call of ``ember_hop::while_loop`` on the loop's subgraphs."""
    number = cond_gm.ember_loop
    spec = _LOOPS[number]
    free = tensors[spec.n_carried:]
    return tuple(torch.ops.ember_hop.while_loop(
        number, list(tensors[:spec.n_carried]), [x for k, x in enumerate(free) if k not in spec.ints],
        [x for k, x in enumerate(free) if k in spec.ints]))


def _call_while(d, f, args, kwargs):
    names = ("cond_fn", "body_fn", "carried_inputs")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    if set(bound) != set(names):
        raise d.unsupported(f, "torch.while_loop(cond_fn, body_fn, carried_inputs) with other arguments")
    carried = _operand_list(d, f, bound["carried_inputs"], "torch.while_loop")
    leaves: list[TensorVar] = []
    skel = flatten(d, f, TupleVar(carried), leaves, "torch.while_loop")
    if len(leaves) != len(carried):
        raise d.unsupported(f, "torch.while_loop with carried values that are not tensors",
                            "carry tensors (torch.tensor(i) for a counter)")
    metas = [x.meta for x in leaves]
    cond = trace_body(d, f, bound["cond_fn"], carried, {}, metas, "torch.while_loop's cond_fn")
    body = trace_body(d, f, bound["body_fn"], carried, {}, metas, "torch.while_loop's body_fn")
    if len(cond.out_metas) != 1 or cond.out_metas[0].numel() != 1 or cond.out_metas[0].dtype != torch.bool:
        raise d.unsupported(f, "torch.while_loop: cond_fn must return a one-element bool tensor")
    same = len(body.out_metas) == len(metas) and all(
        a.shape == b.shape and a.dtype == b.dtype for a, b in zip(body.out_metas, metas))
    if not same:
        raise d.unsupported(f, "torch.while_loop: body_fn must return tensors with the carried values' shapes "
                               "and dtypes", "keep every carried tensor's shape and dtype across iterations")
    free = cond.free + body.free
    free_metas = hint_metas(free)
    number = next(_NUMBERS)
    ints = tuple(k for k, m in enumerate(free_metas) if not isinstance(m, torch.Tensor))
    _LOOPS[number] = Loop(cond.gm, body.gm, len(leaves), len(cond.free), skel, ints)
    cond.gm.ember_loop = number
    out = meta_call(d, f, apply_while, [cond.gm, body.gm] + metas + free_metas)
    outs = emit(d, f, apply_while, [(cond.gm, "while_cond"), (body.gm, "while_body")],
                [x.node for x in leaves] + free, list(out), leaves[0].device if leaves else torch.device("cpu"))
    return build_values(d, skel, outs)


# torch.while_loop is the public name (the same function as torch._higher_order_ops.while_loop, which the
# pipeline does not import)
RULES: dict[Any, Callable] = {torch.cond: _call_cond}
# the operator itself, ``torch.ops.higher_order.cond(pred, true_fn, false_fn, operands)``: what torch.cond's
# eager path hands to ``torch.compile`` (in a wrapper function), and what library code may call directly
_cond_op = getattr(getattr(torch.ops, "higher_order", None), "cond", None)
if _cond_op is not None:
    RULES[_cond_op] = _call_cond
if getattr(torch, "while_loop", None) is not None:
    RULES[torch.while_loop] = _call_while
