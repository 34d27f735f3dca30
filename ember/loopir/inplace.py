"""In-place stores: mutated graph inputs (optimizer updates, BatchNorm running stats), and dead buffers.

A functional graph returns the new value of an input it mutates, and the runtime copies it back. When the
kernel computing that value may write it straight into the input, the copy (a second memory pass and a launch
per tensor) disappears. That is safe when:
- the value is computed by a kernel (not an extern) with exactly the input's layout, and is no other output;
- no step after that kernel reads the input, and inside the kernel every read of the input is at the point
  being stored (the same program reads the old value before writing the new one);
- no output of the graph is the input itself or a view of it (e.g. its old value saved for the backward).

A scatter into a copy of a mutated input (``cache[idx] = v``, ``x.index_add_``) scatters into the input itself
(``scatter_in_place``): the copy's kernel goes, and the step costs what the scattered points cost instead of two
passes over the whole input.
"""
from __future__ import annotations

from typing import Any, Sequence

from .expr import Load, loads, xvars
from .indexing import place
from .kernel import node_times, phase
from .ir import BufferRef, Extern, ExternOutput, InputBuffer, LoopGraph, Pointwise, Reduction, Scatter
from .schedule import Kernel, Schedule, kernel_placement, store_index


def inplace_stores(graph: LoopGraph, sched: Schedule, write_backs: Sequence[tuple[int, int]]) -> dict[str, str]:
    """{buffer: input buffer it may be stored into}."""
    inputs = {n.position: n for n in graph.nodes if isinstance(n, InputBuffer) and n.position >= 0}
    step_of = _step_of(sched)
    views: dict[str, set[str]] = viewed_by_externs(sched)
    memo: dict[str, frozenset] = {}

    def sees(b: str, inp: str) -> bool:     # ``b`` is ``inp``, or an ATen call's possible view of it
        return b == inp or (b in views and inp in memory_roots(b, {}, views, memo))
    out: dict[str, str] = {}
    for i, j in write_backs:
        if i not in inputs or j >= len(graph.outputs) or not isinstance(graph.outputs[j], BufferRef):
            continue
        inp, ref = inputs[i], graph.outputs[j]
        if _safe(graph, sched, step_of, inp, ref, j, lambda b: sees(b, inp.name)) and ref.name not in out:
            out[ref.name] = inp.name
    return out


def _safe(graph: LoopGraph, sched: Schedule, step_of: dict, inp: InputBuffer, ref: BufferRef, j: int,
          sees_inp: Any) -> bool:
    """``sees_inp(b)``: buffer ``b`` is the input or may be a view of it."""
    node = graph.node(ref.name)
    if not isinstance(node, (Pointwise, Reduction)) or ref.layout != node.layout or node.layout != inp.layout:
        return False
    for k, o in enumerate(graph.outputs):
        if isinstance(o, BufferRef) and k != j and (o.name == ref.name or sees_inp(o.name)):
            return False
    k = step_of[ref.name]
    kernel = sched.steps[k]
    for later in sched.steps[k + 1:]:
        reads = later.reads if isinstance(later, Kernel) else later.reads()
        if any(map(sees_inp, reads)):
            return False
    kernel_loads = {ld.buf for m in kernel.nodes for ld in loads(m.body)}
    if any(sees_inp(b) for b in kernel_loads - {inp.name}):
        return False
    return inp.name not in kernel_loads or _only_read_at_store(kernel, node, inp.name)


