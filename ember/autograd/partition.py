"""Partitioning: split a joint forward+backward ATen graph into a forward graph and a backward graph.

Input: a functional joint ``torch.fx.GraphModule`` (``trace.trace_aten(..., training=True)`` then
``functionalize.functionalize``): placeholders are the primals then the tangents; the output tuple is the
forward outputs, then the gradients (one per entry of ``grad_input_indices``, None where there is none), then
any extra forward-only outputs (functionalization's write-back values).
Output: a ``PartitionResult`` with
- ``fwd``: inputs = the primals; outputs = forward outputs, extra outputs, then the saved values;
- ``bwd``: inputs = the saved values, then the tangents; outputs = one gradient per primal (None where the
  joint graph has none).

Invariants:
- A joint node is *forward-computable* when it does not depend on a tangent. The backward graph computes every
  tangent-dependent node it needs; the forward-computable nodes it needs are either saved (outputs of ``fwd``)
  or, with ``recompute=True``, recomputed in ``bwd`` from saved values.
- The saved set is a minimum cut (bytes from ``node.meta["val"]``; a value the forward does not hold in memory
  weighs twice, and a value library kernels read in both passes is never recomputed: ``in_memory_forward``,
  ``stored_both_ways``) between the primals plus every op that may not be recomputed, and the values the
  tangent-dependent nodes read. Only ops in ``RECOMPUTABLE`` (cheap
  pointwise, view and factory ops) and ember prims of the cheap kinds (``PRIM_RECOMPUTABLE_KINDS``: pointwise,
  cast, view, movement, constant) are ever recomputed; matmul/convolution/attention, reductions, RNG ops and
  any op not in the table are not, so a dropout mask is computed once, in the forward, and saved.
- ``recompute=False`` is the baseline: every forward-computable node the backward needs runs in the forward,
  and every one the tangent-dependent nodes read directly is saved. ``recompute=True`` falls back to it, counted
  and logged, where the min cut fails (``_cut_or_baseline``). Its byte count is a feasible cut of the
  same network, so ``recompute=True`` never saves more bytes (past it, the weighted cut gives way to the plain
  one).
- Both graphs are dead-code-eliminated (RNG ops of the forward are kept, so the RNG stream advances as in
  eager); copied nodes keep their ``meta``; ``get_attr`` constants are copied into whichever graph uses them.
"""
from __future__ import annotations

import operator
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import torch
import torch.fx as fx

from ember.errors import EmberError
from ember.shapes import active_table, hint_of, size_hint

aten = torch.ops.aten
REGION_TAG = "ember_recompute"     # ember.autograd.regions.TAG: the op ran inside torch.utils.checkpoint
SAVE_TAG = "ember_ckpt_save"       # ember.autograd.regions.SAVE_TAG: a selective-checkpointing policy saves it

# Cheap ops the backward may recompute from saved inputs: pointwise math, views/movement, casts, factories.
RECOMPUTABLE: frozenset[str] = frozenset("""
    add sub rsub mul div neg abs exp exp2 expm1 log log1p log2 log10 sqrt rsqrt reciprocal pow square sign
    relu gelu silu tanh sigmoid sin cos erf hardtanh leaky_relu threshold elu mish softplus hardswish
    hardsigmoid where clamp clamp_min clamp_max maximum minimum eq ne lt le gt ge logical_not logical_and
    logical_or bitwise_not bitwise_and bitwise_or masked_fill lerp addcmul addcdiv floor ceil round trunc
    frac fill
    view _unsafe_view reshape permute expand t transpose unsqueeze squeeze slice select as_strided narrow
    split split_with_sizes unbind chunk diagonal alias detach clone _to_copy copy lift_fresh_copy cat stack
    zeros ones full empty zeros_like ones_like full_like empty_like new_zeros new_ones new_full new_empty
    scalar_tensor arange getitem
""".split())

