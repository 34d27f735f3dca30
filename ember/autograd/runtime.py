"""Runtime of AOT-compiled graphs: a ``torch.autograd.Function`` that runs a partitioned forward graph and,
on backward, the backward graph.

Input: the forward and backward graphs of a partitioned joint graph (``fwd(*primals) -> (*outputs, *saved)``,
``bwd(*saved, *tangents) -> one gradient per primal, None where none``) and the metadata below.
Output: a callable with the calling convention of the graph that was traced (flat inputs -> flat outputs).

Invariants:
- Forward outputs that do not require grad in the traced graph (detached outputs, integer outputs, outputs
  that do not depend on an input that requires grad) are marked non-differentiable, as eager would leave them.
- Tangents reach the backward graph in the order of the differentiable outputs; PyTorch materializes zeros for
  outputs the loss does not use, and a tangent whose layout differs from the traced one is made contiguous.
- A saved value that is an input about to be written back is saved as a copy of its old value.
- Mutated inputs (BatchNorm running stats, in-place updates of arguments or buffers) get their new value
  copied in after the function ran, in the caller's grad mode, so an input that eager would have given a
  gradient history gets one here too; outputs that alias an input (in the trace) are rebuilt as views of
  that input, so they share its memory as in eager.
- Double backward (``create_graph=True`` then differentiating a gradient) is not supported: the gradients
  carry a node that raises ``DoubleBackwardError`` when it is differentiated. First-order gradients with
  ``create_graph=True`` still work; only differentiating them again fails.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from ember.errors import EmberError


class DoubleBackwardError(EmberError, RuntimeError):
    """A gradient computed by an ember AOT graph was differentiated again."""


DOUBLE_BACKWARD_MSG = (
    "double backward through an ember aot graph is not supported; the backward graph was traced once and is "
    "not differentiable itself. Compute higher-order gradients eagerly (wrap the function in ember.disable or "
    "compile with backend='eager'), or take the gradient of a function that calls torch.autograd.grad inside "
    "the compiled region so the whole computation is traced.")


@dataclass
class AliasInfo:
    """Forward output ``output`` is a view of input ``input`` with these sizes, strides and storage offset."""

    output: int
    input: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    requires_grad: bool = True      # False: the traced output had no autograd history (``x.detach()``)
    # set for a view of another user output (an intermediate and its view, both returned): ``input`` is that
    # output's index, ``offset`` is relative to its start, and the view is rebuilt only where the compiled
    # base output has the traced size and strides (``base_layout``)
    base_layout: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    # symbolic layout (a graph with symbolic sizes): args -> (size, stride, offset from the input's start)
    dynamic: Callable[[Sequence[Any]], tuple] | None = None
    # made by a view op (``x[:]``, ``x.view_as(x)``): eager returns a new view even where it has the input's
    # own layout; otherwise (``return x``, ``x.add_(1)``) the input itself
    view: bool = False


@dataclass
class CompiledGraphs:
    """What the runtime needs to run one partitioned graph."""

    fwd: Callable[..., Any]
    bwd: Callable[..., Any]
    num_user_outputs: int                      # forward outputs the traced function returned
    write_backs: list[tuple[int, int]]          # (input index, forward output index) copied after the call
    num_saved: int
    diff_outputs: list[int]                     # user outputs that get a tangent, in tangent order
    non_diff_outputs: list[int] = field(default_factory=list)
    tangent_contiguous: list[bool] = field(default_factory=list)
    aliases: list[AliasInfo] = field(default_factory=list)
    grad_after: bool = True                     # grad mode the traced graph left behind
    diff_meta: list | None = None               # (shape, dtype, device) per diff output: zeros for unused ones
    grad_tangents: list = field(default_factory=list)   # per backward output: the tangents it depends on
    dynamic: bool = False                       # symbolic sizes: output shapes differ from call to call
    # the backward as an FX graph and its compiler: variants for calls whose loss leaves outputs unused
    bwd_graph: Any = None
    compile_bwd: Callable[[Any], Any] | None = None
    bwd_variants: dict = field(default_factory=dict)    # frozenset of absent tangents -> (bwd, zero outputs)
    multi_output_views: frozenset = frozenset()     # user outputs eager makes with split/unbind: kept views
    # inputs and user outputs sharing memory with a tensor eager's autograd would have saved: their versions
    # at the end of the call are checked before the backward (``check_versions``), each (index, mask): only
    # when one of the user outputs in the mask (bit k: output k) gets a gradient, as eager checks a saved
    # tensor only when the backward node that saved it runs
    version_inputs: list[tuple[int, int]] = field(default_factory=list)
    version_outputs: list[tuple[int, int]] = field(default_factory=list)
    # ``version_inputs`` split (``_split_versions``, on the first call, as ``aliased_saved``): the inputs the
    # forward also saves, for autograd's own check, and those the runtime checks itself
    version_split: tuple[list[int], list[tuple[int, int]]] | None = None
    aliased_saved: dict | None = None       # saved positions aliasing an input/output (``_aliased_saved``)
    unconnected: list[int] = field(default_factory=list)    # inputs passed detached (``aot._unconnected``)


class _NoDoubleBackward(torch.autograd.Function):
    """Identity on gradients whose own backward raises: marks where differentiating them again would go."""

    @staticmethod
    def forward(ctx: Any, n: int, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # tensors[:n] are the gradients; the rest are what they depend on (saved values and tangents that
        # require grad), inputs only so that the gradients require grad exactly where eager's would.
        return tuple(g.view_as(g) for g in tensors[:n])

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        raise DoubleBackwardError(DOUBLE_BACKWARD_MSG)


# A compiled graph runs with autocast off: its trace already holds autocast's casts, and an ATen op the graph
# calls (a matmul, a fallback) must compute in the dtypes the graph was compiled for (an fp32 matmul of
# scaled_dot_product_attention's math path would otherwise run in bf16 and hand a kernel compiled for fp32
# a bf16 tensor). What AOTAutograd does for torch.compile too.
_any_autocast = torch._C._is_any_autocast_enabled
_NoAutocast = torch._C._DisableAutocast


def _run(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` with autocast off (the context only where autocast is on: it costs on every call)."""
    if _any_autocast():
        with _NoAutocast():
            return fn(*args)
    return fn(*args)