def reused_buffers(graph: LoopGraph, sched: Schedule, taken: dict[str, str],
                   reductions: bool = False) -> dict[str, str]:
    """{buffer: dead buffer whose memory it is stored into}: an output of a pointwise kernel takes the memory of
    a buffer of the same layout that dies at that kernel (allocated by the wrapper or a fresh extern: never a
    graph input), when the kernel reads that buffer only at the points it stores (a fresh allocation of a large
    tensor costs page faults on the CPU; GELU after a matmul then writes over the matmul's result, as eager's
    in-place ops do). ``reductions``: also the last node of a reduction kernel, when it is pointwise and needs
    every reduction of the kernel (Triton: a softmax writes its probabilities over the scores, one buffer of
    [batch, heads, rows, rows] fewer alive). Every load of the buffer then comes before that node's store,
    whether the rows are held in registers or looped over: a looped kernel computes a pointwise
    node in the loop after the reductions it needs (``kernel._Builder.times``), so this node's loop is the last,
    and every earlier loop's loads of the buffer come before its stores (a node needing none would be computed
    in the first loop, before later loops load the buffer again)."""
    viewed = set().union(*viewed_by_externs(sched).values())     # a view of it may be read after its last use
    owned = {n.name for n in graph.nodes if isinstance(n, (Pointwise, Reduction)) or
             (isinstance(n, Extern) and n.fresh and not n.multi)} - set(taken) - viewed
    out: dict[str, str] = {}
    used: set[str] = set(taken.values())
    for k, step in enumerate(sched.steps):
        # without ``reductions``, pointwise kernels only: a reduction kernel's loops may store a point in one loop
        # and read it in the next
        if not isinstance(step, Kernel) or (step.rnumel != 1 and not reductions):
            continue
        dead = [d for d in sched.frees[k] if d in owned and d not in used and d in step.reads]
        for name in step.stores:
            node = graph.node(name)
            if name in taken or name in out or not isinstance(node, (Pointwise, Reduction)):
                continue
            if step.rnumel != 1 and (node is not step.nodes[-1] or not isinstance(node, Pointwise) or
                                     not _after_every_reduction(step, node)):
                continue
            for d in dead:
                if graph.node(d).layout == node.layout and _only_read_at_store(step, node, d):
                    out[name] = d
                    used.add(d)
                    dead.remove(d)
                    break
    return out


def memory_root(b: str, inplace: dict[str, str]) -> str:
    """The buffer whose memory ``b`` is stored in, following ``inplace`` (buffer -> the one it is stored into)."""
    seen = set()
    while b in inplace and b not in seen:
        seen.add(b)
        b = inplace[b]
    return b


def viewed_by_externs(sched: Schedule) -> dict[str, set[str]]:
    """{output of an ATen call that may return a view (any but a fresh single result: ``unfold``,
    ``as_strided``, an item of a multi-output call): the buffers it reads}, whose memory it may share."""
    out: dict[str, set[str]] = {}
    for s in sched.steps:
        if isinstance(s, Extern) and not (s.fresh and not s.multi):
            out[s.name] = set(s.reads())
        elif isinstance(s, ExternOutput):
            out[s.name] = {s.source}
    return out


def memory_roots(b: str, inplace: dict[str, str], views: dict[str, set[str]],
                 memo: dict[str, frozenset] | None = None) -> frozenset:
    """Every buffer whose memory ``b`` may be: its ``memory_root``, and where that is an ATen call's possible
    view (``viewed_by_externs``), the roots of what the call read too."""
    memo = {} if memo is None else memo
    r = memory_root(b, inplace)
    if r not in memo:
        memo[r] = frozenset([r])        # a cycle stops here
        memo[r] = frozenset([r]).union(*(memory_roots(x, inplace, views, memo) for x in views.get(r, ())))
    return memo[r]


def _after_every_reduction(kernel: Kernel, node: Any) -> bool:
    """Whether ``node`` needs, through the kernel's nodes, every reduction the kernel computes."""
    inside = {m.name: m for m in kernel.nodes}
    todo, seen = [node], set()
    while todo:
        for ld in loads(todo.pop().body):
            if ld.buf in inside and ld.buf not in seen:
                seen.add(ld.buf)
                todo.append(inside[ld.buf])
    return all(m.name in seen for m in kernel.nodes if isinstance(m, Reduction))


