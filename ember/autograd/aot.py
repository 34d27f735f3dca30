"""AOT compilation of a torch-level FX graph: trace to ATen (forward, or joint forward+backward), functionalize,
optionally decompose to ember prims, partition, and wrap in the autograd runtime.

Input: a ``torch.fx.GraphModule`` of torch-level calls (from ember's capture or torch.compile's backend hook),
its example inputs, and ``CompileOptions``. Output: a callable with the graph's calling convention
(``compiled(*inputs)`` returns what ``gm(*inputs)`` returns).

Invariants:
- The variant that runs is chosen per call: grad mode on and some tensor input requiring grad -> the joint
  graph partitioned into forward and backward graphs, run through ``runtime.AotFunction`` (one variant per
  pattern of ``requires_grad`` flags); otherwise a forward-only inference graph. The variant for the example
  inputs is built at compile time (so errors surface there), the others on first use.
- Inputs that share memory: the fake tensors keep them views of one storage; when the graph mutates one of a
  group of aliasing inputs, that variant is traced and run on a synthetic base per group (see
  ``ember.autograd.aliasing``), and the aliasing pattern joins the variant key.
- ``get_attr`` tensors of ``gm`` that require grad (parameters kept as module attributes) are lifted to extra
  inputs, read from ``gm`` on every call, so they get gradients.
- The joint graph handed to the partitioner has placeholders ``primals..., tangents...`` and outputs
  ``user outputs..., new values of mutated inputs..., one gradient per primal (None where none)``; mutated
  inputs count as forward outputs.
- Uses ``ember.autograd.partition.partition_joint`` (min-cut); ``fallback_partition`` (saves every
  forward value the backward reads) is the simple reference it is tested against.
"""
from __future__ import annotations

import contextlib

import functools
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch
import torch.fx as fx
from torch.utils._pytree import tree_unflatten

from ember import counters, logs
from ember.autograd import regions
from ember.autograd.aliasing import SyntheticBases, alias_groups, alias_key, multi_output_views, output_views
from ember.errors import AotError  # noqa: F401  (raised here; its home is ember.errors, below both modules)
from ember.autograd.leaves import check_leaf_outputs, eager_only_reason, makes_leaves
from ember.autograd.view_bases import expose_view_bases
from ember.autograd.runtime import (AliasInfo, CompiledGraphs, SymbolBinder, run_inference, run_training,
                                    tangent_dependencies)
from ember.errors import EmberError
from ember.shapes import SymbolicUnsupported, expr_of, is_symbolic, located, using

# The tracing stack (trace, functionalize, partition, decompositions: ~0.3 s of imports on the 2-core CPU) is
# imported where a graph is built: a call the whole-graph cache serves (a warm start) needs none of it.
if TYPE_CHECKING:
    from ember.autograd.partition import PartitionResult
    from ember.autograd.trace import TracedGraph