# Documented for readers and tests: these are never recomputed (anything outside RECOMPUTABLE is not either).
EXPENSIVE: frozenset[str] = frozenset("""
    mm addmm bmm baddbmm matmul convolution _convolution convolution_backward
    _scaled_dot_product_flash_attention _scaled_dot_product_efficient_attention
    _scaled_dot_product_cudnn_attention _scaled_dot_product_attention_math
    sum mean amax amin max min var var_mean std std_mean prod logsumexp cumsum argmax argmin
    _softmax _log_softmax native_layer_norm native_batch_norm _native_batch_norm_legit
    _native_batch_norm_legit_functional native_group_norm
""".split())
# Ops that read their inputs from memory (library kernels: matmuls, convolutions, attention). A value one of
# them reads in the forward is stored there anyway; when one reads it in the backward too, the backward would
# store it again after recomputing it, so it is saved instead (the bf16 attention probabilities of an autocast
# softmax, which the backward's value-gradient bmm reads: one load instead of a recomputation, a store and a
# load). Views between the value and such a reader are followed.
MATERIALIZING: frozenset[str] = frozenset("""
    mm addmm bmm baddbmm matmul convolution _convolution convolution_backward
    _scaled_dot_product_flash_attention _scaled_dot_product_efficient_attention
    _scaled_dot_product_cudnn_attention _scaled_dot_product_flash_attention_backward
    _scaled_dot_product_efficient_attention_backward _scaled_dot_product_cudnn_attention_backward
""".split())
VIEWS: frozenset[str] = frozenset("""
    view _unsafe_view reshape permute expand t transpose unsqueeze squeeze slice select as_strided narrow
    alias detach
""".split())
RNG: frozenset[str] = frozenset("""
    native_dropout bernoulli rand rand_like randn randn_like randint randint_like randperm normal uniform
    exponential multinomial dropout poisson
""".split())

_INF = 1 << 100


class PartitionError(EmberError):
    """The joint graph cannot be split (it still mutates tensors, or its outputs do not match the counts)."""


@dataclass
class PartitionResult:
    """A forward and a backward graph, and what the forward saves for the backward."""

    fwd: fx.GraphModule
    bwd: fx.GraphModule
    num_saved: int
    saved_names: list[str]
    recomputed: list[str]
    summary: str
    num_fwd_outputs: int = 0          # fwd outputs before the saved values (forward outputs + extras)
    grad_input_indices: list[int] = field(default_factory=list)
    saved_bytes: int = 0
    baseline_saved_bytes: int = 0     # what recompute=False saves


def op_name(node: fx.Node) -> str:
    """The ATen op packet name of a call (``aten.mm.default`` -> ``mm``); ``getitem`` for tuple indexing."""
    t = node.target
    if t is operator.getitem:
        return "getitem"
    packet = getattr(t, "overloadpacket", None)
    return getattr(packet, "__name__", getattr(t, "__name__", str(t)))


# ember prims (``ember.decomp``) are classified by their kind: pointwise math, casts, views, movement and
# constants are cheap; reductions, extern kernels (matmul, convolution, attention, ATen fallbacks), scatters
# and RNG are not recomputed. Reads at computed positions (gather, index_select, index) are loads, as cheap
# to recompute as a view: a pooling backward's window gathers then cost no saved bytes.
PRIM_RECOMPUTABLE_KINDS: frozenset[str] = frozenset({"pointwise", "cast", "view", "movement", "constant"})
PRIM_RECOMPUTABLE_READS: frozenset[str] = frozenset({"gather", "index_select", "index"})


def _prim_kind(node: fx.Node) -> str | None:
    from ember.decomp.core import Prim

    return node.target.kind if isinstance(node.target, Prim) else None


def _is_prim_getitem(node: fx.Node) -> bool:
    from ember.decomp.interp import _getitem

    return node.target is _getitem


def is_rng(node: fx.Node) -> bool:
    """Whether ``node`` draws random numbers (its value is saved, never recomputed, and it always runs)."""
    if node.op != "call_function":
        return False
    kind = _prim_kind(node)
    if kind is not None:
        return kind == "rng"
    tags = getattr(node.target, "tags", ())
    if _zero_probability(node):
        return False
    return op_name(node) in RNG or torch.Tag.nondeterministic_seeded in tags


def _zero_probability(node: fx.Node) -> bool:
    """An op whose schema takes a ``dropout_p`` that is 0 here: its ATen tag says "seeded" because it may drop
    out, but it draws nothing (every attention kernel without dropout), so a checkpoint region recomputes it
    as eager checkpointing does."""
    for i, arg in enumerate(getattr(getattr(node.target, "_schema", None), "arguments", ())):
        if arg.name == "dropout_p":
            p = node.kwargs["dropout_p"] if "dropout_p" in node.kwargs else \
                node.args[i] if i < len(node.args) else arg.default_value
            return isinstance(p, (int, float)) and p == 0
    return False


def _copies(node: fx.Node) -> bool:
    """A ``clone``: the program asked for memory of its own. Recomputed in the backward, it would be read from
    its source, which may be a returned value the caller then changes in place (``t4 = gelu(t3.clone());
    t3.tanh_()``): saved, it is the copy eager's backward reads."""
    return op_name(node) == "clone" or getattr(node.target, "name", None) == "clone"