def _only_read_at_store(kernel: Kernel, node: Any, buf: str) -> bool:
    """Every read of ``buf`` in the kernel is at the point ``node`` stores, ``node``'s value needs it (so the
    one load of that point comes before the store in the kernel's body), and no read of it comes after the
    store: a body with several loops (``kernel.node_times``) recomputes an inlined value in each loop that
    needs it, so a node of a later loop than ``node``'s that needs ``buf`` (``y * 0.5`` stored into ``y`` in
    the loop of ``x.sum()``, ``y * 0.5 + x.mean()`` after it) would load the new value. A read in the same
    loop, after the store, is the same load as ``node``'s (common subexpressions), made before it."""
    if not _needs(kernel, node, buf):
        return False
    target = store_index(node, kernel_placement(kernel, node))
    for m in kernel.nodes:
        g = kernel_placement(kernel, m)
        for ld in loads(m.body):  # type: ignore[attr-defined]
            if ld.buf == buf and (place(ld.index, g) != target or ld.mask is not None):
                return False
    times = node_times(kernel)
    last = phase(times[node.name])
    return not any(phase(times[m.name]) > last and _needs(kernel, m, buf) for m in kernel.nodes)


def _needs(kernel: Kernel, node: Any, buf: str) -> bool:
    inside = {m.name: m for m in kernel.nodes}
    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        for ld in loads(n.body):
            if ld.buf == buf:
                return True
            if ld.buf in inside and ld.buf not in seen:
                seen.add(ld.buf)
                todo.append(inside[ld.buf])
    return False


def _step_of(sched: Schedule) -> dict[str, int]:
    """{node name: index of the step computing it}."""
    out: dict[str, int] = {}
    for k, step in enumerate(sched.steps):
        for n in (step.nodes if isinstance(step, Kernel) else [step] if step is not None else []):
            out[n.name] = k
    return out


def scatter_in_place(graph: LoopGraph, sched: Schedule, write_backs: Sequence[tuple[int, int]],
                     inplace: dict[str, str]) -> None:
    """Scatters whose result is the new value of an input and whose target is a plain copy of that input
    store into the input's memory (``inplace[scatter] = input``); the copy leaves the schedule. Safe when
    the input has the target's layout, the scatter reads neither the input nor anything the copy's removal
    changes, no step from the scatter's on reads the input, and the input is no output of its own."""
    inputs = {n.position: n for n in graph.nodes if isinstance(n, InputBuffer) and n.position >= 0}
    step_of = _step_of(sched)
    outputs = {o.name for o in graph.outputs if isinstance(o, BufferRef)}
    for i, j in write_backs:
        if i not in inputs or j >= len(graph.outputs) or not isinstance(graph.outputs[j], BufferRef):
            continue
        inp, ref = inputs[i], graph.outputs[j]
        node = graph.node(ref.name)
        if not isinstance(node, Scatter) or ref.layout != node.layout or inp.layout != node.layout:
            continue
        target = graph.node(node.target)
        if target.body != Load(inp.name, inp.layout.index(xvars(len(target.ranges))), inp.dtype) or \
                inp.name in node.reads() or inp.name in outputs:
            continue
        k = step_of[node.name]
        later = sched.steps[k + 1:]
        if any(inp.name in (s.reads if isinstance(s, Kernel) else s.reads()) for s in later if s is not None):
            continue
        _drop_copy(sched, step_of[target.name], target, [target.name])
        inplace.pop(target.name, None)
        inplace[node.name] = inp.name