def __getattr__(name: str) -> Any:     # names this module had before the tracing stack became lazy
    if name in ("fallback_partition", "PartitionResult"):
        from ember.autograd import fallback_partition
        return getattr(fallback_partition, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

GraphCompiler = Callable[[fx.GraphModule, str], Callable[..., Any]]


# -- partitioning --------------------------------------------------------------------------------------------
def _partitioner() -> Callable[..., Any]:
    from ember.autograd.partition import partition_joint
    return partition_joint


# -- the joint graph ------------------------------------------------------------------------------------------
def _val(n: Any) -> Any:
    return n.meta.get("val") if isinstance(n, fx.Node) else n


def _normalize_joint(traced: TracedGraph) -> tuple[fx.GraphModule, list[tuple[int, int]]]:
    """Reorder the functional joint's outputs to (user outputs, mutated inputs' new values, grad per primal)."""
    gm = fx.GraphModule(traced.gm, _copy_graph(traced.gm.graph))
    out = next(n for n in gm.graph.nodes if n.op == "output")
    outs = list(out.args[0])
    n_fwd, n_grad = traced.num_forward_outputs, len(traced.grad_input_indices)
    user, grads, wb = outs[:n_fwd], outs[n_fwd:n_fwd + n_grad], outs[n_fwd + n_grad:]
    per_primal: list[Any] = [None] * traced.num_inputs
    for i, g in zip(traced.grad_input_indices, grads):
        per_primal[i] = g
    out.args = (tuple(user + wb + per_primal),)
    write_backs = [(i, n_fwd + k) for k, (i, _) in enumerate(traced.write_backs)]
    gm.recompile()
    return gm, write_backs


def _copy_graph(g: fx.Graph) -> fx.Graph:
    new = fx.Graph()
    out = new.graph_copy(g, {})
    new.output(out)
    return new


def _alias_info(k: int, i: int, v: torch.Tensor, binder: SymbolBinder | None, base: Any = None) -> AliasInfo:
    if binder is None:
        return AliasInfo(k, i, tuple(v.shape), tuple(v.stride()), v.storage_offset(), bool(v.requires_grad))
    # symbolic layout: evaluated per call, the offset from the input's start (the runtime adds the real input's
    # own offset): an input that is itself a view (x1[2] across a graph break) has a fake at that offset too
    offset = v.storage_offset() - base.storage_offset() if isinstance(base, torch.Tensor) else v.storage_offset()
    exprs = [expr_of(d) for d in (*v.shape, *v.stride(), offset)]
    evaluate, n = binder.evaluator(exprs), v.ndim

    def layout(args: Sequence[Any]) -> tuple:
        vals = evaluate(args)
        return vals[:n], vals[n:2 * n], vals[2 * n]
    return AliasInfo(k, i, (), (), 0, bool(v.requires_grad), dynamic=layout)


def _aliases(traced: TracedGraph, binder: SymbolBinder | None = None) -> list[AliasInfo]:
    """User outputs of the (unfunctionalized) trace that are views of an input (eager returns a view that shares
    the input's memory; the compiled graphs, decomposed or generated, may return a copy, so the runtime
    rebuilds such outputs as views of the real input), then outputs that are views of another output."""
    phs = [n for n in traced.gm.graph.nodes if n.op == "placeholder"][:traced.num_inputs]
    out = next(n for n in traced.gm.graph.nodes if n.op == "output")
    storages: dict[int, int] = {}
    for i, ph in enumerate(phs):
        v = _val(ph)
        if isinstance(v, torch.Tensor) and hasattr(v, "_meta"):
            storages.setdefault(v._meta.untyped_storage()._cdata, i)
    found = []
    for k, o in enumerate(list(out.args[0])[:traced.num_forward_outputs]):
        v = _val(o)
        if isinstance(v, torch.Tensor) and hasattr(v, "_meta"):
            i = _viewed_input(o, phs)
            if i is None:
                i = storages.get(v._meta.untyped_storage()._cdata)
            if i is not None and _val(phs[i]).dtype == v.dtype:
                found.append(_alias_info(k, i, v, binder, _val(phs[i])))
                found[-1].view = _made_by_view(o)
    return found + output_views(_user_output_vals(traced), set(storages))


def _made_by_view(node: Any) -> bool:
    """Whether ``node`` is a view op's result (a new tensor in eager, whatever its layout: ``x[:]`` is not x)."""
    from ember.autograd.functionalize import _is_view
    return isinstance(node, fx.Node) and node.op == "call_function" and (
        node.target is operator.getitem or _is_view(node.target))


def _viewed_input(node: Any, phs: list) -> int | None:
    """The input ``node`` is a view of, through view ops (``split``'s items too): with inputs that share a
    storage (``f(x[:, :1], x)``), the one whose gradient the output's must reach, which the storage alone
    does not tell."""
    from ember.autograd.functionalize import _is_view

    while isinstance(node, fx.Node) and node.op == "call_function":
        if node.target is operator.getitem:
            node = node.args[0]
        elif _is_view(node.target):
            node = node.args[0]
        else:
            return None
    return phs.index(node) if node in phs else None


def _grad_tangents(traced: TracedGraph, joint: fx.GraphModule, diff: list[int], n_user: int) -> list:
    """Which tangents each primal's gradient is connected to (``runtime.tangent_dependencies``). Functionalization
    turns ``t.zero_()`` into a fresh ``zeros`` that no longer reaches t's inputs, while eager's autograd still
    connects them (``x.grad`` becomes zeros): a trace with in-place ops is walked before functionalization, and
    where a mutated input's new value takes a tangent, the gradients stay as computed (none become None)."""
    if not _mutates(traced.gm):
        return tangent_dependencies(joint, traced.num_inputs, diff)
    if any(i >= n_user for i in diff):
        return []
    return tangent_dependencies(traced.gm, traced.num_inputs, diff)


def _unconnected(traced: TracedGraph, write_backs: Sequence[tuple[int, int]]) -> list[int]:
    """The inputs that require grad but that eager's autograd graph does not connect to any output (the traced
    ``autograd.grad`` gave None: a value only dead code used, a branch the outputs do not depend on), and that
    the graph does not modify in place (a write-back gives those a history of their own).
    ``runtime.run_training`` passes them to ``AotFunction`` detached: as inputs of its node, the backward
    would reach their history with an undefined gradient, and the nodes there would still run and unpack what
    they saved, raising where eager's graph never goes (fuzz seed 360755)."""
    if not traced.num_tangents:
        return []
    out = next(n for n in traced.gm.graph.nodes if n.op == "output")
    n_fwd = traced.num_forward_outputs
    grads = list(out.args[0])[n_fwd:n_fwd + len(traced.grad_input_indices)]
    mutated = {i for i, _ in write_backs}
    return [i for i, g in zip(traced.grad_input_indices, grads) if g is None and i not in mutated]


def _mutates(gm: fx.GraphModule) -> bool:
    """Whether the (unfunctionalized) trace calls an ATen op that writes into one of its arguments."""
    return any(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
               and n.target._schema.is_mutable for n in gm.graph.nodes)


def _user_output_vals(traced: TracedGraph) -> list[Any]:
    out = next(n for n in traced.gm.graph.nodes if n.op == "output")
    return [_val(o) for o in list(out.args[0])[:traced.num_forward_outputs]]


# -- building variants ----------------------------------------------------------------------------------------
@dataclass
class _Inference:
    fwd: fx.GraphModule
    num_user_outputs: int
    write_backs: list[tuple[int, int]]
    aliases: list[AliasInfo]
    grad_after: bool


def _build_inference(gm: fx.GraphModule, inputs: Sequence[Any], decompose: bool,
                     compile_graph: GraphCompiler | None = None,
                     binder: SymbolBinder | None = None) -> tuple[_Inference, Any]:
    traced, grad_after = _trace(gm, inputs, training=False)
    from ember.autograd.functionalize import functionalize
    func = functionalize(traced)
    fwd = _with_table(_maybe_decompose(func.gm, decompose), binder)
    aliases = _aliases(traced, binder)
    _log_graphs("inference", fwd, None, "no backward: forward-only inference graph")
    if compile_graph is not None:
        fwd.meta["ember_write_backs"] = list(func.write_backs)   # the kernel compiler may store in place
        fwd = compile_graph(fwd, "inference")
    return _Inference(fwd, traced.num_forward_outputs, func.write_backs, aliases, grad_after), traced.out_spec


def _trace(gm: fx.GraphModule, inputs: Sequence[Any], training: bool) -> tuple[TracedGraph, bool]:
    """``trace_aten`` that also returns the grad mode ``gm`` leaves behind (a graph captured up to a break
    inside ``torch.no_grad()`` ends with grad disabled; the caller's glue relies on it)."""
    from ember.autograd.symbolic import graph_table, symbolic_inputs
    from ember.autograd.symcompose import SymbolicCompositions
    from ember.autograd.trace import trace_aten
    grad_before = torch.is_grad_enabled()
    after: list[bool] = []

    def fn(*args: Any) -> Any:
        if symbolic:
            with SymbolicCompositions():        # not ATen's C++ compositions, which may read plain sizes
                out = _Located(gm).run(*args)
        else:
            out = gm(*args)
        after.append(torch.is_grad_enabled())
        return out

    symbolic = graph_table(gm) is not None

    autocast_before = _autocast_state()
    try:
        # inference mode traced as no_grad: fake tensors made under inference mode lose requires_grad, and
        # with it the record that an output viewing an input requires grad as the input does
        with contextlib.ExitStack() as stack:
            if torch.is_inference_mode_enabled():
                stack.enter_context(torch.inference_mode(False))
                stack.enter_context(torch.set_grad_enabled(grad_before))
            mode, fakes = symbolic_inputs(gm, inputs)
            traced = trace_aten(fn, fakes, training=training, fake_mode=mode)
    finally:
        torch._C._set_grad_enabled(grad_before)
        _restore_autocast(autocast_before)
    return traced, after[0]


class _Located(fx.Interpreter):
    """Runs a graph with symbolic sizes node by node, so that a relation a node's meta kernel records names
    the user line of that node (``node.meta["ember_loc"]``, set by capture) under ``EMBER_LOGS=dynamic``."""

    def run_node(self, n: fx.Node) -> Any:
        where = n.meta.get("ember_loc")
        if not where:
            return super().run_node(n)
        with located(where):
            return super().run_node(n)


_AUTOCAST_DEVICES = ("cpu", "cuda")


def _autocast_state() -> tuple:
    nesting = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return nesting, [(d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in _AUTOCAST_DEVICES]


def _restore_autocast(state: tuple) -> None:
    """Undo what tracing did to autocast (a graph that enters an autocast region and ends inside it, or one
    whose trace failed inside it): the trace is not the run, so the caller's state must not change."""
    nesting, flags = state
    while torch.autocast_increment_nesting() - 1 > nesting:
        torch.autocast_decrement_nesting()
        torch.autocast_decrement_nesting()
    torch.autocast_decrement_nesting()
    for d, enabled, dtype in flags:
        torch.set_autocast_enabled(d, enabled)
        torch.set_autocast_dtype(d, dtype)


def _with_table(gm: fx.GraphModule, binder: SymbolBinder | None) -> fx.GraphModule:
    """A graph with symbolic sizes carries its symbol table (``gm.meta["ember_symbols"]``, the contract)."""
    if binder is not None:
        gm.meta["ember_symbols"] = binder.table
    return gm


def _build_training(gm: fx.GraphModule, inputs: Sequence[Any], decompose: bool,
                    recompute: bool, compile_graph: GraphCompiler | None = None,
                    binder: SymbolBinder | None = None) -> tuple[CompiledGraphs, Any]:
    from ember.autograd.functionalize import functionalize
    from ember.autograd.partition import copied_when_saved
    from ember.autograd.saved_strides import adopt_saved_strides
    from ember.autograd.symsave import save_symbols
    traced, grad_after = _trace(gm, inputs, training=True)
    if makes_leaves(gm):
        check_leaf_outputs(traced, _unconnected(traced, []))
    func = functionalize(traced)
    _check_write_backs(func)
    joint, write_backs = _normalize_joint(func)
    vals = _user_output_vals(func)
    diff = [i for i, v in enumerate(vals) if isinstance(v, torch.Tensor) and v.requires_grad]
    n_user = traced.num_forward_outputs
    non_diff = [i for i in range(n_user + len(write_backs)) if i not in diff]
    if len(diff) != traced.num_tangents and traced.num_tangents:
        raise AotError(f"aot: {len(diff)} differentiable outputs but {traced.num_tangents} tangents")
    tangent_phs = [n for n in joint.graph.nodes if n.op == "placeholder"][traced.num_inputs:]
    contiguous = [bool(_val(t).is_contiguous()) for t in tangent_phs]
    if not traced.num_tangents:
        diff, non_diff = [], list(range(n_user + len(write_backs)))
    # Decompose the functional joint graph, so the partitioner cuts (and recomputes) prims: what the backward
    # recomputes is then the cheap prims themselves, not whole ATen ops such as layer norm.
    grad_tangents = _grad_tangents(traced, joint, diff, n_user)
    joint = _maybe_decompose(joint, decompose)
    with using(binder.table if binder is not None else None):      # prims' symbolic sizes weigh their hints
        part = _partitioner()(joint, traced.num_inputs, traced.num_tangents, n_user + len(write_backs),
                              recompute=recompute, copied=copied_when_saved(traced, inputs, write_backs))
    fwd, bwd = _with_table(part.fwd, binder), _with_table(part.bwd, binder)
    num_saved = part.num_saved
    if binder is not None:      # sizes the backward's prims use but cannot read from its inputs: saved ints
        num_saved = save_symbols(fwd, bwd, num_saved, binder.table)
    _log_graphs("training", fwd, bwd, part.summary)
    bwd_graph, compile_bwd = bwd, None
    if compile_graph is not None:
        saved_from = n_user + len(write_backs)
        fwd.meta["ember_write_backs"] = list(write_backs)        # the kernel compiler may store in place
        fwd.meta["ember_saved_from"] = saved_from                # ... and return saved values as computed
        fwd_c = compile_graph(fwd, "forward")
        adopt_saved_strides(bwd, fwd.meta.get("ember_output_strides"), saved_from)
        compile_bwd = functools.partial(_compile_backward, compile_graph)
        fwd, bwd = fwd_c, compile_graph(bwd, "backward")
    aliases = _aliases(traced, binder)
    graphs = CompiledGraphs(fwd, bwd, n_user, write_backs, num_saved, diff, non_diff, contiguous, aliases,
                            grad_after, grad_tangents=grad_tangents, dynamic=binder is not None,
                            bwd_graph=bwd_graph, compile_bwd=compile_bwd,
                            multi_output_views=multi_output_views(traced.gm, n_user))
    graphs.unconnected = _unconnected(traced, write_backs)
    graphs.version_inputs = [(i, m) for i, m in traced.saved_inputs if isinstance(inputs[i], torch.Tensor)]
    viewing = {a.output for a in aliases if a.base_layout is None}     # checked through their input
    graphs.version_outputs = [(k, m) for k, m in traced.saved_outputs if k < n_user and k not in viewing]
    return graphs, traced.out_spec


def _compile_backward(compile_graph: GraphCompiler, gm: fx.GraphModule) -> Callable[..., Any]:
    return compile_graph(gm, "backward")


def _check_write_backs(func: TracedGraph) -> None:
    out = next(n for n in func.gm.graph.nodes if n.op == "output")
    outs = list(out.args[0])
    for i, j in func.write_backs:
        v = _val(outs[j])
        # a leaf that requires grad updated under no_grad (a parameter rescaled in place) stays the same leaf:
        # no gradient flows through the update, and the write-back is a plain copy, as in eager
        if isinstance(v, torch.Tensor) and v.requires_grad and v.grad_fn is not None:
            raise AotError(
                f"aot autograd: graph input {i} is updated in place with a value that requires grad; ember's "
                "AOT autograd cannot yet carry gradients through an input mutated in place (stage: autograd "
                "runtime). Use an out-of-place op (x = x + y instead of x.add_(y)), or compile with "
                "backend='eager'.")


def _maybe_decompose(gm: fx.GraphModule, decompose: bool) -> fx.GraphModule:
    return decompose_graph(gm) if decompose else gm


def decompose_graph(gm: fx.GraphModule) -> fx.GraphModule:
    """Replace every ATen op that has an ember decomposition by the prim graph it traces to (ops without one
    stay ATen calls); the result still runs eagerly, prims running their reference implementations. A graph
    with symbolic sizes decomposes with its table active (decisions on sizes become its relations)."""
    from ember.shapes import using
    with using(_table_of(gm)):
        return _decompose_graph(gm)


def _table_of(gm: fx.GraphModule) -> Any:
    table = gm.meta.get("ember_symbols")
    if table is not None:
        return table
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        sizes = list(val.shape) if isinstance(val, torch.Tensor) else [val]
        for x in sizes:
            if isinstance(x, torch.SymInt) and is_symbolic(x):
                return x.node.table
        if n.op != "placeholder":
            break
    return None


def _decompose_graph(gm: fx.GraphModule) -> fx.GraphModule:
    from torch.utils._pytree import tree_flatten

    from ember.decomp import MISSING, decomposition_graph, has_decomposition
    from ember.decomp.meta import TensorMeta

    from ember.autograd.unbacked import introduces_unbacked, table_with_unbacked

    graph = _copy_graph(gm.graph)
    traced = {n: n.meta.get("val") for n in graph.nodes}     # each value as eager lays it out
    table = table_with_unbacked(gm)
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        seeded = torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())
        if not has_decomposition(node.target) or introduces_unbacked(node, table):
            if isinstance(node.target, torch._ops.OpOverload):
                MISSING[node.target] += 1      # stays an ATen call: ember.decomp.coverage_report() lists it
            if seeded or node.target in _STORAGE_OPS:
                _give_traced_layouts(graph, node, traced)
            continue
        value = lambda a: traced.get(a) if seeded and a in traced else a.meta.get("val")  # noqa: E731
        args, kwargs = fx.map_arg((node.args, node.kwargs), value)
        if seeded:
            args = _filled_layout(node, args, traced)
        sub = decomposition_graph(node.target, *args, **kwargs)
        # the decomposition's placeholders are its tensor operands; a size operand (a SymInt node in
        # layer_norm's normalized_shape) is a sympy constant inside it, not a placeholder
        operands = [a for a in tree_flatten((node.args, node.kwargs))[0]
                    if isinstance(a, fx.Node) and isinstance(value(a), (torch.Tensor, TensorMeta))]
        env = dict(zip([n for n in sub.nodes if n.op == "placeholder"], operands))
        with graph.inserting_before(node):
            result = graph.graph_copy(sub, env)
        _keep_region(node, env, sub)
        _keep_eager_strides(node, result, operands)
        _replace_result(graph, node, result, traced)
        _erase_replaced(graph, node)
    # an op that computes a data-dependent size stays, even where only sizes read it (prims take sizes as sympy
    # expressions): the wrapper reads the size from its result
    keep = {n for n in graph.nodes if n.op == "call_function" and introduces_unbacked(n, table)}
    from ember.decomp.core import is_impure_node
    graph.eliminate_dead_code(lambda n: n in keep or is_impure_node(n))
    return fx.GraphModule(gm, graph)


def _keep_region(node: fx.Node, env: dict, sub: fx.Graph) -> None:
    """The prims an op inside an activation-checkpoint region decomposes to stay in its region."""
    region = node.meta.get(regions.TAG)
    if region is None:
        return
    save = node.meta.get(regions.SAVE_TAG)
    for n in sub.nodes:
        new = env.get(n)
        if isinstance(new, fx.Node) and n.op != "placeholder":
            new.meta[regions.TAG] = region
            if save:        # a selective-checkpointing policy saves this op: its prims are not recomputed
                new.meta[regions.SAVE_TAG] = True


# ATen calls whose strides and offset address their input's memory: meaningful only on the traced layout
# (functionalization writes an in-place op on a fresh transposed tensor back with as_strided_scatter).
_STORAGE_OPS = (torch.ops.aten.as_strided.default, torch.ops.aten.as_strided_scatter.default)


def _filled_layout(node: fx.Node, args: tuple, traced: dict[fx.Node, Any]) -> tuple:
    """``args`` for a random op's decomposition, its first one standing for the tensor eager fills: prims lay out
    what they make row-major, but the values a position gets depend on that tensor's layout. It is the op's
    result (the node's traced value: for a functionalized ``bernoulli_`` the tensor written in place, for the
    functional ``bernoulli.p`` a fresh row-major one) when that is one tensor of the input's shape, else the
    input as traced (``native_dropout`` draws into ``empty_like(input)``)."""
    from ember.decomp.meta import TensorMeta

    out, first = traced.get(node), args[0] if args else None
    if isinstance(out, torch.Tensor) and isinstance(first, torch.Tensor) and out.shape == first.shape:
        return (TensorMeta(tuple(first.shape), first.dtype, first.device, tuple(out.stride())), *args[1:])
    return args


def _give_traced_layouts(graph: fx.Graph, node: fx.Node, traced: dict[fx.Node, Any]) -> None:
    """A random ATen op that stays a call (``rand_like``, ``exponential``, ``bernoulli`` of a tensor) fills a
    tensor laid out like its input, in memory order, and ``as_strided(_scatter)`` addresses its input's
    memory: each tensor argument that eager lays out in another order than its prims do
    (``rand_like(x.t() * 2)``, ``empty_like(x.t())``) is passed as a copy in eager's order."""
    from ember.decomp import prims as P
    from ember.decomp.helpers import memory_order
    from ember.decomp.meta import meta_of

    for a in list(node.all_input_nodes):
        val, now = traced.get(a), a.meta.get("val")
        if not isinstance(val, torch.Tensor) or now is None:
            continue
        order = memory_order(val)
        if order is None or memory_order(now) == order:
            continue
        inverse = tuple(sorted(range(len(order)), key=order.__getitem__))
        b = a
        with graph.inserting_before(node):
            for prim, extra in ((P.permute, (order,)), (P.clone, ()), (P.permute, (inverse,))):
                meta = prim.meta(b.meta["val"] if b is not a else meta_of(now), *extra)
                b = graph.call_function(prim, (b, *extra))
                b.meta["val"] = meta
        node.replace_input_with(a, b)


def _keep_eager_strides(node: fx.Node, result: Any, operands: list) -> None:
    """Prims' meta rules give movement and pointwise results contiguous strides; eager's ATen op may not (a
    pointwise op on channels-last tensors is channels-last). The strides the ATen node was traced with go on
    the node computing its result as ``meta["ember_eager_stride"]``, so that a graph output can be stored in
    eager's layout (``ember.loopir.lower``)."""
    vals, results = node.meta.get("val"), result
    if not isinstance(result, (tuple, list)):
        vals, results = [vals], [result]
    if not isinstance(vals, (tuple, list)) or len(vals) != len(results):
        return
    for val, res in zip(vals, results):
        if isinstance(res, fx.Node) and res not in operands and isinstance(val, torch.Tensor) and \
                _same_sizes(val.shape, getattr(res.meta.get("val"), "shape", ())):
            res.meta["ember_eager_stride"] = tuple(val.stride())


def _same_sizes(a: Any, b: Any) -> bool:
    """Structural equality of two shapes (symbolic sizes compared as expressions: no decision recorded)."""
    return len(a) == len(b) and all(expr_of(x) == expr_of(y) for x, y in zip(a, b))


def _erase_replaced(graph: fx.Graph, node: fx.Node) -> None:
    """Erase a node its decomposition replaced, with its now unused ``getitem`` users. Dead-code elimination
    cannot be left to do it: FX keeps nodes it deems impure, and every RNG op (``bernoulli.p``,
    ``native_dropout``) is, so the original would run too and draw from the generator a second time."""
    for user in list(node.users):
        if user.op == "call_function" and user.target is operator.getitem and not user.users:
            graph.erase_node(user)
    if not node.users:
        graph.erase_node(node)


def _replace_result(graph: fx.Graph, node: fx.Node, result: Any, traced: dict[fx.Node, Any]) -> None:
    """Point ``node``'s users at ``result``; ``traced`` gives the new nodes the traced values they stand for."""
    if isinstance(result, (tuple, list)):
        for user in list(node.users):
            if user.op == "call_function" and user.target is operator.getitem:
                item = result[user.args[1]]
                if isinstance(item, fx.Node):
                    user.replace_all_uses_with(item)
                    traced.setdefault(item, traced.get(user))
                else:
                    raise AotError(f"decomposition of {node.target} returned a non-tensor item {item!r}")
    else:
        node.replace_all_uses_with(result)
        if isinstance(result, fx.Node):
            traced.setdefault(result, traced.get(node))


def _log_graphs(kind: str, fwd: fx.GraphModule, bwd: fx.GraphModule | None, summary: str) -> None:
    if not logs.enabled("aot_graphs"):
        return
    text = [f"{kind} forward graph:\n{fwd.print_readable(print_output=False)}"]
    if bwd is not None:
        text.append(f"{kind} backward graph:\n{bwd.print_readable(print_output=False)}")
    # The partitioner's summary may print the graphs too; they are printed above, with shapes.
    text.append(f"partition: {summary.split(chr(10) + 'forward graph:')[0]}")
    logs.log("aot_graphs", "\n".join(text))


# -- entry point ----------------------------------------------------------------------------------------------
def _lift_params(gm: fx.GraphModule) -> tuple[fx.GraphModule, list[str]]:
    """Turn ``get_attr`` tensors that require grad into trailing placeholders; return their attribute paths."""
    targets = [n for n in gm.graph.nodes if n.op == "get_attr"
               and isinstance(_attr(gm, n.target), torch.Tensor) and _attr(gm, n.target).requires_grad]
    if not targets:
        return gm, []
    graph = _copy_graph(gm.graph)
    new_gm = fx.GraphModule(gm, graph)
    paths: list[str] = []
    last_ph = [n for n in graph.nodes if n.op == "placeholder"]
    by_target: dict[str, fx.Node] = {}
    for n in [n for n in graph.nodes if n.op == "get_attr"]:
        if n.target not in {t.target for t in targets}:
            continue
        if n.target not in by_target:
            anchor = last_ph[-1] if last_ph else next(iter(graph.nodes))
            ctx = graph.inserting_after(anchor) if last_ph else graph.inserting_before(anchor)
            with ctx:
                ph = graph.placeholder(f"lifted_{n.target.replace('.', '_')}")
            last_ph.append(ph)
            by_target[n.target] = ph
            paths.append(n.target)
        n.replace_all_uses_with(by_target[n.target])
        graph.erase_node(n)
    new_gm.recompile()
    return new_gm, paths


def _attr(obj: Any, path: str) -> Any:
    for p in path.split("."):
        obj = getattr(obj, p, None)
    return obj


_GRAD_MODE_SETTERS = (torch._C._set_grad_enabled, torch.set_grad_enabled, torch.enable_grad)


def _sets_grad_mode(gm: fx.GraphModule) -> bool | None:
    """Whether ``gm`` switches grad mode itself (a graph that resumes inside ``torch.no_grad()`` and leaves it);
    None when its first op switches grad off and its last op on again, with nothing else switching it (a step
    wrapped whole in ``with torch.no_grad():``, an optimizer's): no input's requires_grad can then matter."""
    ops = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    setters = [i for i, n in enumerate(ops) if n.op == "call_function" and n.target in _GRAD_MODE_SETTERS]
    if not setters:
        return False
    switches = [(ops[i].target, ops[i].args) for i in setters]
    whole = setters == [0, len(ops) - 1] and len(ops) > 2 and \
        switches == [(torch._C._set_grad_enabled, (False,)), (torch._C._set_grad_enabled, (True,))]
    return None if whole else True


_REQUIRES_GRAD = operator.attrgetter("requires_grad")


def _grad_key(args: Sequence[Any], sets_grad: bool | None) -> tuple[bool, ...] | bool:
    """The variant for ``args``: requires_grad flags and grad mode (training) or the grad mode (inference,
    also for a graph run whole under no_grad: ``sets_grad`` None)."""
    grad = torch.is_grad_enabled()
    if sets_grad is None:
        return grad
    if not (grad or sets_grad):
        return False
    try:
        key = tuple(map(_REQUIRES_GRAD, args))      # every argument a tensor: no filtering
    except AttributeError:
        key = tuple(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
    return key + (grad,) if any(key) else grad


_EAGER = object()      # a variant AOT tracing could not handle: the captured graph runs as is

def _run_built(built: Any, spec: Any, flat: list[Any], sets_grad: bool | None) -> Any:
    if isinstance(built, CompiledGraphs):
        outs = run_training(built, flat)
    elif sets_grad is None:     # run whole under no_grad: so are its write-backs and the views it returns
        with torch.no_grad():
            outs = run_inference(built.fwd, built.num_user_outputs, built.write_backs, built.aliases, flat)
    else:
        outs = run_inference(built.fwd, built.num_user_outputs, built.write_backs, built.aliases, flat)
    if built.grad_after is not torch.is_grad_enabled():
        torch._C._set_grad_enabled(built.grad_after)
    return tree_unflatten(outs, spec)


def _build(training: bool, fn: Callable[..., Any], args: Sequence[Any], decompose: bool, recompute: bool,
           compile_graph: GraphCompiler | None, binder: SymbolBinder | None) -> tuple[Any, Any]:
    return (_build_training(fn, args, decompose, recompute, compile_graph, binder) if training
            else _build_inference(fn, args, decompose, compile_graph, binder))


def _left_to_eager_autograd(e: Exception) -> None:     # what AOT cannot trace runs as captured: said, counted
    counters.bump("eager_autograd_graphs")
    first = (str(e) or " ").splitlines()[0]
    logs.log("perf_hints", f"aot_eager: {type(e).__name__}: {first}; this graph runs with eager autograd")


def _symbol_binder(gm: fx.GraphModule, lifted: fx.GraphModule) -> SymbolBinder | None:
    """``symbolic.symbol_binder(lifted, symbolic.graph_table(gm))``, importing ``symbolic`` (and with it the
    tracing stack) only for a graph with symbolic sizes."""
    table = getattr(gm, "meta", {}).get("ember_symbols")
    if table is None or not table.symbols:
        return None
    from ember.autograd.symbolic import symbol_binder
    return symbol_binder(lifted, table)


def aot_compile(gm: fx.GraphModule, example_inputs: Sequence[Any], options: Any = None, *,
                decompose: bool | None = None, recompute: bool = True,
                compile_graph: GraphCompiler | None = None, graph_cache: Any = None) -> Callable[..., Any]:
    """Compile ``gm`` with AOT autograd (see the module docstring); runs with ATen kernels unless
    ``decompose`` (or ``options.aot_decompose``) asks for ember prims. ``compile_graph(gm, kind)`` (kind is
    "inference", "forward" or "backward") turns each final graph into the callable that runs it (the kernel
    compiler); by default the graph module itself runs. ``graph_cache``: ``ember.graphcache``."""
    if decompose is None:
        decompose = bool(getattr(options, "aot_decompose", False))
    gm, hidden = expose_view_bases(gm)      # overlapping views of an intermediate come back as its views
    lifted, paths = _lift_params(gm)
    binder = _symbol_binder(gm, lifted)     # None for a static graph
    if binder is not None:
        if decompose and compile_graph is None:
            # prims take sizes as sympy constants: a decomposed graph runs only through the kernel compiler
            raise SymbolicUnsupported("aot autograd: a prim graph with symbolic sizes needs the kernel compiler")
        lifted.meta["ember_symbols"] = binder.table
    sets_grad = _sets_grad_mode(gm)
    variants: dict[Any, tuple[Any, Any, Any]] = {}
    mutates = [False]       # some variant writes inputs back: the inputs' aliasing pattern joins the key

    def full_args(args: Sequence[Any]) -> list[Any]:
        return list(args) + [_attr(gm, p) for p in paths] if paths else list(args)

    def key_of(flat: Sequence[Any]) -> Any:
        key = _grad_key(flat, sets_grad)
        return (key, alias_key(flat)) if mutates[0] else key

    def build(training: bool, fn: Callable[..., Any], args: Sequence[Any]) -> tuple[Any, Any]:
        real = functools.partial(_build, training, fn, args, decompose, recompute, compile_graph, binder)
        return graph_cache.build(training, args, binder, real) if graph_cache is not None and fn is lifted else real()

    eager_only = {t: eager_only_reason(gm, t) for t in (False, True)}

    def variant(flat: Sequence[Any], first: bool = False) -> tuple[Any, Any, Any]:
        hit = variants.get(key_of(flat))
        if hit is not None:
            return hit
        training = isinstance(_grad_key(flat, sets_grad), tuple)
        relied = len(binder.table.relations) if binder is not None else 0
        try:
            if eager_only[training]:
                raise AotError(eager_only[training])
            built, spec = build(training, lifted, flat)
            bases = None
            if built.write_backs:
                mutates[0] = True
                mutated = {i for i, _ in built.write_backs}
                groups = tuple(g for g in alias_groups(flat) if mutated & set(g))
                if groups:      # a mutation another input must see: rebuild members from one base
                    if binder is not None:
                        raise SymbolicUnsupported("inputs that share memory, one of them mutated in place")
                    bases = SyntheticBases.of(flat, groups)
                    built, spec = build(training, bases.wrap(lifted), bases.args(flat))
            hit = (built, spec, bases)
            if binder is not None and not first and len(binder.table.relations) > relied:
                # built after the entry's guards were made: the relations it added are checked per call
                hit = (built, spec, bases, binder)
        except SymbolicUnsupported:
            if first:           # the caller compiles the graph with static sizes instead
                raise
            hit = (_EAGER, None, None)
        except (EmberError, RuntimeError, NotImplementedError) as e:
            _left_to_eager_autograd(e)
            hit = (_EAGER, None, None)
        variants[key_of(flat)] = hit
        return hit

    def compiled(*args: Any) -> Any:
        flat = full_args(args)
        built, spec, bases, *checked = variant(flat)
        if built is _EAGER or checked and not checked[0].holds(flat):
            out = gm(*args)
        else:
            out = _run_built(built, spec, bases.args(flat) if bases is not None else flat, sets_grad)
        return out[:-hidden] if hidden else out

    variant(full_args(example_inputs), first=True)
    compiled.__ember_aot__ = variants  # type: ignore[attr-defined]
    return compiled


__all__ = ["aot_compile", "fallback_partition", "PartitionResult", "AotError"]