def can_recompute(node: fx.Node) -> bool:
    """Whether the backward may recompute ``node`` instead of loading it from the saved set (every op of an
    activation-checkpoint region may, as eager checkpointing recomputes them, except random ones, copies and
    the ops a selective-checkpointing policy saves)."""
    if node.op != "call_function" or is_rng(node) or _copies(node) or node.meta.get(SAVE_TAG):
        return False
    if REGION_TAG in node.meta:
        return True
    kind = _prim_kind(node)
    if kind is not None:
        ok = kind in PRIM_RECOMPUTABLE_KINDS or node.target.name in PRIM_RECOMPUTABLE_READS
    else:
        ok = _is_prim_getitem(node) or (op_name(node) in RECOMPUTABLE and op_name(node) not in EXPENSIVE)
    return ok and not _compared_with_extremum(node)     # the users' walk only for what could be recomputed


_EXTREMA = {"amax", "amin", "max", "min"}
_VIEWISH = {"broadcast_in_dim", "expand", "permute", "view_of", "reshape", "view", "squeeze", "unsqueeze",
            "transpose", "t"}


def _name(node: fx.Node) -> str:
    return getattr(node.target, "name", None) or op_name(node)


def _view_root(node: Any) -> Any:
    while isinstance(node, fx.Node) and node.op == "call_function" and _name(node) in _VIEWISH and node.args:
        node = node.args[0]
    return node


def _compared_with_extremum(node: fx.Node) -> bool:
    """Whether ``node`` (through views) is compared for equality with a max/min reduction of it: the gradient
    of ``amax``/``amin`` picks the points equal to the result, so the backward must see the very bits the
    forward reduced. A recomputed value may differ in its last bit (a vector loop's ``cos`` against a scalar
    loop's) and then match no point at all: such values are saved, as eager saves them."""
    stack, seen = [node], {node}
    while stack:
        n = stack.pop()
        for u in n.users:
            if u in seen or u.op != "call_function":
                continue
            seen.add(u)
            name = _name(u)
            if name in ("eq", "ne") and any(_view_root(a) is not node and _is_extremum_of(_view_root(a), node)
                                            for a in u.args[:2]):
                return True
            if name in _VIEWISH:
                stack.append(u)
    return False


def _is_extremum_of(red: Any, node: fx.Node) -> bool:
    return isinstance(red, fx.Node) and red.op == "call_function" and _name(red) in _EXTREMA and bool(red.args) \
        and _view_root(red.args[0]) is node


def _is_view(node: fx.Node) -> bool:
    """A view, or a reshape (one of contiguous data, as a matmul's operands mostly are, is a view when lowered);
    not the copying movement prims (cat, pad, flip, clone), whose results are other buffers."""
    kind = _prim_kind(node)
    if kind is not None:
        return kind == "view" or (kind == "movement" and node.target.name == "reshape")
    return op_name(node) in VIEWS


def _reads_memory(node: fx.Node) -> bool:
    kind = _prim_kind(node)
    return kind == "extern" if kind is not None else op_name(node) in MATERIALIZING


def _library_readers(node: fx.Node, tangent_dep: set[fx.Node]) -> tuple[bool, bool]:
    """Whether a library kernel (``MATERIALIZING``) reads ``node``, through views, in the forward; in the
    backward."""
    fwd = bwd = False
    todo, seen = [node], {node}
    while todo:
        for u in todo.pop().users:
            if u in seen or u.op != "call_function":
                continue
            seen.add(u)
            if _is_view(u):
                todo.append(u)
            elif _reads_memory(u):
                if u in tangent_dep:
                    bwd = True
                else:
                    fwd = True
    return fwd, bwd


def stored_both_ways(node: fx.Node, tangent_dep: set[fx.Node]) -> bool:
    """Whether ``node`` (not a view) is read through views by a library kernel (``MATERIALIZING``) in the forward
    and by one in the backward: then saving it costs no store the forward does not make anyway, and recomputing
    it would cost the backward a store and a load."""
    if node.op != "call_function" or _is_view(node):
        return False
    return all(_library_readers(node, tangent_dep))