class AotFunction(torch.autograd.Function):
    """``AotFunction.apply(graphs, *primals)`` runs ``graphs.fwd``; its backward runs ``graphs.bwd``."""

    @staticmethod
    def forward(ctx: Any, graphs: CompiledGraphs, *primals: Any) -> tuple[Any, ...]:
        outs = _run(graphs.fwd, *primals)
        n = graphs.num_user_outputs + len(graphs.write_backs)
        fwd_outs, saved = list(outs[:n]), list(outs[n:])
        if graphs.multi_output_views or any(isinstance(o, torch.Tensor) and o._is_view() for o in fwd_outs):
            fwd_outs = _unviewed(fwd_outs, primals, graphs.multi_output_views & frozenset(graphs.diff_outputs))
        if graphs.write_backs:     # an input about to be overwritten: the backward needs its old value
            mutated = {id(primals[i]) for i, _ in graphs.write_backs}
            saved = [s.clone() if id(s) in mutated else s for s in saved]
        aliased = graphs.aliased_saved
        if aliased is None:
            aliased = graphs.aliased_saved = _aliased_saved(graphs, saved, primals, fwd_outs)
        if aliased:
            saved = _keep_aliased(ctx, saved, aliased)
        if graphs.version_split is None:
            graphs.version_split = _split_versions(graphs, saved, primals, fwd_outs)
        tensor_pos = [i for i, s in enumerate(saved) if isinstance(s, torch.Tensor)]
        saving = [saved[i] for i in tensor_pos]
        if graphs.version_split[0] and _saved_hooks(False) is None:    # saved after the backward's own values
            saving += [primals[i] for i in graphs.version_split[0]]
        ctx.save_for_backward(*saving)
        ctx.saved_other = [None if isinstance(s, torch.Tensor) else s for s in saved]
        ctx.tensor_pos = tensor_pos
        ctx.graphs = graphs
        ctx.num_primals = len(primals)
        non_diff = [fwd_outs[i] for i in graphs.non_diff_outputs if isinstance(fwd_outs[i], torch.Tensor)]
        if non_diff:
            ctx.mark_non_differentiable(*non_diff)
        # zeros only for the differentiable outputs the loss does not use (the backward's tangents), not for
        # every output: a BatchNorm network has three non-differentiable running-stat outputs per layer
        ctx.set_materialize_grads(False)
        if graphs.diff_meta is None or graphs.dynamic:  # static graphs: the same on every call (guarded)
            graphs.diff_meta = [(fwd_outs[i].shape, fwd_outs[i].dtype, fwd_outs[i].device)
                                for i in graphs.diff_outputs]
        ctx.diff_meta = graphs.diff_meta
        if graphs.dynamic:      # a gradient the backward knows to be zeros has its primal's (symbolic) shape
            ctx.primal_shapes = [p.shape if isinstance(p, torch.Tensor) else None for p in primals]
        return tuple(fwd_outs)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        graphs: CompiledGraphs = ctx.graphs
        if all(grad_outputs[i] is None for i in graphs.diff_outputs):
            # no gradient reaches this node: autograd still calls it when a later compiled graph that takes
            # one of its outputs ran (that graph's node joins values eager keeps in separate nodes), but
            # eager's nodes for it never run, so neither its saved values (nor their versions) are read here
            return (None,) * (1 + ctx.num_primals)
        versions = getattr(ctx, "versions", None)
        if versions:
            check_versions(versions, _flowing(graphs, grad_outputs))
        bwd, zeros, used = _backward_for(graphs, grad_outputs)
        aliased = getattr(ctx, "aliased", None)
        if aliased:
            _check_aliased(aliased, used)
        saved = list(ctx.saved_other)
        for pos, t in zip(ctx.tensor_pos, ctx.saved_tensors):
            saved[pos] = t
        tangents = []
        g = None
        for k, i in enumerate(graphs.diff_outputs):
            g = grad_outputs[i]
            if g is None:
                shape, dtype, device = ctx.diff_meta[k]
                g = torch.zeros(shape, dtype=dtype, device=device)
            if graphs.tangent_contiguous and graphs.tangent_contiguous[k] and not g.is_contiguous():
                g = g.contiguous()
            tangents.append(g)
        if torch.is_grad_enabled():     # create_graph=True: the graph runs, but its gradients cannot be
            with torch.no_grad():       # differentiated again
                grads = list(_run(bwd, *saved, *tangents))
            pos = [i for i, g in enumerate(grads) if isinstance(g, torch.Tensor)]
            own = ctx.saved_tensors[:len(ctx.tensor_pos)]      # not the inputs saved for their check
            anchors = [t for t in [*own, *(a[1] for a in aliased or ())] + tangents
                       if isinstance(t, torch.Tensor) and t.requires_grad]
            if pos and anchors:
                wrapped = _NoDoubleBackward.apply(len(pos), *[grads[i] for i in pos], *anchors)
                for i, g in zip(pos, wrapped):
                    grads[i] = g
        else:
            call_list = getattr(bwd, "call_list", None)
            if call_list is not None:
                # the compiled backward frees each saved tensor after its last use (as eager's autograd does):
                # it gets the only references (a list it empties), and autograd drops its own now, unless the
                # graph is retained for another backward
                args = saved + tangents
                del saved, tangents, g
                ctx.maybe_clear_saved_tensors()
                grads = list(_run(call_list, args))
            else:
                grads = list(_run(bwd, *saved, *tangents))
        for j, (shape, dtype, device) in zeros.items():
            if not all(type(d) is int for d in shape):      # symbolic sizes (sympy): this call's primal's
                shapes = getattr(ctx, "primal_shapes", None)
                shape = shapes[j] if shapes is not None else tuple(int(d) for d in shape)
            grads[j] = torch.zeros(shape, dtype=dtype, device=device)
        if versions or aliased:
            _release_versions(ctx)
        return (None, *_unreached(graphs, grad_outputs, grads))


