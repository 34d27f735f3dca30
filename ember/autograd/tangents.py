"""Backward graphs for a call whose loss leaves some differentiable outputs unused.

Input: a partitioned backward graph (placeholders: the saved values, then ``num_tangents`` tangents, one per
differentiable output) and the set of tangents autograd did not send (``absent``). Output: a copy of the graph
in which every value that depends on absent tangents alone is dropped (it is zero: a backward is linear in its
tangents), a sum of such a value and a present one is the present one, and each gradient output that became
such a value is None (its shape, dtype and device returned, for the caller to give zeros where eager would).

Why: eager's autograd never runs the backward of a branch the loss does not reach. Computing it with a zero
tangent instead is not the same: ``0 * inf`` and ``0 / 0`` are NaN (an ``amin`` whose result was then changed
in place by ``relu_`` divides by a count of 0), and the NaN reaches the gradients of inputs the loss does use.
Invariant: a node that mixes such a value with a present tangent's other than by ``add``/``sub`` of the same
shape, dtype and strides keeps the value as computed (from a zero tangent), as before.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from ember.decomp.core import is_impure_node

aten = torch.ops.aten
_ADDS = {aten.add.Tensor, "add"}
_SUBS = {aten.sub.Tensor, "sub"}


def _kind(n: fx.Node) -> Any:
    t = n.target
    if isinstance(t, torch._ops.OpOverload):
        return t
    return getattr(t, "name", None)       # an ember prim


def _same_meta(a: fx.Node, b: fx.Node) -> bool:
    """Same shape, dtype and strides: ``a`` can stand for ``b`` (a later ``view`` of the sum needs its strides;
    ``tangent + x.transpose(1, 2)`` is laid out as the tangent, not as the transposed operand)."""
    va, vb = a.meta.get("val"), b.meta.get("val")
    return hasattr(va, "shape") and hasattr(vb, "shape") and tuple(va.shape) == tuple(vb.shape) \
        and va.dtype == vb.dtype and _strides(va) == _strides(vb)


def _strides(v: Any) -> Any:
    try:
        stride = v.stride() if callable(v.stride) else v.stride        # a tensor, or a prim value's layout
        return tuple(st for st, n in zip(stride, v.shape) if n != 1)     # size-1 dims: any stride
    except (RuntimeError, AttributeError, TypeError):      # sparse or otherwise strideless
        return None


def _sum_operand(n: fx.Node, zero: set) -> fx.Node | None:
    """For ``a + b`` (or ``a - b``) with one operand zero: the other, when it stands for the sum as it is."""
    k = _kind(n)
    if (k not in _ADDS and k not in _SUBS) or len(n.args) < 2 or n.kwargs.get("alpha", 1) != 1:
        return None
    a, b = n.args[0], n.args[1]
    if b in zero and isinstance(a, fx.Node) and a not in zero:
        keep = a
    elif a in zero and k in _ADDS and isinstance(b, fx.Node) and b not in zero:
        keep = b
    else:
        return None
    return keep if _same_meta(keep, n) else None


def without_tangents(bwd: fx.GraphModule, num_tangents: int, absent: frozenset) -> tuple[fx.GraphModule, dict]:
    """See the module docstring; returns the new graph and {gradient output index: (shape, dtype, device)}."""
    g = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    outs = g.graph_copy(bwd.graph, env)
    phs = [n for n in g.nodes if n.op == "placeholder"]
    tangents = phs[len(phs) - num_tangents:]           # the last placeholders, after the saved values
    zero = {t for k, t in enumerate(tangents) if k in absent}
    live = {t for k, t in enumerate(tangents) if k not in absent}      # depends on a present tangent
    repl: dict[fx.Node, fx.Node] = {}     # sums replaced by their present operand (the outputs are built last)
    for n in list(g.nodes):
        if n.op != "call_function":
            continue
        ins = n.all_input_nodes
        if not any(a in zero for a in ins):
            if any(a in live for a in ins):
                live.add(n)
            continue
        if not any(a in live for a in ins):
            zero.add(n)
            continue
        keep = _sum_operand(n, zero)
        if keep is not None:
            n.replace_all_uses_with(keep)
            repl[n] = repl.get(keep, keep)
        live.add(n)
    flat = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    flat = [repl.get(o, o) if isinstance(o, fx.Node) else o for o in flat]
    zeros = {}
    for j, o in enumerate(flat):
        if isinstance(o, fx.Node) and o in zero:
            v = o.meta.get("val")
            zeros[j] = (tuple(v.shape), v.dtype, v.device)
            flat[j] = None
    g.output(tuple(flat) if isinstance(outs, (tuple, list)) else flat[0])
    g.eliminate_dead_code(is_impure_node)
    gm = fx.GraphModule(bwd, g)
    gm.meta.update(bwd.meta)
    return gm, zeros


def saved_uses(bwd: fx.GraphModule, num_saved: int) -> list[frozenset]:
    """For each saved value (the first ``num_saved`` placeholders of the backward ``bwd``), the tangents
    (their positions among the placeholders after the saved values) of the gradient computations that read
    it: those whose value depends on both. A saved value whose tangents all stand for outputs whose gradient
    makes eager check a tensor's version reads, when read at all, only what eager's check also covers."""
    phs = [n for n in bwd.graph.nodes if n.op == "placeholder"]
    deps: dict[fx.Node, frozenset] = {t: frozenset((k,)) for k, t in enumerate(phs[num_saved:])}
    nodes = list(bwd.graph.nodes)
    for n in nodes:
        if n.op != "placeholder":
            deps[n] = frozenset().union(*(deps.get(a, frozenset()) for a in n.all_input_nodes))
    below: dict[fx.Node, frozenset] = {}       # tangents of the node and of everything computed from it
    for n in reversed(nodes):
        below[n] = deps.get(n, frozenset()).union(*(below.get(u, frozenset()) for u in n.users))
    return [below[p] for p in phs[:num_saved]]