def in_memory_forward(node: fx.Node, tangent_dep: set[fx.Node], outputs: set[fx.Node]) -> bool:
    """Whether the forward has ``node``'s value in memory anyway: an input, a library kernel's result, a forward
    output, or a value a library kernel reads. Saving any other value (one fused into the kernels that use it)
    costs the forward a store it would not make, so the cut weighs it twice (as Inductor's partitioner does):
    a post-norm layer's residual sum, fused into its layer norm, is recomputed from the layer's input and the
    attention output, both in memory, rather than stored in float32."""
    return node.op == "placeholder" or node in outputs or _reads_memory(node) or (
        not _is_view(node) and _library_readers(node, tangent_dep)[0])


def node_bytes(node: fx.Node, _cache: dict[fx.Node, Any] | None = None) -> int | None:
    """Bytes it takes to save ``node``'s value; None when it cannot be saved as one value (a tuple)."""
    val = node.meta["val"] if "val" in node.meta else _infer_val(node, {} if _cache is None else _cache)
    if isinstance(val, torch.Tensor):
        # symbolic sizes weigh their value at the hints (int() of a SymInt would specialize the size)
        return int(hint_of(val.numel())) * val.element_size()
    if _is_tensor_meta(val):              # a prim's value (ember.decomp.TensorMeta)
        try:
            return int(val.numel()) * _itemsize(val.dtype)
        except TypeError:                 # symbolic sizes: their value at the hints, as for a fake tensor
            if active_table() is None:
                return 1 << 40
            return int(size_hint(val.numel())) * _itemsize(val.dtype)
    if isinstance(val, (tuple, list)):
        return None
    return 8 if val is not None else 1 << 40


def _is_tensor_meta(val: Any) -> bool:
    from ember.decomp.meta import TensorMeta

    return isinstance(val, TensorMeta)


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype, device="meta").element_size()


def _infer_val(node: fx.Node, cache: dict[fx.Node, Any]) -> Any:
    """A meta-device value for a node without ``meta["val"]`` (some replayed views lack it), or None."""
    if node in cache:
        return cache[node]

    def to_meta(a: fx.Node) -> Any:
        v = a.meta["val"] if "val" in a.meta else _infer_val(a, cache)
        if isinstance(v, torch.Tensor):
            return torch.empty_strided(tuple(v.shape), v.stride(), dtype=v.dtype, device="meta")
        return v

    val = None
    if node.op == "call_function":
        try:
            val = node.target(*fx.node.map_arg(node.args, to_meta), **fx.node.map_arg(node.kwargs, to_meta))
        except Exception:   # noqa: BLE001 - any failure only means "size unknown"
            val = None
    cache[node] = val
    return val


# ----------------------------------------------------------------------------------------------------
# Max-flow / min-cut (Dinic, iterative so deep graphs do not hit the recursion limit)


class FlowNetwork:
    """A directed graph with integer capacities; ``min_cut_source_side`` after ``max_flow``."""

    def __init__(self, n: int) -> None:
        self.adj: list[list[int]] = [[] for _ in range(n)]
        self.to: list[int] = []
        self.cap: list[int] = []

    def add_edge(self, u: int, v: int, cap: int) -> None:
        self.adj[u].append(len(self.to))
        self.to.append(v)
        self.cap.append(cap)
        self.adj[v].append(len(self.to))
        self.to.append(u)
        self.cap.append(0)

    def _levels(self, s: int) -> list[int]:
        level = [-1] * len(self.adj)
        level[s] = 0
        q = deque([s])
        while q:
            u = q.popleft()
            for e in self.adj[u]:
                v = self.to[e]
                if self.cap[e] > 0 and level[v] < 0:
                    level[v] = level[u] + 1
                    q.append(v)
        return level

    def _blocking_flow(self, s: int, t: int, level: list[int]) -> int:
        it = [0] * len(self.adj)
        total = 0
        while True:
            stack, path = [s], []
            while stack and stack[-1] != t:
                u = stack[-1]
                adj = self.adj[u]
                while it[u] < len(adj):
                    e = adj[it[u]]
                    v = self.to[e]
                    if self.cap[e] > 0 and level[v] == level[u] + 1:
                        stack.append(v)
                        path.append(e)
                        break
                    it[u] += 1
                else:   # dead end: never enter u again in this phase
                    level[u] = -1
                    stack.pop()
                    if path:
                        path.pop()
                        it[stack[-1]] += 1
            if not stack:
                return total
            f = min(self.cap[e] for e in path)
            for e in path:
                self.cap[e] -= f
                self.cap[e ^ 1] += f
            total += f

    def max_flow(self, s: int, t: int) -> int:
        flow = 0
        while True:
            level = self._levels(s)
            if level[t] < 0:
                return flow
            flow += self._blocking_flow(s, t, level)

    def min_cut_source_side(self, s: int) -> set[int]:
        """Vertices reachable from ``s`` in the residual graph (call after ``max_flow``)."""
        seen, q = {s}, deque([s])
        while q:
            u = q.popleft()
            for e in self.adj[u]:
                v = self.to[e]
                if self.cap[e] > 0 and v not in seen:
                    seen.add(v)
                    q.append(v)
        return seen