def _release_versions(ctx: Any) -> None:
    """After a backward that does not retain the graph, drop the tensors kept for the version checks
    (``ctx.versions``, ``ctx.aliased``), as autograd drops the saved tensors: the node lives as long as the
    loss does, and the outputs it held (a KV cache, a forward output the backward read) stayed alive after the
    user dropped them (CUDA graphs then re-recorded every training step, their outputs counted as still in
    use). ``maybe_clear_saved_tensors`` frees the saved tensors unless the running backward keeps the graph;
    the same flag, read from the engine, tells whether it did (reading ``ctx.saved_tensors`` to find out
    raised and caught a C++ error on every training step: 30-45 us each)."""
    ctx.maybe_clear_saved_tensors()
    if not _graph_kept():
        ctx.versions = ctx.aliased = None


_graph_kept = torch._C._autograd._get_current_graph_task_keep_graph


def _unviewed(outs: list, primals: tuple, keep: frozenset) -> list:
    """Outputs that the compiled forward returns as views of its own buffers (``as_strided`` of a larger
    value), detached: autograd marks a view returned by a custom Function with several outputs as one that
    must not be modified in place ("Output 0 of AotFunction is a view and is being modified inplace"), while
    eager's caller may update it (``t1[0] = 1`` after a graph break). ``detach`` keeps the memory and the
    version counter (so a saved value sharing that memory still sees the update) and drops the view mark.
    Views of the inputs are left as they are (rebuilt as such views by ``finish``). The outputs in ``keep``,
    which eager makes with a multi-output view op (``aliasing.multi_output_views``), are returned as views, so
    that autograd refuses their in-place update as eager's does."""
    ins = {id(p) for p in primals if isinstance(p, torch.Tensor)}
    ins |= {id(p._base) for p in primals if isinstance(p, torch.Tensor) and p._base is not None}
    done: dict[int, torch.Tensor] = {}
    out = []
    for k, o in enumerate(outs):
        if k in keep:
            o = o if o._is_view() else o.view_as(o)
        elif isinstance(o, torch.Tensor) and o._is_view() and id(o._base) not in ins:
            o = done.setdefault(id(o), o.detach())
        out.append(o)
    return out