def scatter_into_dead_source(graph: LoopGraph, sched: Schedule, inplace: dict[str, str]) -> None:
    """Scatters whose target is a plain copy of a buffer that dies at that copy store into that buffer's memory
    (``inplace[scatter] = source``), and the copy leaves the schedule: an accumulation chain
    ``out = out.index_add(0, idx_e, h_e)`` over experts (a mixture of experts), or ``x = x.index_put(...)`` in
    a loop, writes each step's points into one buffer instead of copying the whole of it once per step.

    Safe when the source is memory the wrapper allocated (a kernel's output, a scatter's, or a fresh ATen
    result; no input, nothing an ATen call may view, no graph output), the copy has its layout, and no name of
    that memory is read after the copy's step (the source's ``del`` moves to the scatter's step, so nothing else
    takes the memory in between). ``scatter_in_place`` does the same for copies of mutated graph inputs."""
    step_of = _step_of(sched)
    viewed = set().union(*viewed_by_externs(sched).values(), viewed_by_externs(sched))
    outputs = {o.name for o in graph.outputs if isinstance(o, BufferRef)}
    for node in graph.nodes:
        if not isinstance(node, Scatter) or node.name in inplace and inplace[node.name] != node.target:
            continue
        target = graph.node(node.target)
        src = _copied(graph, target)
        if src is None or node.layout != target.layout or node.name not in step_of:
            continue
        t, k = step_of.get(target.name), step_of[node.name]
        if t is None or t >= k or not _dead_after(graph, sched, inplace, src, t, outputs | viewed):
            continue
        made = sched.steps[step_of.get(src.name, t)]
        if isinstance(made, Kernel) and src.name not in made.stores:
            continue        # the source is a value inside a fused kernel, never stored: the copy is its only store
        kern = sched.steps[t]
        if any(target.name in {ld.buf for ld in loads(m.body)} for m in kern.nodes if m is not target):
            continue        # a node fused beside the copy reads it
        _drop_copy(sched, t, target, [target.name, src.name])
        sched.frees[k].append(src.name)
        inplace.pop(target.name, None)
        inplace[node.name] = src.name


def _drop_copy(sched: Schedule, t: int, target: Any, unfreed: list[str]) -> None:
    """The copy ``target`` leaves its step ``t`` (the whole step when it is the step's only node), and the
    names ``unfreed`` leave the frees (the scatter that takes the memory over frees it)."""
    kern = sched.steps[t]
    if len(kern.nodes) == 1:
        sched.steps[t] = None
    else:
        kern.nodes = [m for m in kern.nodes if m is not target]
        kern.stores = [b for b in kern.stores if b != target.name]
    for frees in sched.frees:
        for b in unfreed:
            if b in frees:
                frees.remove(b)


def _copied(graph: LoopGraph, target: Any) -> Any:
    """The node ``target`` is a plain copy of (same layout, read at every point it stores), or None."""
    if not isinstance(target, Pointwise) or not isinstance(target.body, Load):
        return None
    try:
        src = graph.node(target.body.buf)
    except KeyError:
        return None
    if isinstance(src, InputBuffer) or getattr(src, "layout", None) != target.layout or \
            target.body != Load(src.name, src.layout.index(xvars(len(target.ranges))), src.dtype):
        return None
    if not isinstance(src, (Pointwise, Reduction, Scatter)) and not (isinstance(src, Extern) and src.fresh and
                                                                      not src.multi):
        return None
    return src


def _dead_after(graph: LoopGraph, sched: Schedule, inplace: dict[str, str], src: Any, t: int,
                shared: set[str]) -> bool:
    """No name of ``src``'s memory is read after step ``t``, is an output or may be viewed (``shared``)."""
    root = memory_root(src.name, inplace)
    if isinstance(graph.node(root), InputBuffer):
        return False
    names = {n.name for n in graph.nodes if memory_root(n.name, inplace) == root}
    if names & shared:
        return False
    for step in sched.steps[t + 1:]:
        if step is not None and names & set(step.reads if isinstance(step, Kernel) else step.reads()):
            return False
    return True


__all__: list[Any] = ["inplace_stores", "memory_root", "memory_roots", "reused_buffers", "scatter_in_place",
                      "scatter_into_dead_source", "viewed_by_externs"]