# ----------------------------------------------------------------------------------------------------
# Graph analysis


def _ancestors(roots: Iterable[Any], stop: set[fx.Node] = frozenset()) -> set[fx.Node]:
    """Nodes ``roots`` transitively read (including themselves), not looking past nodes in ``stop``."""
    seen: set[fx.Node] = set()
    todo = [r for r in roots if isinstance(r, fx.Node)]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n not in stop:
            todo.extend(n.all_input_nodes)
    return seen


@dataclass
class _Joint:
    primals: list[fx.Node]
    tangents: list[fx.Node]
    fwd_outs: list[Any]       # forward outputs, then extra forward-only outputs
    grads: list[Any]
    tangent_dep: set[fx.Node]
    boundary: list[fx.Node]   # forward-computable nodes the backward reads directly (the baseline saved set)
    copied: frozenset[fx.Node] = frozenset()    # primals the runtime copies when saved (``copied_when_saved``)


def _analyse(joint: fx.GraphModule, num_primals: int, num_tangents: int, num_fwd_outputs: int,
             num_grads: int) -> _Joint:
    from ember.autograd.functionalize import has_mutations

    graph = joint.graph
    mutations = has_mutations(joint)
    if mutations:
        raise PartitionError(f"partition_joint needs a functional graph; it mutates through {mutations[:3]}: "
                             "run ember.autograd.functionalize.functionalize first")
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != num_primals + num_tangents:
        raise PartitionError(f"joint graph has {len(placeholders)} inputs, expected {num_primals} primals + "
                             f"{num_tangents} tangents")
    out = next(n for n in reversed(graph.nodes) if n.op == "output")
    outs = list(out.args[0]) if isinstance(out.args[0], (tuple, list)) else [out.args[0]]
    if len(outs) < num_fwd_outputs + num_grads:
        raise PartitionError(f"joint graph has {len(outs)} outputs, expected at least {num_fwd_outputs} "
                             f"forward outputs + {num_grads} gradients")
    tangents = placeholders[num_primals:]
    dep = set(tangents)
    for n in graph.nodes:
        if n.op == "call_function" and any(a in dep for a in n.all_input_nodes):
            dep.add(n)
    fwd_outs = outs[:num_fwd_outputs] + outs[num_fwd_outputs + num_grads:]
    bad = [o for o in fwd_outs if isinstance(o, fx.Node) and o in dep]
    if bad:
        raise PartitionError(f"forward outputs {[o.name for o in bad]} depend on tangents; check "
                             "num_fwd_outputs and grad_input_indices")
    grads = outs[num_fwd_outputs:num_fwd_outputs + num_grads]
    bwd_nodes = [n for n in _ancestors(grads) if n in dep]
    read = {a for n in bwd_nodes for a in n.all_input_nodes}
    read.update(g for g in grads if isinstance(g, fx.Node))
    boundary = [n for n in graph.nodes if n in read and n not in dep and n.op != "get_attr"]
    return _Joint(placeholders[:num_primals], tangents, fwd_outs, grads, dep, boundary)


def region_copy(node: fx.Node, outputs: set[fx.Node]) -> bool:
    """A ``clone`` inside an activation-checkpoint region of a value computed in that region (the copies the
    decompositions make of a matmul's broadcast operands: attention's q, k, v and probabilities), none of whose
    sources, through views, the graph returns: recomputed, as eager checkpointing recomputes every op of the
    region. (A clone of a returned value is saved: ``_copies``.)"""
    region = node.meta.get(REGION_TAG)
    if region is None or not _copies(node) or node.meta.get(SAVE_TAG):
        return False
    todo = list(node.all_input_nodes)
    while todo:
        a = todo.pop()
        if a in outputs or a.op != "call_function" or a.meta.get(REGION_TAG) != region:
            return False
        if _is_view(a):
            todo.extend(a.all_input_nodes)
    return True