def _backward_for(graphs: CompiledGraphs, grad_outputs: tuple) -> tuple[Any, dict, frozenset | None]:
    """The backward to run: ``graphs.bwd``, or where the loss left outputs unused, a variant without what
    depends on their tangents alone (``ember.autograd.tangents``), compiled once per such pattern; with the
    positions of the saved values it reads (None: all)."""
    absent = frozenset(k for k, i in enumerate(graphs.diff_outputs) if grad_outputs[i] is None)
    if not absent or graphs.bwd_graph is None:
        return graphs.bwd, {}, None
    hit = graphs.bwd_variants.get(absent)
    if hit is None:
        from ember.autograd.tangents import without_tangents
        gm, zeros = without_tangents(graphs.bwd_graph, len(graphs.diff_outputs), absent)
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"][:graphs.num_saved]
        used = frozenset(k for k, n in enumerate(phs) if n.users)
        hit = graphs.bwd_variants[absent] = (graphs.compile_bwd(gm) if graphs.compile_bwd else gm, zeros, used)
    return hit


# -- saved values that are the caller's tensors ---------------------------------------------------------------
# The compiled forward may save an input or an output (or a view of one), and the caller may modify it in place
# after the call, where eager raises nothing: eager checks only what its own nodes saved, and only in the nodes
# a gradient reaches (``check_versions``). ``save_for_backward`` would make autograd check it whenever this
# backward runs. So, for a value sharing memory with what eager saved, the saved tensor is its ``.data`` (the
# same memory under a version counter of its own: autograd's check passes) and its version is checked here
# instead, only where the backward that runs (the variant for the absent tangents) reads it. Under the user's
# saved-tensor hooks autograd checks no version: the hooks get the tensor itself, and only this check runs.
# A value eager did not save (the partitioner recomputes ``tanh(x)`` from the input ``x`` where eager saved the
# tanh): a later in-place change of it is none of eager's business, so the forward saves a copy of it.
_saved_hooks = torch._C._autograd._top_saved_tensors_default_hooks


def _aliased_saved(graphs: CompiledGraphs, saved: list, primals: Sequence[Any], outs: Sequence[Any]
                   ) -> dict[int, tuple[bool, bool]]:
    """Saved position -> ``(is an output's, eager saved its memory)`` for the saved values sharing memory with
    an input or a forward output, except those eager checks whenever this backward runs. Computed on the first call: which saved values alias the graph's inputs and
    outputs is a property of the compiled graph (the guards fix which inputs share memory)."""
    keys = {_storage(p): False for p in primals}
    keys.update({_storage(o): True for o in outs})
    keys.pop(None, None)
    eager: dict[Any, int] = {}      # storage -> mask of the outputs whose gradient makes eager check it
    for k, m in [(_storage(primals[i]), m) for i, m in graphs.version_inputs] + \
            [(_storage(outs[j]), m) for j, m in graphs.version_outputs]:
        eager[k] = eager.get(k, 0) | m
    every = _flowing(graphs, outs)      # all differentiable outputs
    found = {i: _storage(s) for i, s in enumerate(saved)}
    # eager checks it whenever any gradient flows: autograd's own check on the saved tensor is eager's (the
    # common case, a weight: no cost per call)
    found = {i: k for i, k in found.items() if k in keys and eager.get(k, 0) & every != every}
    reads = _saved_reads(graphs) if any(k in eager for k in found.values()) else []
    # eager's saved memory, but read for gradients eager computes without checking it (eager saved a view
    # of ``x`` for ``amax(x)``; the backward recomputes ``tanh(x)`` from ``x`` where eager saved the tanh):
    # a copy
    return {i: (keys[k], k in eager and i < len(reads) and reads[i] & ~eager[k] == 0)
            for i, k in found.items()}


