"""Scheduler: group the loop IR's computed buffers into fused kernels, order them, plan memory.

Input: a ``LoopGraph``. Output: a ``Schedule``, the steps to run in order (``Kernel`` groups and ``Extern``
nodes), for each step the buffers that die after it, and which buffers a kernel must store.

A kernel iterates over ``xnumel`` outer points and, when it reduces, ``rnumel`` reduced points per outer
point. A node joins a kernel when its iteration space fits (pointwise over ``x`` or ``x*r``, reductions over
the same ``x``/``r``), every value it reads from the kernel is read at the point that computes it (so no other
thread's result is needed), and every value it reads from elsewhere is ready before the kernel starts. Groups
are tried newest first, preferring those holding the node's producers (vertical fusion), then those reading
the same inputs, then (for small pointwise kernels of one size) any ready one (horizontal fusion). Refusals are explained in ``EMBER_LOGS=schedule``.

Matmuls and convolutions are first moved up to just after what they read is computed (``_hoisted``), so
that a kernel started before one of them in the graph's order can still take the nodes reading its result (a
softmax backward, which reads the bmm of the incoming gradient, joins the kernel that recomputes the
probabilities and casts them for the other bmm). Where that is not enough (the bmm reads kernels computed
after that kernel), the kernel itself moves down past the bmm (``_sink``), with the steps that depend on it.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import sympy

from ember import logs
from ember.shapes import SymbolicUnsupported, size_hint

from .expr import loads, rvars, xvars
from .indexing import RINDEX, XINDEX, _linear, fold_divmod, place, same_size, split_point, steps_by_one
from .ir import Extern, ExternOutput, InputBuffer, LoopGraph, Node, Pointwise, Reduction, Scatter, prod
from .remat import rematerialize
from ember.heuristics import heuristics


@dataclass
class Kernel:
    name: str
    xnumel: Any
    rnumel: Any
    nodes: list[Node] = field(default_factory=list)
    stores: list[str] = field(default_factory=list)     # buffers written to memory
    reads: list[str] = field(default_factory=list)      # buffers read from memory
    # a node placed otherwise than ``placement`` would (a producer placed by its reduction's load: ``_derived``)
    placed: dict[str, list] = field(default_factory=dict)

    @property
    def device(self) -> Any:
        return self.nodes[0].device

    @property
    def is_reduction(self) -> bool:
        return self.rnumel != 1

    def fused(self) -> str:
        return ", ".join(_describe(n) for n in self.nodes)


def _describe(n: Node) -> str:
    if isinstance(n, Reduction):
        return f"{n.name}={n.reduce_type}"
    if isinstance(n, Scatter):
        return f"{n.name}=scatter{'_add' if n.accumulate else ''}({n.target})"
    ops = sorted({e.name for e in _ops(n.body)})  # type: ignore[attr-defined]
    return f"{n.name}={'+'.join(ops) or 'copy'}"


def _ops(body: Any) -> list:
    from .expr import Op, walk
    return [e for e in walk(body) if isinstance(e, Op)]


@dataclass
class Schedule:
    graph: LoopGraph
    steps: list[Any]                       # Kernel | Extern | ExternOutput
    frees: list[list[str]]                 # buffers whose last use is step i
    # graph inputs whose last use is step i (not outputs): a wrapper that owns its arguments drops them there
    input_frees: list[list[str]] = field(default_factory=list)

    def python(self) -> str:
        out = []
        for i, s in enumerate(self.steps):
            if isinstance(s, Kernel):
                out.append(f"{s.name}: x={s.xnumel} r={s.rnumel} fuses [{s.fused()}] stores {s.stores}")
            else:
                out.append(s.python())
            if self.frees[i]:
                out.append(f"  del {', '.join(self.frees[i])}")
        return "\n".join(out)


# -- placement: a node's loop variables on a kernel's xindex/rindex -----------------------------------------------
def placement(node: Node, xnumel: Any, rnumel: Any) -> list | None:
    """The (flat, vars, sizes) groups that place ``node`` in a kernel of this shape, or None."""
    if isinstance(node, Reduction):
        if prod(node.ranges) != xnumel or prod(node.reduction_ranges) != rnumel:
            return None
        return [(XINDEX, xvars(len(node.ranges)), list(node.ranges)),
                (RINDEX, rvars(len(node.reduction_ranges)), list(node.reduction_ranges))]
    if isinstance(node, Scatter):
        n = prod(node.ranges)
        return [(XINDEX, xvars(len(node.ranges)), list(node.ranges))] if n == xnumel and rnumel == 1 else None
    if not isinstance(node, Pointwise):
        return None
    n, sizes, vs = prod(node.ranges), list(node.ranges), xvars(len(node.ranges))
    if n == xnumel:
        return [(XINDEX, vs, sizes)]
    if rnumel != 1 and n == xnumel * rnumel:
        k = split_point(sizes, xnumel)
        if k is not None:
            return [(XINDEX, vs[:k], sizes[:k]), (RINDEX, vs[k:], sizes[k:])]
        return [(XINDEX * rnumel + RINDEX, vs, sizes)]
    return None


def kernel_placement(kernel: Kernel, node: Node) -> list | None:
    """``node``'s placement in ``kernel``: the one the scheduler chose, else ``placement``'s."""
    return kernel.placed.get(node.name) or placement(node, kernel.xnumel, kernel.rnumel)


def store_index(node: Node, groups: list) -> sympy.Expr:
    return place(node.store_index(), groups)  # type: ignore[attr-defined]


# -- grouping -----------------------------------------------------------------------------------------------
class _Group:
    def __init__(self, pos: int, node: Node, xnumel: Any, rnumel: Any, reads: set[str]) -> None:
        self.pos, self.xnumel, self.rnumel = pos, xnumel, rnumel
        self.nodes: list[Node] = []
        self.placed: dict[str, list] = {}
        self.by_name: dict[str, Node] = {}    # each node of the group, by name
        self.reads: set[str] = set()          # every buffer the group's nodes load (its own ones too)
        self.add(node, reads)

    def add(self, node: Node, reads: set[str]) -> None:
        self.nodes.append(node)
        self.by_name[node.name] = node
        self.reads |= reads
        self.placed[node.name] = placement(node, self.xnumel, self.rnumel)  # type: ignore[assignment]


ROW_TILED_DEVICES = {"cuda"}     # tests add "cpu" to run row-tiled pointwise kernels under Triton's interpreter


def _row_tiled(node: Node) -> bool:
    """A large pointwise node whose rows are long and of an odd length (GPT-2's logits, 50257 wide) runs as
    (rows, columns) like a reduction without accumulators: a flat index would be divided by the row length at
    every element, the row's values (a log-softmax's max and sum) gathered per element, and the loads and
    stores of rows at odd offsets could not be vectorized.

    On the CPU, a pointwise node whose rows hold at least a vector (``row_tiled_cpu_min``) and whose loads
    divide the flat index (a permuted or concatenated copy: an attention's head split and merge, the
    gradient of a fused qkv projection assembled from three transposed parts) runs so too: per row, the
    divisions, the concatenation's conditions and the row's offsets are computed once, and the row's loop
    is a vector loop (the flat form divided and tested every element in a scalar loop)."""
    r = node.ranges[-1] if isinstance(node, Pointwise) and len(node.ranges) >= 2 else None
    if isinstance(r, sympy.Expr) and r.free_symbols:
        return _row_tiled_symbolic(node, r)
    if not isinstance(r, int):
        return False
    if node.device.type in ROW_TILED_DEVICES:
        return r >= heuristics().row_tiled_min and r % 64 != 0
    return node.device.type == "cpu" and r >= heuristics().row_tiled_cpu_min and _divides_flat_index(node)


def _row_tiled_symbolic(node: Node, r: sympy.Expr) -> bool:
    """A CPU pointwise node whose rows have a symbolic length: on the flat index, a load that moves along the
    row is ``x % s1`` (a broadcast row, a padded or concatenated row), which no vector loop can take; per row,
    it is ``rindex``. Row-tiled where some load divides or takes the remainder of the flat index, and the
    rows are at least a vector long at the hints (a performance choice: the loops are right for any size)."""
    if node.device.type != "cpu" or size_hint(r) < heuristics().row_tiled_cpu_min:
        return False
    groups = [(XINDEX, xvars(len(node.ranges)), list(node.ranges))]  # type: ignore[attr-defined]
    for ld in loads(node.body):  # type: ignore[attr-defined]
        for e in (ld.index, ld.mask):
            if isinstance(e, sympy.Basic) and place(e, groups).has(sympy.floor, sympy.Mod):
                return True
    return False


def _divides_flat_index(node: Node) -> bool:
    groups = [(XINDEX, xvars(len(node.ranges)), list(node.ranges))]  # type: ignore[attr-defined]
    for ld in loads(node.body):  # type: ignore[attr-defined]
        for e in (ld.index, ld.mask):
            if isinstance(e, sympy.Basic) and place(e, groups).has(sympy.floor):
                return True
    return False


def _shape_of(node: Node) -> tuple[Any, Any]:
    if isinstance(node, Reduction):
        return prod(node.ranges), prod(node.reduction_ranges)
    if _row_tiled(node):
        return prod(node.ranges[:-1]), node.ranges[-1]  # type: ignore[attr-defined]
    return prod(node.ranges), 1  # type: ignore[attr-defined]


def _why_not(g: _Group, node: Node, where: dict[str, Any], node_loads: list, late: list | None = None,
             derived: dict | None = None) -> str | None:
    """None when ``node`` (whose body loads ``node_loads``) may join ``g``; else the reason (for
    EMBER_LOGS=schedule). With ``late`` given, buffers produced after the kernel starts are collected there
    instead of refusing (the caller may move the kernel down past them: ``_sink``). With ``derived`` given, a
    reduction may join a pointwise kernel by placing its nodes on the reduction's order (``_derived``): their
    placements are put there."""
    if node.device != g.nodes[0].device:
        return "different device"
    if len(g.nodes) >= heuristics().max_kernel_nodes:
        return "kernel is full"
    if isinstance(node, Scatter) or isinstance(g.nodes[0], Scatter):
        return "a scatter runs in a kernel of its own (every point of its target must be written first, and " \
               "any point of its result may come from any of its points)"
    xn, rn = g.xnumel, g.rnumel
    placed, alt = g.placed, None
    if isinstance(node, Reduction) and g.rnumel == 1:
        xn, rn = _shape_of(node)
        if any(placement(m, xn, rn) is None for m in g.nodes):
            return f"reduction over {rn} does not fit pointwise kernel of {g.xnumel}"
        groups = placement(node, xn, rn)
        placed = {m.name: placement(m, xn, rn) for m in g.nodes}
        disorder = any(_out_of_order(m, xn, rn, [node]) for m in g.nodes)
        if derived is not None and (disorder or any(
                ld.buf in g.by_name and place(ld.index, groups) != store_index(g.by_name[ld.buf], placed[ld.buf])
                for ld in node_loads)):
            alt = _derived(g, node, xn, rn, node_loads)
        if alt is not None:
            placed = alt
        elif disorder:
            return OUT_OF_ORDER
    groups = placement(node, xn, rn)
    if groups is None:
        return f"iteration space {_shape_of(node)} does not fit kernel ({g.xnumel}, {g.rnumel})"
    if _out_of_order(node, xn, rn, g.nodes):
        return OUT_OF_ORDER
    for ld in node_loads:
        prod_node = g.by_name.get(ld.buf)
        if prod_node is not None:
            pg = placed.get(prod_node.name)
            if pg is None:
                return "producer does not fit"
            if isinstance(prod_node, Reduction) and isinstance(node, Reduction) and \
                    RINDEX in place(ld.index, groups).free_symbols:
                return f"reads reduction {ld.buf} inside its own reduction loop"
            if place(ld.index, groups) != store_index(prod_node, pg):
                return f"reads {ld.buf} at another point than the one computing it"
        elif where.get(ld.buf, -1) >= g.pos:
            if late is None:
                return f"reads {ld.buf}, produced after the kernel starts"
            late.append(ld.buf)
    if alt is not None:
        derived.update(alt)  # type: ignore[union-attr]
    return None


def _derived(g: _Group, red: Node, xn: Any, rn: Any, red_loads: list) -> dict[str, list] | None:
    """Placements of a pointwise kernel's nodes on the rows of reduction ``red`` that reads one of them, P, at
    every point once: each node's flat index becomes ``red``'s placed index of P (so P is computed, and stored,
    at the point the reduction reads it, and the other nodes at the points they were computed with P). A
    channels-last value feeding a per-channel reduction (a batch norm backward's output gradient, stored for
    its input gradient too, feeding its sums; on CUDA the split sums' partials) is then computed in the sums'
    kernel in their order instead of being stored by one kernel and read back by the next. None when ``red``
    reads no such node: the read is masked, broadcast or not a permutation of P's contiguous points."""
    if any(not isinstance(m, Pointwise) or prod(m.ranges) != xn * rn for m in g.nodes):
        return None
    groups = placement(red, xn, rn)
    syms = xvars(len(red.ranges)) + rvars(len(red.reduction_ranges))  # type: ignore[attr-defined]
    sizes = list(red.ranges) + list(red.reduction_ranges)  # type: ignore[attr-defined]
    for ld in red_loads:
        p = g.by_name.get(ld.buf)
        if p is None or ld.mask is not None or not p.layout.is_contiguous() or \
                not _permutes(ld.index, syms, sizes, prod(p.ranges)):  # type: ignore[attr-defined]
            continue
        flat = place(ld.index, groups)
        return {m.name: [(flat, xvars(len(m.ranges)), list(m.ranges))] for m in g.nodes}  # type: ignore
    return None


def _permutes(index: Any, syms: list, sizes: list, numel: Any) -> bool:
    """Whether ``index`` (linear in ``syms`` of ``sizes``) visits each of ``0..numel-1`` exactly once: its
    coefficients, ordered, are the contiguous strides of the sizes taken in that order. With symbolic sizes the
    order is taken at the hints and each coefficient then checked structurally (a channels-last value of a
    symbolic batch), so the answer holds for every value of the symbols."""
    if not isinstance(index, sympy.Basic):
        return False
    coeffs = _linear(fold_divmod(sympy.expand(index)), syms)
    if coeffs is None or not same_size(coeffs.pop(None, 0), 0):
        return False
    runs = [(c, n) for v, n in zip(syms, sizes) if n != 1 for c in [coeffs.get(v, 0)]]
    if any(_hint(c) is None or _hint(n) is None for c, n in runs):
        return False
    runs.sort(key=lambda cn: (_hint(cn[0]), _hint(cn[1])))
    stride: Any = 1
    for c, n in runs:
        if not same_size(c, stride):
            return False
        stride *= n
    return same_size(stride, numel)


OUT_OF_ORDER = ("its points would be visited in flat order on the rows of a reduction reading its input across "
                "rows (a per-channel sum over channels-last data): neither would run contiguously")


def _out_of_order(node: Node, xnumel: Any, rnumel: Any, reductions: list[Node]) -> bool:
    """Whether a pointwise ``node`` would sit on a reduction kernel of this shape by the flat fallback placement
    (its points in (xindex, rindex) order, each kernel row a contiguous run of its buffer) while a reduction
    of the kernel keeps its contiguous dim on xindex (an outer reduction: a channels-last batch norm's
    per-channel sums). Joined for the gradient both read, a batch norm's input gradient and the next one's
    sums ran in one scalar loop with the sums' loads strided: 9.6-11 ms on the CPU against about 2 for the sums
    alone, and on an H100 such kernels ran at 40% of the bandwidth of the others."""
    if not isinstance(node, Pointwise) or rnumel == 1 or prod(node.ranges) != xnumel * rnumel or \
            split_point(list(node.ranges), xnumel) is not None:
        return False
    return any(_outer(r) for r in reductions)


def _outer(red: Node) -> bool:
    if not isinstance(red, Reduction):
        return False
    xs, rs = xvars(len(red.ranges)), rvars(len(red.reduction_ranges))
    idx = [ld.index for ld in loads(red.body) if isinstance(ld.index, sympy.Basic)]
    return bool(xs) and any(steps_by_one(i, xs[-1]) for i in idx) and \
        not any(steps_by_one(i, r) for i in idx for r in rs)


def _movable(n: Node) -> bool:
    """An ATen call the scheduler may reorder: one returning a new tensor from the buffers it reads, with no
    other effect (a matmul or convolution)."""
    return isinstance(n, Extern) and n.fresh and not n.multi


def _hoisted(nodes: list[Node]) -> list[Node]:
    """``nodes`` with each matmul and convolution (an ATen call returning a new tensor from the buffers it
    reads, with no other effect) moved up to just after the last node producing what it reads. Other ATen
    calls stay in place, and nothing moves above one of them."""
    out: list[Node] = []
    pos: dict[str, int] = {}
    fence = -1
    for n in nodes:
        at = len(out)
        if _movable(n):
            at = max([pos.get(r, -1) for r in n.reads()] + [fence]) + 1
        elif isinstance(n, (Extern, ExternOutput)):
            fence = at
        out.insert(at, n)
        for i in range(at, len(out)):
            pos[out[i].name] = i
    return out


def schedule(graph: LoopGraph, spread: Collection[Any] = ()) -> Schedule:
    """``spread``: the devices whose kernels run on a GPU, independent ones launched together as combo
    kernels (see ``spread_max_points``)."""
    where: dict[str, int] = {}          # buffer -> position of the step producing it
    groups: list[_Group] = []
    steps: list[Any] = []               # _Group | Extern | ExternOutput, in order
    log = logs.enabled("schedule")
    numel = {n.name: prod(n.layout.shape) for n in graph.nodes if getattr(n, "layout", None) is not None}
    for node in _hoisted(graph.nodes):
        if isinstance(node, InputBuffer):
            where[node.name] = -1
            continue
        if isinstance(node, (Extern, ExternOutput)):
            where[node.name] = len(steps)
            steps.append(node)
            continue
        node_loads = loads(node.body)  # type: ignore[attr-defined]
        deps = node.reads() if isinstance(node, Scatter) else {ld.buf for ld in node_loads}
        best, reasons = None, []
        big = _big_reads(node, numel)
        derived: dict[int, dict] = {}     # placements of a kernel's nodes on the joining reduction's order
        side = None       # for a tiny node, the latest kernel it may join horizontally, sharing nothing
        tiny = _tiny(node)
        # reductions keep the wide cap: combo kernels take pointwise kernels only
        h = heuristics()
        cap = (h.spread_max_points, h.spread_max_streams) if isinstance(node, Pointwise) and node.device in spread \
            else (heuristics().horizontal_max_points, None)
        for g in reversed(groups):
            d: dict = {}
            why = _why_not(g, node, where, node_loads, derived=d)
            if why is None:
                derived[id(g)] = d
                score = (len(deps & g.by_name.keys()), len(g.reads & deps & big))
                if best is None or score > best[0]:
                    best = (score, g)
                if tiny and side is None and _horizontal(g, node, deps, cap):
                    side = g
            elif log and deps & g.by_name.keys():
                reasons.append(f"{node.name} not fused into kernel with {[m.name for m in g.nodes]}: {why}")
        if best is None:
            best = _sunk(groups, steps, where, node, node_loads, deps, big)
        if side is not None and (best is None or not (best[0][0] or best[0][1])):
            best = ((0, 0), side)
        if best is not None and (best[0][0] or best[0][1] or _horizontal(best[1], node, deps, cap)):
            g = best[1]
            if isinstance(node, Reduction) and g.rnumel == 1:
                g.xnumel, g.rnumel = _shape_of(node)
                g.placed = derived.get(id(g)) or {m.name: placement(m, g.xnumel, g.rnumel) for m in g.nodes}
            g.add(node, deps)
            where[node.name] = g.pos
        else:
            for r in reasons:
                logs.log("schedule", r)
            xn, rn = _shape_of(node)
            g = _Group(len(steps), node, xn, rn, deps)
            groups.append(g)
            where[node.name] = g.pos
            steps.append(g)
    return _finish(graph, steps)


def _sunk(groups: list[_Group], steps: list[Any], where: dict[str, int], node: Node, node_loads: list,
          deps: set[str], big: set[str]) -> tuple | None:
    """A kernel holding a producer of ``node``, or reading what ``node`` reads (of ``big``), that ``node`` could
    join but for buffers computed after the kernel starts, moved down past them (``_sink``): (score, kernel), or
    None."""
    for g in reversed(groups):
        late: list[str] = []
        shared = g.reads & deps & big
        if (deps & g.by_name.keys() or shared) and _why_not(g, node, where, node_loads, late) is None and late \
                and _sink(g, late, steps, where, groups):
            return (len(deps & g.by_name.keys()), len(shared)), g
    return None


def _tiny(node: Node) -> bool:
    """A node of at most ``tiny_numel`` points (a per-channel vector): it may join any earlier kernel of its shape
    horizontally, not only the latest one, so that a graph's per-channel values take one launch, not one each."""
    xn, rn = _shape_of(node)
    points = _hint(xn * rn)
    return points is not None and points <= heuristics().tiny_numel


def _big_reads(node: Node, numel: dict[str, Any]) -> set[str]:
    """The buffers ``node`` reads whose sharing counts towards joining a kernel (see ``shared_read_fraction``):
    all of them for a node of at most ``horizontal_max_numel`` points. Symbolic sizes are weighed at their hints
    (the first call's sizes), as static ones: a choice of kernels, either of which is correct."""
    xn, rn = _shape_of(node)
    deps = node.reads()
    points = _hint(xn * rn)
    if points is None or points <= heuristics().horizontal_max_numel:
        return deps
    h = heuristics()
    return {b for b in deps if _hint(numel.get(b)) is None or _hint(numel[b]) * h.shared_read_fraction >= points}


def _hint(n: Any) -> int | None:
    """A size at its hint (the first call's value of its symbols), or None without one (an unbacked size)."""
    if n is None:
        return None
    try:
        return int(size_hint(n))
    except (ValueError, TypeError, SymbolicUnsupported):
        return None


def _step_io(s: Any) -> tuple[set[str], set[str]]:
    if isinstance(s, _Group):
        return s.reads, set(s.by_name)
    return s.reads(), {s.name}


def _sink(g: _Group, late: list[str], steps: list[Any], where: dict[str, int], groups: list[_Group]) -> bool:
    """Move kernel ``g`` down to just after the steps producing ``late``: the steps in between that do not
    depend on ``g`` go first, then ``g``, then those that do (in their order). Refused when a step in between
    is an ATen call other than a matmul or convolution, or when a ``late`` buffer depends on ``g``."""
    end = max(where[b] for b in late)
    before, after = [], []
    tainted = set(g.by_name)
    for s in steps[g.pos + 1:end + 1]:
        if isinstance(s, (Extern, ExternOutput)) and not _movable(s):
            return False
        reads, made = _step_io(s)
        if reads & tainted:
            tainted |= made
            after.append(s)
        else:
            before.append(s)
    if tainted & set(late):
        return False
    steps[g.pos:end + 1] = before + [g] + after
    for i, s in enumerate(steps):
        if isinstance(s, _Group):
            s.pos = i
        for name in _step_io(s)[1]:
            where[name] = i
    groups.sort(key=lambda k: k.pos)
    return True


def _horizontal(g: _Group, node: Node, reads: set[str], cap: tuple[int, int | None]) -> bool:
    """Small independent kernels of one iteration space share a launch, up to a total of ``cap[0]`` buffer points
    and ``cap[1]`` buffers (None: any): pointwise ones, and reductions (the final sums of split reductions,
    per-channel statistics). Symbolic sizes count at their hints (a performance choice: either is correct)."""
    xn, rn = _shape_of(node)
    points = _hint(xn * rn)
    if (xn, rn) != (g.xnumel, g.rnumel) or points is None or points > heuristics().horizontal_max_numel:
        return False
    if not (isinstance(node, Pointwise) or (isinstance(node, Reduction) and rn != 1)):
        return False
    streams = g.reads | reads | g.by_name.keys() | {node.name}
    return len(streams) * points <= cap[0] and (cap[1] is None or len(streams) <= cap[1])


def _finish(graph: LoopGraph, steps: list[Any]) -> Schedule:
    outputs = graph.output_names()
    users = graph.users()
    by_name = {n.name: n for n in graph.nodes}
    log = logs.enabled("schedule")
    stored = {n.name for n in graph.nodes if isinstance(n, InputBuffer)}     # buffers in memory so far
    kernels: list[Any] = []
    owner: dict[str, int] = {}
    k = 0
    for i, s in enumerate(steps):
        if isinstance(s, _Group):
            kern = Kernel(f"kernel{k}", s.xnumel, s.rnumel, s.nodes)
            kern.placed = {m: pl for m, pl in s.placed.items() if pl != placement(s.by_name[m], s.xnumel, s.rnumel)}
            k += 1
            names = {m.name for m in s.nodes}
            kern.stores = [m.name for m in s.nodes if m.name in outputs or users[m.name] - names
                           or isinstance(m, Scatter)]
            reads = set().union(*(m.reads() for m in s.nodes)) - names
            gone = rematerialize(s.nodes, reads, by_name, stored, graph.hoisted)
            if gone:
                reads = set().union(*(m.reads() for m in s.nodes)) - names
                if log:
                    logs.log("schedule", f"{kern.name} recomputes {gone} from buffers it reads, not loading them")
            kern.reads = sorted(reads)
            stored |= set(kern.stores)
            for m in s.nodes:
                owner[m.name] = i
            kernels.append(kern)
        else:
            owner[s.name] = i
            stored.add(s.name)
            kernels.append(s)
    # memory: a buffer dies after its last reading step (graph outputs and inputs live on). A node's reads are
    # a set: sorted, so the frees (the wrapper's ``del`` lines) do not depend on the process's string hash seed
    # (the whole-graph cache compares a rebuilt wrapper's source with the one another process wrote)
    last: dict[str, int] = {}
    for i, s in enumerate(kernels):
        for r in (s.reads if isinstance(s, Kernel) else sorted(s.reads())):
            last[r] = i
    frees: list[list[str]] = [[] for _ in kernels]
    stored = {n for s in kernels if isinstance(s, Kernel) for n in s.stores} | \
        {s.name for s in kernels if not isinstance(s, Kernel)}
    inputs = {n.name for n in graph.nodes if isinstance(n, InputBuffer) and n.position >= 0}
    input_frees: list[list[str]] = [[] for _ in kernels]
    for name, i in last.items():
        if name in stored and name not in outputs:
            frees[i].append(name)
        elif name in inputs and name not in outputs:
            input_frees[i].append(name)
    return Schedule(graph, kernels, frees, input_frees)


__all__ = ["Kernel", "Schedule", "kernel_placement", "placement", "schedule", "store_index"]