def must_recompute(node: fx.Node, forward: set[fx.Node], outputs: set[fx.Node] = frozenset()) -> bool:
    """A value inside an activation-checkpoint region that, in the forward, only its region's ops read: never
    saved, as eager's ``checkpoint`` saves only what the region reads (its outputs are read after it and may
    be saved). ``forward`` is the set of nodes the forward outputs need; the backward's readers do not count.
    Random ops' values are saved, so the recomputation draws nothing; what is computed from them alone may be
    saved instead (``_drawn``)."""
    region = node.meta.get(REGION_TAG)
    if region is None or not (can_recompute(node) or region_copy(node, outputs)):
        return False
    if not all(map(_reachable_in_backward, node.all_input_nodes)) or _drawn(node):
        return False
    return all(u not in forward or u.meta.get(REGION_TAG) == region for u in node.users)


def _drawn(node: fx.Node) -> bool:
    """Whether ``node`` is computed from random values (and constants) only: ``rand_like(x) > p``, a hand-made
    dropout's mask. Random values are saved, not redrawn, so the cut may save such a value in place of the
    draws it comes from, where it is smaller (a bool mask instead of the float uniforms)."""
    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        ins = n.all_input_nodes
        if n is not node and is_rng(n):
            continue
        if n.op != "call_function" or not ins and n is node:
            return False
        todo.extend(ins)
    return any(is_rng(n) for n in seen if n is not node)


def region_input(node: fx.Node, forward: set[fx.Node]) -> bool:
    """A value an activation-checkpoint region reads from outside it (the output of the region before, or of
    untagged code): saved, never recomputed, as eager's ``checkpoint`` keeps its inputs. Recomputed, the
    backward of the last block would start by recomputing every block before it, to reach its input, and keep
    all their activations alive until their own backward: the memory of no checkpointing at all."""
    region = node.meta.get(REGION_TAG)
    return any(u in forward and u.meta.get(REGION_TAG, region) != region for u in node.users)


def _reachable_in_backward(node: fx.Node) -> bool:
    """Whether the backward can have ``node``'s value: saved, or recomputed. A tuple-valued op that is not
    recomputed (a random op, an attention kernel with dropout) cannot be saved whole: its items are saved
    instead, so a region's item of one (dropout's mask, attention's logsumexp) is not one to recompute."""
    return node.op != "call_function" or can_recompute(node) or node_bytes(node) is not None


def _min_cut(graph: fx.Graph, j: _Joint) -> list[fx.Node]:
    """The cheapest set of forward-computable values from which the backward can recompute what it reads: by
    bytes, a value the forward does not hold in memory weighing twice (``in_memory_forward``); by plain bytes
    when that cut would save more bytes than saving every value the backward reads."""
    cut = _weighted_cut(graph, j, weigh=True)
    base = sum(node_bytes(n) or 0 for n in j.boundary)
    return cut if sum(node_bytes(n) or 0 for n in cut) <= base else _weighted_cut(graph, j, weigh=False)


def _weighted_cut(graph: fx.Graph, j: _Joint, weigh: bool) -> list[fx.Node]:
    anc = _ancestors(j.boundary)
    region = [n for n in graph.nodes if n in anc and n not in j.tangent_dep and n.op != "get_attr"]
    index = {n: i for i, n in enumerate(region)}
    src, sink = 2 * len(region), 2 * len(region) + 1
    scale = len(region) + 1   # bytes first, then fewer saved values: cost = bytes * scale + 1
    net = FlowNetwork(2 * len(region) + 2)
    primals, cache = set(j.primals), {}
    outputs = set(j.fwd_outs)
    forward = _ancestors([o for o in j.fwd_outs if isinstance(o, fx.Node)]) | outputs
    copies = _aliases_of(region, j.copied)
    for n, i in index.items():
        size = node_bytes(n, cache)
        if weigh and size is not None and (n in copies or not in_memory_forward(n, j.tangent_dep, outputs)):
            size *= 2
        never = size is None or must_recompute(n, forward, outputs)
        net.add_edge(2 * i, 2 * i + 1, _INF if never else size * scale + 1 + (n in copies))
        recomputable = can_recompute(n) or region_copy(n, outputs)
        if n in primals or not recomputable or region_input(n, forward) or (
                stored_both_ways(n, j.tangent_dep) and REGION_TAG not in n.meta):
            net.add_edge(src, 2 * i, _INF)
        for a in n.all_input_nodes:
            if a in index:
                net.add_edge(2 * index[a] + 1, 2 * i, _INF)
    for n in j.boundary:
        net.add_edge(2 * index[n] + 1, sink, _INF)
    if net.max_flow(src, sink) >= _INF:
        raise PartitionError("no finite cut: a value the backward needs can neither be saved nor recomputed")
    side = net.min_cut_source_side(src)
    return [n for n in region if 2 * index[n] in side and 2 * index[n] + 1 not in side]


