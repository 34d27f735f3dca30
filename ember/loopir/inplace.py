"""In-place stores for mutated graph inputs (optimizer updates, BatchNorm running stats).

A functional graph returns the new value of an input it mutates, and the runtime copies it back. When the
kernel computing that value may write it straight into the input, the copy (a second memory pass and a launch
per tensor) disappears. That is safe when:
- the value is computed by a kernel (not an extern) with exactly the input's layout, and is no other output;
- no step after that kernel reads the input, and inside the kernel every read of the input is at the point
  being stored (the same program reads the old value before writing the new one);
- no output of the graph is the input itself or a view of it (e.g. its old value saved for the backward).
"""
from __future__ import annotations

from typing import Any, Sequence

from .ir import BufferRef, InputBuffer, LoopGraph, Pointwise, Reduction
from .schedule import Kernel, Schedule, placement, store_index


def inplace_stores(graph: LoopGraph, sched: Schedule, write_backs: Sequence[tuple[int, int]]) -> dict[str, str]:
    """{buffer: input buffer it may be stored into}."""
    inputs = {n.position: n for n in graph.nodes if isinstance(n, InputBuffer) and n.position >= 0}
    step_of: dict[str, int] = {}
    for k, step in enumerate(sched.steps):
        for n in (step.nodes if isinstance(step, Kernel) else [step]):
            step_of[n.name] = k
    out: dict[str, str] = {}
    for i, j in write_backs:
        if i not in inputs or j >= len(graph.outputs) or not isinstance(graph.outputs[j], BufferRef):
            continue
        inp, ref = inputs[i], graph.outputs[j]
        if _safe(graph, sched, step_of, inp, ref, j) and ref.name not in out:
            out[ref.name] = inp.name
    return out


def _safe(graph: LoopGraph, sched: Schedule, step_of: dict, inp: InputBuffer, ref: BufferRef, j: int) -> bool:
    node = graph.node(ref.name)
    if not isinstance(node, (Pointwise, Reduction)) or ref.layout != node.layout or node.layout != inp.layout:
        return False
    for k, o in enumerate(graph.outputs):
        if isinstance(o, BufferRef) and k != j and o.name in (ref.name, inp.name):
            return False
    k = step_of[ref.name]
    kernel = sched.steps[k]
    for later in sched.steps[k + 1:]:
        reads = later.reads if isinstance(later, Kernel) else later.reads()
        if inp.name in reads:
            return False
    groups = placement(node, kernel.xnumel, kernel.rnumel)
    target = store_index(node, groups)
    from .expr import loads
    from .indexing import place
    for m in kernel.nodes:
        g = placement(m, kernel.xnumel, kernel.rnumel)
        for ld in loads(m.body):  # type: ignore[attr-defined]
            if ld.buf == inp.name and place(ld.index, g) != target:
                return False
    return True


__all__: list[Any] = ["inplace_stores"]
