"""Combo kernels: consecutive independent pointwise kernels launched as one (GPU).

A GPU spends a couple of microseconds between one kernel and the next, whatever their size. An optimizer step
over 120 parameters is 120 small kernels, bound by those gaps rather than by memory bandwidth. A combo kernel
gives each of its parts its own range of program ids (``if pid < 4: part 0 ... elif pid < 8: part 1 ...``),
so the parts run side by side in one launch, each on as many programs as it had alone.

``combine(sched, inplace, eligible)`` replaces runs of consecutive eligible kernels by ``Combo`` steps. Parts
of one combo run in no particular order, so a part may not read or write memory another part writes:
buffers are compared by the memory they may be (``inplace.memory_roots``: an output stored into an input or a
dead buffer, an ATen call's result that may be a view of what it read), not by name. Parts are on one device. A combo is one step for memory planning: what its parts free dies after all of them,
so no part's output takes the memory of a buffer another part still reads. Kernel parameters are counted as the
Triton kernels take them (``kernel.share_pointers``: one per memory and dtype), up to what CUDA's 4 KB of
parameters hold: an Adam update over 120 tensors (480 pointers) is one launch.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .inplace import memory_root, memory_roots, viewed_by_externs
from .ir import Extern, Layout
from .kernel import KernelBody
from .schedule import Kernel, Schedule
from ember.heuristics import heuristics


@dataclass
class Combo(Kernel):
    """One launch of ``parts``, each over its own programs. ``nodes``, ``stores`` and ``reads`` are the
    parts' together."""
    parts: list[Kernel] = field(default_factory=list)

    def fused(self) -> str:
        return " | ".join(f"{p.name}: {p.fused()}" for p in self.parts)


@dataclass
class ComboBody:
    """A combo's parts' bodies; ``buffers`` are theirs together (one parameter each), in order."""
    kernel: Combo
    parts: list[KernelBody]
    buffers: dict = field(default_factory=dict)
    aliased: set[str] = field(default_factory=set)
    memory: dict[str, str] = field(default_factory=dict)
    shared: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for b in self.parts:
            for name, v in b.buffers.items():
                self.buffers.setdefault(name, v)
            self.aliased |= b.aliased
            self.memory.update(b.memory)
            self.shared += b.shared

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def symbols(self) -> list:
        """The parts' size symbols together, sorted by name (extra arguments after the buffers)."""
        return sorted({s for b in self.parts for s in b.symbols}, key=lambda s: s.name)


def _eligible(step: Any) -> bool:
    return isinstance(step, Kernel) and not isinstance(step, Combo) and step.rnumel == 1 and \
        isinstance(step.xnumel, int) and 0 < step.xnumel <= heuristics().combo_max_numel


class _Run:
    """Consecutive steps becoming one combo: its kernels, and the ATen calls between them that move before it."""

    def __init__(self, roots: Callable[[str], frozenset], param: Callable[[str], Any]) -> None:
        self.roots = roots
        self.param = param
        self.device: Any = None             # the first kernel's: every part's
        self.kernels: list[int] = []
        self.moved: list[int] = []
        self.writes: set[str] = set()       # memory the kernels write
        self.touched: set[str] = set()      # ... or read
        self.args: set[str] = set()

    def take(self, i: int, step: Kernel) -> bool:
        w = set().union(*map(self.roots, step.stores))
        r = set().union(*map(self.roots, step.reads))
        args = self.args | {self.param(b) for b in (*step.stores, *step.reads)}
        h = heuristics()
        if self.kernels and (len(self.kernels) >= h.combo_max_parts or len(args) > h.combo_max_args or w & self.touched
                             or r & self.writes or step.device != self.device):
            return False
        self.device = step.device
        self.kernels.append(i)
        self.writes |= w
        self.touched |= w | r
        self.args = args
        return True

    def skips(self, i: int, step: Any) -> bool:
        """An ATen call returning a new tensor (a matmul, an empty tensor), reading nothing the kernels so far
        write, moves before the combo: the kernels after it may then read its result."""
        if not (self.kernels and isinstance(step, Extern) and step.fresh and not step.multi):
            return False
        if set().union(*map(self.roots, step.reads())) & self.writes:
            return False
        self.moved.append(i)
        return True


def combine(sched: Schedule, inplace: dict[str, str], eligible: Callable[[Kernel], bool]) -> Schedule:
    """``sched`` with runs of consecutive independent pointwise kernels (those ``eligible`` takes: the
    Triton ones) as ``Combo`` steps; ``inplace`` as ``ember.loopir.inplace`` made it."""
    order: list[list[int]] = []           # new steps: [i] a step as it was, [i, j, ...] a combo of kernels
    views, memo = viewed_by_externs(sched), {}

    def roots(b: str) -> frozenset:       # the memory ``b`` may be (an ATen call's view: its input's too)
        return memory_roots(b, inplace, views, memo)
    dtypes = {n.name: n.layout.dtype for n in sched.graph.nodes if isinstance(getattr(n, "layout", None), Layout)}

    def param(b: str) -> Any:             # the kernel parameter ``b`` is passed as (``kernel.share_pointers``)
        return memory_root(b, inplace), dtypes.get(b)
    run = _Run(roots, param)
    moved: set[int] = set()

    def close() -> None:
        if len(run.kernels) > 1:
            moved.update(run.moved)
            order.extend([m] for m in run.moved)
            order.append(run.kernels)
        else:
            order.extend([i] for i in sorted(run.kernels + run.moved))

    for i, step in enumerate(sched.steps):
        if _eligible(step) and eligible(step):
            if run.take(i, step):
                continue
            close()
            run = _Run(roots, param)
            run.take(i, step)
        elif not run.skips(i, step):
            close()
            run = _Run(roots, param)
            order.append([i])
    close()
    if all(len(o) == 1 for o in order):
        return sched
    ifrees = sched.input_frees or [[] for _ in sched.steps]
    steps, frees, input_frees = [], [], []
    late: list[str] = []            # what moved ATen calls free: dies after the combo, whose parts may read it
    late_inputs: list[str] = []
    for o in order:
        if len(o) == 1:
            j = o[0]
            steps.append(sched.steps[j])
            if j in moved:
                late, late_inputs = late + sched.frees[j], late_inputs + ifrees[j]
                frees.append([])
                input_frees.append([])
            else:
                frees.append(list(sched.frees[j]))
                input_frees.append(list(ifrees[j]))
            continue
        parts = [sched.steps[j] for j in o]
        combo = Combo(f"combo{len(steps)}_{parts[0].name}", sum(p.xnumel for p in parts), 1,
                      [n for p in parts for n in p.nodes], parts=parts)
        combo.stores = [b for p in parts for b in p.stores]
        combo.reads = sorted({b for p in parts for b in p.reads})
        steps.append(combo)
        frees.append([b for j in o for b in sched.frees[j]] + late)
        input_frees.append([b for j in o for b in ifrees[j]] + late_inputs)
        late, late_inputs = [], []
    return Schedule(sched.graph, steps, frees, input_frees if sched.input_frees else [])


__all__ = ["Combo", "ComboBody", "combine"]