def _aliases_of(region: list[fx.Node], copied: frozenset[fx.Node]) -> set[fx.Node]:
    """The primals in ``copied`` and the views of them (in ``region``, in graph order): saving one of these
    makes the runtime copy it on every call (``copied_when_saved``), a store the forward would not make and one
    more op, so the cut weighs it as a value not in memory, plus one in the count: where a value the forward
    computes anyway costs as much (nanoGPT's position embedding instead of its weight), that value is saved."""
    out = set(copied)
    for n in region:
        if n not in out and _is_view(n) and any(a in out for a in n.all_input_nodes):
            out.add(n)
    return out


def copied_when_saved(traced: Any, inputs: Sequence[Any], write_backs: Iterable[tuple[int, int]]
                      ) -> frozenset[int]:
    """Indices of the inputs of ``traced`` (a ``trace.TracedGraph``) whose value the runtime copies when the
    forward saves it (``autograd.runtime``): a tensor eager's autograd does not save (the caller may change it
    in place before the backward, where eager would not notice: ``runtime._keep_aliased``) or one the function
    updates in place (its old value is cloned)."""
    keep = {i for i, _ in traced.saved_inputs} - {i for i, _ in write_backs}
    return frozenset(i for i in range(traced.num_inputs) if isinstance(inputs[i], torch.Tensor) and i not in keep)


# ----------------------------------------------------------------------------------------------------
# Building the two graphs


def _copy_nodes(new: fx.Graph, env: dict[fx.Node, Any], nodes: Iterable[fx.Node]) -> None:
    for n in nodes:
        if n not in env:
            env[n] = new.node_copy(n, lambda a: env[a])


def _map_out(env: dict[fx.Node, Any], v: Any) -> Any:
    return env[v] if isinstance(v, fx.Node) else v


def _build_fwd(joint: fx.GraphModule, j: _Joint, saved: list[fx.Node]) -> fx.GraphModule:
    graph = fx.Graph()
    env: dict[fx.Node, Any] = {}
    _copy_nodes(graph, env, j.primals)
    rng = [n for n in joint.graph.nodes if is_rng(n) and n not in j.tangent_dep]
    from ember.autograd.unbacked import introduces_unbacked, table_with_unbacked
    table = table_with_unbacked(joint)      # data-dependent sizes: their op runs (the wrapper reads its result)
    sized = [n for n in joint.graph.nodes if n.op == "call_function" and n not in j.tangent_dep and
             introduces_unbacked(n, table)] if table is not None else []
    need = _ancestors(list(j.fwd_outs) + saved + rng + sized)
    _copy_nodes(graph, env, (n for n in joint.graph.nodes if n in need and n.op != "placeholder"))
    graph.output(tuple(_map_out(env, v) for v in list(j.fwd_outs) + saved))
    return fx.GraphModule(joint, graph)


def _build_bwd(joint: fx.GraphModule, j: _Joint, saved: list[fx.Node], num_primals: int,
               grad_input_indices: list[int]) -> tuple[fx.GraphModule, list[str]]:
    graph = fx.Graph()
    env: dict[fx.Node, Any] = {}
    for n in saved + j.tangents:
        env[n] = graph.placeholder(n.name)
        env[n].meta = dict(n.meta)
    stop = set(saved) | set(j.tangents)
    need = _ancestors(j.grads, stop)
    body = [n for n in joint.graph.nodes if n in need and n not in stop]
    missing = [n.name for n in body if n.op == "placeholder"]
    if missing:
        raise PartitionError(f"backward needs primals {missing} that were not saved")
    _copy_nodes(graph, env, _autograd_order(body, j.tangent_dep))
    grads: list[Any] = [None] * num_primals
    for i, g in zip(grad_input_indices, j.grads):
        grads[i] = _map_out(env, g)
    graph.output(tuple(grads))
    recomputed = [n.name for n in body if n.op == "call_function" and n not in j.tangent_dep]
    return fx.GraphModule(joint, graph), recomputed