def _saved_reads(graphs: CompiledGraphs) -> list[int]:
    """Per saved value, the mask of the user outputs whose gradient reads it (bit k: output k)."""
    from ember.autograd.tangents import saved_uses
    if graphs.bwd_graph is None:
        return []
    return [sum(1 << graphs.diff_outputs[t] for t in ts if t < len(graphs.diff_outputs))
            for ts in saved_uses(graphs.bwd_graph, graphs.num_saved)]


def _storage(t: Any) -> Any:
    try:
        return t.untyped_storage()._cdata if isinstance(t, torch.Tensor) else None
    except (RuntimeError, NotImplementedError):     # no storage (sparse, nested)
        return None


def _copy_keeping_layout(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with its sizes and strides (the backward was compiled for them). A tensor that overlaps
    itself (an expanded one) cannot be ``copy_``-ed into: its storage span is copied instead."""
    if not any(st == 0 and n > 1 for n, st in zip(t.size(), t.stride())):
        return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device).copy_(t)
    span = 1 + sum((n - 1) * abs(st) for n, st in zip(t.size(), t.stride())) if t.numel() else 0
    flat = t.as_strided((span,), (1,), t.storage_offset()).clone()
    return flat.as_strided(t.size(), t.stride(), 0)


def _keep_aliased(ctx: Any, saved: list, aliased: dict[int, tuple[bool, bool]]) -> list:
    """``saved`` with the values aliasing an input or output that eager saved behind ``.data`` (without
    saved-tensor hooks), those eager did not save copied; ``ctx.aliased``: ``(position, tensor, version)`` of
    each checked one (an output detached: the node holding its own output is a reference cycle; an input as it
    is, for the gradients' ``requires_grad`` under create_graph)."""
    hooks = _saved_hooks(False) is not None
    kept, saved = [], list(saved)
    for i, (out, eager) in aliased.items():
        t = saved[i]
        if not isinstance(t, torch.Tensor):
            continue
        if not eager:
            # grad mode is off inside the Function's forward: no ``torch.no_grad()`` (40 us a call)
            saved[i] = _copy_keeping_layout(t.detach())
            if not out and t.requires_grad:
                kept.append((i, t, None))       # not checked: for ``requires_grad`` under create_graph only
            continue
        kept.append((i, t.detach() if out else t, t._version))
        if not hooks:
            saved[i] = t.data
    ctx.aliased = kept
    return saved


def _check_aliased(aliased: list, used: frozenset | None) -> None:
    for pos, t, version in aliased:
        if version is not None and t._version != version and (used is None or pos in used):
            raise modified_error(t, version)    # the backward would read a value changed since the call


def _unreached(graphs: CompiledGraphs, grad_outputs: tuple, grads: list) -> list:
    """``grads`` with None for each input gradient that depends only on outputs the loss did not use: eager's
    autograd sends nothing there, so such an input's ``.grad`` stays None (a zero tangent gave zeros)."""
    missing = {k for k, i in enumerate(graphs.diff_outputs) if grad_outputs[i] is None}
    if missing and graphs.grad_tangents:
        for j, deps in enumerate(graphs.grad_tangents):
            if deps and deps <= missing and j < len(grads):
                grads[j] = None
    return grads


def tangent_dependencies(joint: Any, num_inputs: int, diff_outputs: Sequence[int]) -> list[frozenset]:
    """For each primal of the functional joint graph ``joint`` (before decomposition), the indices of the
    tangents (positions in ``diff_outputs``) whose forward output it reaches through values that require grad.

    This is eager's autograd connectivity, not the backward's data flow: ``t = x * 2; t.zero_()`` has a
    gradient that is zeros whatever the tangent, yet eager's ``x.grad`` becomes zeros when the loss uses ``t``
    (decomposed backward graphs drop such tangents, which made the gradient None). An edge through a value
    that does not require grad (``detach``, integer results) carries nothing, as in eager."""
    reach: dict[Any, frozenset] = {}
    written: dict[int, frozenset] = {}      # storage -> the reach in-place writes gave it (a graph with mutations)

    def reach_of(a: Any) -> frozenset:
        r = reach.get(a, frozenset())
        key = _storage_key(a)
        return r | written[key] if key in written else r

    k = 0
    for n in joint.graph.nodes:
        if n.op == "placeholder":
            reach[n] = frozenset((k,)) if k < num_inputs else frozenset()
            k += 1
        elif n.op == "output":
            outs = list(n.args[0])
            per_primal: list[set] = [set() for _ in range(num_inputs)]
            for t, i in enumerate(diff_outputs):
                for p in reach_of(outs[i]) if hasattr(outs[i], "op") else ():
                    per_primal[p].add(t)
            return [frozenset(d) for d in per_primal]
        else:
            v = n.meta.get("val")
            ins = frozenset().union(*(reach_of(a) for a in n.all_input_nodes))
            reach[n] = frozenset() if isinstance(v, torch.Tensor) and not v.requires_grad else ins
            for a in _written_inputs(n):   # ``t.narrow(0, 3, 1).add_(w)``: t, and every view of it, reaches w's
                key = _storage_key(a)
                if key is not None and ins:
                    written[key] = written.get(key, frozenset()) | ins
    return []


def _storage_key(n: Any) -> int | None:
    v = getattr(n, "meta", {}).get("val")
    meta = getattr(v, "_meta", None)
    return meta.untyped_storage()._cdata if isinstance(meta, torch.Tensor) else None


def _written_inputs(n: Any) -> list:
    """The argument nodes an in-place ATen op writes (its schema's mutable arguments)."""
    if not isinstance(n.target, torch._ops.OpOverload):
        return []
    return [a for a, arg in zip(n.args, n.target._schema.arguments)
            if arg.alias_info is not None and arg.alias_info.is_write and hasattr(a, "op")]


def run_training(graphs: CompiledGraphs, args: Sequence[Any]) -> list[Any]:
    """Run ``graphs`` on ``args`` through ``AotFunction``; write mutated inputs back; return user outputs."""
    primals = args
    if graphs.unconnected:
        primals = list(args)
        for i in graphs.unconnected:
            if isinstance(primals[i], torch.Tensor):
                primals[i] = primals[i].detach()
    if torch.is_grad_enabled():
        outs = list(AotFunction.apply(graphs, *primals))
    else:       # the graph enables grad itself: which outputs are differentiable was decided by the trace
        with torch.enable_grad():
            outs = list(AotFunction.apply(graphs, *primals))
    # under saved-tensor hooks autograd checks no saved tensor's version: every input is checked here
    inputs = graphs.version_split[1]
    if graphs.version_inputs and _saved_hooks(False) is not None:
        inputs = graphs.version_inputs
    node = _node_of(graphs, outs) if inputs or graphs.version_outputs else None
    finish(graphs.write_backs, graphs.aliases, args, outs)
    if graphs.multi_output_views and graphs.aliases:
        _mark_multi_output_views(graphs, outs)
    if node is not None:
        _record_versions(node, graphs, inputs, args, outs)
    return outs[:graphs.num_user_outputs]


# -- version checks -------------------------------------------------------------------------------------------
# Eager's autograd raises at backward when a tensor it saved was modified in place after it was saved. The
# compiled forward saves other values (the partitioner recomputes, the kernels return fresh buffers), so the
# inputs and outputs that share memory with what eager saved (``trace.SavedVersions``) are checked here: their
# versions at the end of the call (after write-backs, as eager's at the end of the function) must be unchanged
# when the backward runs. A modification inside the function itself fails the trace the same way, and that
# graph runs with eager autograd.
MODIFIED_MSG = ("one of the variables needed for gradient computation has been modified by an inplace "
                "operation: [{what}] is at version {now}; expected version {expected} instead. Hint: a tensor "
                "that the compiled function's backward needs (an input or output of it) was modified in place "
                "after the call; modify a clone instead, or call backward before modifying it.")


def modified_error(t: torch.Tensor, expected: int) -> RuntimeError:
    """The error eager's autograd raises for a saved tensor ``t`` modified in place since version ``expected``."""
    what = f"{t.dtype} {list(t.shape)}"
    return RuntimeError(MODIFIED_MSG.format(what=what, now=t._version, expected=expected))


def check_versions(versions: Sequence[tuple[torch.Tensor, int, int]], flowing: int) -> None:
    """Raise eager's error for a ``(tensor, version, mask)`` whose version changed, where a gradient flows
    into an output of ``mask`` (``flowing``: the mask of the outputs whose gradient is defined)."""
    for t, v, mask in versions:
        if mask & flowing and t._version != v:
            raise modified_error(t, v)


def _split_versions(graphs: CompiledGraphs, saved: list, primals: Sequence[Any], outs: Sequence[Any]
                    ) -> tuple[list[int], list[tuple[int, int]]]:
    """``graphs.version_inputs`` split into the inputs autograd checks as eager does, and the rest, which the
    runtime records after the call and checks before the backward (``check_versions``). Autograd checks a saved
    tensor whenever this backward runs, as eager checks an input whose mask holds every output: such an input
    the forward saves itself, or a view of it (sharing its version counter), needs nothing more; one it does not
    save (a layer norm's bias, which eager saves and the compiled backward does not read) is returned in the
    first list, to be saved too (saving a reference costs less than a record per call and a check per backward:
    nanoGPT's 26 weights and biases cost 14 us a step that way). An input the function writes back is left to
    the runtime (its version moves after the forward saved it). A property of the compiled graph (its saved
    values are the same inputs, or views of them, on every call), so computed on the first call."""
    every = _flowing(graphs, outs)
    ids = set()
    for s in saved:
        if isinstance(s, torch.Tensor):
            ids.add(id(s))
            if s._base is not None:
                ids.add(id(s._base))
    mutated = {i for i, _ in graphs.write_backs}
    extra, left = [], []
    for i, m in graphs.version_inputs:
        p = primals[i]
        if m & every != every or i in mutated or not isinstance(p, torch.Tensor):
            left.append((i, m))
        elif id(p) not in ids and (p._base is None or id(p._base) not in ids):
            extra.append(i)
    return extra, left


def _flowing(graphs: CompiledGraphs, grad_outputs: tuple) -> int:
    """Bit mask of the user outputs whose gradient reached this backward (None: the loss does not use it)."""
    return sum(1 << i for i in graphs.diff_outputs if grad_outputs[i] is not None)


def _node_of(graphs: CompiledGraphs, outs: list[Any]) -> Any:
    """The ``AotFunction`` node (its ctx) of this call, from an output it made (none: no backward will run)."""
    for i in graphs.diff_outputs:
        node = getattr(outs[i], "grad_fn", None)
        if getattr(node, "graphs", None) is graphs:
            return node
    return None


def _record_versions(node: Any, graphs: CompiledGraphs, inputs: Sequence[tuple[int, int]], args: Sequence[Any],
                     outs: list[Any]) -> None:
    # outputs through ``detach()`` (same version counter): the node holding its own output is a cycle
    node.versions = ([(args[i], args[i]._version, m) for i, m in inputs]
                     + [(outs[k].detach(), outs[k]._version, m) for k, m in graphs.version_outputs
                        if isinstance(outs[k], torch.Tensor)])


def finish(write_backs: Sequence[tuple[int, int]], aliases: Sequence[AliasInfo], args: Sequence[Any],
           outs: list[Any]) -> None:
    """Copy each mutated input's new value in (caller's grad mode), then rebuild outputs that alias inputs."""
    stored = []
    for i, j in write_backs:
        dst, src = args[i], outs[j]
        if src is dst or _same_memory(src, dst):       # the compiled graph stored the new value in place
            stored.append(dst)
            continue
        if 0 in dst.stride():
            dst, src = _unexpanded(dst, src)
        if dst.requires_grad and not src.requires_grad and dst.is_leaf:
            with torch.no_grad():        # eager mutates such a leaf under no_grad too (or fails before)
                dst.copy_(src)
        else:
            dst.copy_(src)
    if stored:
        _bump_versions(stored)
    for a in aliases:
        if a.base_layout is not None:
            _rebuild_output_view(a, outs)
            continue
        # a view with no autograd history of an input that has one (``x.detach()[0]``) is a view of a detached
        # alias; a view of an input without history stays its view, which autograd links to the input's later
        # history as eager's (an in-place update of the input after a graph break)
        base = args[a.input] if a.requires_grad or not args[a.input].requires_grad else args[a.input].detach()
        if a.dynamic is not None:
            size, stride, offset = a.dynamic(args)
            outs[a.output] = base.as_strided(size, stride, base.storage_offset() + offset)
            continue
        if not a.view and tuple(base.shape) == a.size and tuple(base.stride()) == a.stride \
                and base.storage_offset() == a.offset:
            outs[a.output] = base
        else:
            outs[a.output] = base.as_strided(a.size, a.stride, a.offset)


_MULTI_OUTPUT = torch._C._autograd.CreationMeta.MULTI_OUTPUT_NODE


def _mark_multi_output_views(graphs: CompiledGraphs, outs: list[Any]) -> None:
    """An output that eager makes with a multi-output view op (``split(x)[0]``) and ``finish`` rebuilt as a view
    of an input or of another output (``as_strided``, an ordinary view) is marked as such a view again, so
    that autograd refuses its in-place update as eager's does ("Output 0 of ... is a view and is being modified
    inplace. This view is the output of a function that returns multiple views"), also after a graph break.
    Also without autograd history (a chunk of an input that does not require grad): an in-place update of its
    base with grad (after a graph break) makes eager refuse the view's later use ("A view was created in
    no_grad mode and its base ... has been modified inplace with grad mode enabled. This view is the output of
    a function that returns multiple views"), and ember's view must be refused the same way."""
    for a in graphs.aliases:
        o = outs[a.output] if a.output < len(outs) else None
        if a.output in graphs.multi_output_views and isinstance(o, torch.Tensor) \
                and o._is_view() and torch._C._autograd._get_creation_meta(o) != _MULTI_OUTPUT:
            torch._C._autograd._set_creation_meta(o, _MULTI_OUTPUT)


def _rebuild_output_view(a: AliasInfo, outs: list[Any]) -> None:
    """Output ``a.output`` as the view of output ``a.input`` that it was in the trace (generated code returns
    each output in its own buffer; eager's caller may mutate one and read the other). A view of a base that
    does not require grad stays an autograd view of it, as eager's: an update of the view with a value that
    requires grad (``v.add_(y)`` after a graph break) then gives the base a ``CopySlices`` (made from
    ``base.detach()``, ``t``'s gradient missed ``y``'s part)."""
    base = outs[a.input]
    if not isinstance(base, torch.Tensor) or (tuple(base.shape), tuple(base.stride())) != a.base_layout:
        return
    if not a.requires_grad and base.requires_grad:
        base = base.detach()
    outs[a.output] = base.as_strided(a.size, a.stride, base.storage_offset() + a.offset)


def _unexpanded(dst: torch.Tensor, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An expanded input that the graph updated (``x.zero_()`` on ``y.expand(3, 4)``, which eager allows):
    ``copy_`` into it raises, as several of its elements are one memory location. Each location is written
    once, with ``src``'s last element along each stride-0 dim (the one eager's loop writes last)."""
    for d, (n, st) in enumerate(zip(dst.shape, dst.stride())):
        if st == 0 and n > 1:
            dst, src = dst.narrow(d, n - 1, 1), src.narrow(d, n - 1, 1)
    return dst, src


def _same_memory(a: Any, b: Any) -> bool:
    """``a`` is ``b`` seen through another tensor object (an autograd Function returns its inputs so). The
    strides of dims of size 1 address nothing and may differ (the compiled forward returns an input it stored
    into with the traced layout's strides there): comparing them made ``finish`` copy a tensor onto itself
    through other strides, which ``copy_`` refuses as overlapping memory (fuzz seeds 432322, 434662)."""
    return (isinstance(a, torch.Tensor) and a.data_ptr() == b.data_ptr() and a.numel() > 0
            and a.dtype == b.dtype and a.shape == b.shape and a.device == b.device
            and all(p == q for n, p, q in zip(a.shape, a.stride(), b.stride()) if n != 1))


def _bump_versions(ts: list) -> None:
    """What an in-place op does to each tensor's version counter (one call for all where torch allows it)."""
    try:
        torch.autograd.graph.increment_version(ts)
    except TypeError:         # torch < 2.7 takes one tensor at a time
        for t in ts:
            torch.autograd.graph.increment_version(t)


class SymbolBinder:
    """Reads the values of a graph's symbols from a call's flat inputs (``sources``: symbol -> (input index,
    dim), dim None for an int input) and evaluates size expressions or checks relations with them."""

    def __init__(self, table: Any, sources: dict) -> None:
        self.table, self.sources = table, sources

    def values(self, args: Sequence[Any]) -> dict:
        return {s: (args[i] if d is None else args[i].size(d)) for s, (i, d) in self.sources.items()}

    def evaluator(self, exprs: Sequence[Any]) -> Callable[[Sequence[Any]], list]:
        """``args -> [int(e) for e in exprs]`` at the call's sizes."""
        from ember.shapes import to_python
        code = compile("[" + ", ".join(to_python(self.table.simplify(e)) if hasattr(e, "free_symbols")
                                       else repr(int(e)) for e in exprs) + "]", "<ember sizes>", "eval")

        def evaluate(args: Sequence[Any]) -> list:
            return eval(code, {}, {s.name: v for s, v in self.values(args).items()})   # noqa: S307
        return evaluate

    def holds(self, args: Sequence[Any]) -> bool:
        """Whether the call's sizes satisfy the table's ranges and relations."""
        return self.table.check(self.values(args))


def run_inference(fwd: Callable[..., Any], num_user_outputs: int, write_backs: Sequence[tuple[int, int]],
                  aliases: Sequence[AliasInfo], args: Sequence[Any]) -> list[Any]:
    """Run a forward-only graph; write mutated inputs back; return the user outputs."""
    outs = list(_run(fwd, *args))
    finish(write_backs, aliases, args, outs)
    return outs[:num_user_outputs]