def _autograd_order(body: list[fx.Node], tangent_dep: set[fx.Node]) -> list[fx.Node]:
    """The backward's nodes in the order autograd would run them: the gradient computations (nodes depending on
    a tangent) in the joint graph's order, each preceded by the forward values it recomputes that no earlier
    node needed. In the joint graph's order every recomputed value (a GELU of each layer) came first and lived
    through the whole backward."""
    inside = set(body)
    done: set[fx.Node] = set()
    order: list[fx.Node] = []
    for root in [n for n in body if n in tangent_dep] + body:
        stack = [(root, False)]
        while stack:
            n, expanded = stack.pop()
            if n in done:
                continue
            if expanded:
                done.add(n)
                order.append(n)
                continue
            stack.append((n, True))
            for a in reversed(n.all_input_nodes):
                if a in inside and a not in done:
                    stack.append((a, False))
    return order


def _describe(n: fx.Node) -> str:
    val = n.meta.get("val")
    if isinstance(val, torch.Tensor) or _is_tensor_meta(val):
        dt = str(val.dtype).replace("torch.", "")
        return f"{dt}{list(val.shape)}"
    return type(val).__name__


def _summary(res: PartitionResult, saved: list[fx.Node], recompute: bool) -> str:
    mode = "min-cut, cheap ops recomputed" if recompute else "baseline, save every value the backward reads"
    lines = [f"ember partition ({mode}): saved {res.num_saved} values, {res.saved_bytes} bytes "
             f"(baseline {res.baseline_saved_bytes} bytes)"]
    for n in saved:
        lines.append(f"  saved {n.name}: {_describe(n)} = {op_name(n) if n.op == 'call_function' else n.op}, "
                     f"{node_bytes(n)} bytes")
    lines.append(f"  recomputed in backward ({len(res.recomputed)}): {', '.join(res.recomputed) or '-'}")
    lines.append("forward graph:" + res.fwd.code.rstrip())
    lines.append("backward graph:" + res.bwd.code.rstrip())
    return "\n".join(lines)


def _cut_or_baseline(graph: fx.Graph, j: _Joint) -> list[fx.Node]:
    """The min cut; where it fails, the baseline (save every forward value the backward reads: correct, more
    memory, activation-checkpoint regions not honoured), counted in ``ember.stats()["partition_fallbacks"]``
    and said once per reason under ``EMBER_LOGS=perf_hints``. Before, the failure sent the whole graph to
    eager autograd, which only the log told."""
    try:
        return _min_cut(graph, j)
    except Exception as e:  # noqa: BLE001 - any failure of the optimization leaves the baseline, counted
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    from ember import counters, logs
    counters.bump("partition_fallbacks")
    logs.log_once("perf_hints", f"partition:{reason}",
                  f"partition: the min-cut partitioner failed ({reason}); this graph's forward saves every "
                  "value its backward reads (no recomputation, checkpoint regions saved whole); counted in "
                  "ember.stats()['partition_fallbacks']")
    return list(j.boundary)


def partition_joint(joint: fx.GraphModule, num_primals: int, num_tangents: int, num_fwd_outputs: int, *,
                    recompute: bool = True,
                    grad_input_indices: Sequence[int] | None = None,
                    copied: Iterable[int] = ()) -> PartitionResult:
    """Split a functional joint graph into forward and backward graphs (see the module docstring).

    ``grad_input_indices`` says which primal each gradient output belongs to (``TracedGraph`` has it); by
    default the joint graph has one gradient output per primal. Outputs after the gradients
    (functionalization write-backs) become forward outputs: after the ``num_fwd_outputs`` ones, before the
    saved values. ``copied``: the primals the runtime copies when they are saved (``copied_when_saved``).
    """
    gidx = list(range(num_primals)) if grad_input_indices is None else list(grad_input_indices)
    j = _analyse(joint, num_primals, num_tangents, num_fwd_outputs, len(gidx))
    j.copied = frozenset(j.primals[i] for i in copied)
    saved = _cut_or_baseline(joint.graph, j) if recompute else list(j.boundary)
    fwd = _build_fwd(joint, j, saved)
    bwd, recomputed = _build_bwd(joint, j, saved, num_primals, gidx)
    res = PartitionResult(fwd, bwd, len(saved), [n.name for n in saved], recomputed, "", len(j.fwd_outs),
                          gidx,
                          sum(node_bytes(n) or 0 for n in saved), sum(node_bytes(n) or 0 for n in j.boundary))
    res.summary = _summary(res, saved, recompute)
    return res


def partition_traced(traced: Any, *, recompute: bool = True) -> PartitionResult:
    """``partition_joint`` for a functionalized ``TracedGraph`` from ``trace_aten(..., training=True)``."""
    return partition_joint(traced.gm, traced.num_inputs, traced.num_tangents, traced.num_forward_outputs,
                           recompute=recompute, grad_input_indices=traced.grad_input_indices)
