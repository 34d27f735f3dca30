"""Checkers of the loop IR's invariants, run after every pass of ``ember.codegen``'s pipeline when
``CompileOptions.verify_ir`` is on (the test suite turns it on: tests/conftest.py).

``verify_graph(graph)`` checks a ``LoopGraph``:
- node names are unique, and a node reads only buffers defined before it (inputs, constants, earlier nodes);
- the graph's inputs are its ``InputBuffer``s, at distinct positions, or its int inputs (``symbol_inputs``);
- a layout has one stride per dimension; a pointwise, reduction or scatter node has one range per dimension of
  its layout, and its loads index with its own loop variables (``x0..``, ``r0..``) only;
- a reduction names a known reduction type; a scatter writes into an earlier buffer;
- the outputs name defined buffers.

``verify_schedule(sched)`` checks a ``Schedule`` of that graph:
- every computed node runs in some step (but a scatter's target whose copy the memory plan dropped), every buffer is stored by at most one step, and a step reads from
  memory only inputs, constants and buffers stored by earlier steps;
- the graph's outputs are stored by some step (or are inputs);
- ``frees`` has one entry per step, and a freed buffer is neither read after its step nor an output.

A broken invariant raises ``IRError`` naming the pass that broke it, the node and the rule."""
from __future__ import annotations

import re
from typing import Any, Iterable

import sympy

from .expr import Bind, loads, walk
from .ir import (REDUCTION_TYPES, BufferRef, Extern, ExternOutput, InputBuffer, LoopGraph, Pointwise,
                 Reduction, Scatter)

_LOOP_VAR = re.compile(r"^([xr])(\d+)$")


class IRError(AssertionError):
    """A pass produced IR that breaks an invariant (a bug in ember, never in the user's program)."""


def _fail(where: str, msg: str) -> None:
    raise IRError(f"ember.loopir.verify: after {where}: {msg}")


def _index_vars(exprs: Iterable[Any]) -> set[sympy.Symbol]:
    out: set[sympy.Symbol] = set()
    for e in exprs:
        if isinstance(e, sympy.Basic):
            out |= e.free_symbols
    return out


def _check_loop_vars(node: Any, where: str) -> None:
    """A computed node's loads index with its own loop variables only (``x<i>`` below its rank, ``r<i>``
    below its reduction rank)."""
    nx = len(node.ranges)
    nr = len(getattr(node, "reduction_ranges", ()))
    exprs: list[Any] = []
    for ld in loads(node.body):
        exprs += [ld.index, ld.mask]
    for e in walk(node.body):
        if isinstance(e, Bind):
            exprs.append(e.extent)
    for s in _index_vars(exprs):
        m = _LOOP_VAR.match(s.name)
        if m and int(m.group(2)) >= (nx if m.group(1) == "x" else nr):
            _fail(where, f"node {node.name} indexes with {s} but has {nx} loop and {nr} reduction variables")


def _check_node(node: Any, defined: set[str], where: str) -> None:
    lay = node.layout
    if lay is not None and len(lay.shape) != len(lay.stride):
        _fail(where, f"node {node.name}: layout {lay} has {len(lay.shape)} sizes and {len(lay.stride)} strides")
    missing = sorted(node.reads() - defined)
    if missing:
        _fail(where, f"node {node.name} reads {missing} before they are defined")
    if isinstance(node, (Pointwise, Reduction)):
        if len(node.ranges) != len(lay.shape):
            _fail(where, f"node {node.name}: {len(node.ranges)} ranges for a {len(lay.shape)}-d layout")
        _check_loop_vars(node, where)
    if isinstance(node, Reduction) and node.reduce_type not in REDUCTION_TYPES:
        _fail(where, f"node {node.name}: unknown reduction {node.reduce_type!r}")
    if isinstance(node, Scatter):
        if node.target not in defined:
            _fail(where, f"scatter {node.name} writes into {node.target!r}, which is not defined before it")
        _check_loop_vars(node, where)
    if isinstance(node, ExternOutput) and node.source not in defined:
        _fail(where, f"{node.name} picks an output of {node.source!r}, which is not defined before it")


def verify_graph(graph: LoopGraph, where: str = "lower") -> None:
    """Check ``graph``'s invariants (see the module docstring); raise ``IRError`` on the first broken one."""
    defined: set[str] = set(graph.constants)
    positions: dict[int, str] = {}
    for node in graph.nodes:
        if node.name in defined and node.name not in graph.constants:
            _fail(where, f"node name {node.name!r} is defined twice")
        if isinstance(node, InputBuffer):
            if node.position >= 0 and positions.setdefault(node.position, node.name) != node.name:
                _fail(where, f"inputs {positions[node.position]} and {node.name} share position {node.position}")
        else:
            _check_node(node, defined, where)
        defined.add(node.name)
    named_inputs = {n.name for n in graph.nodes if isinstance(n, InputBuffer) and n.position >= 0}
    others = set(graph.inputs) - named_inputs - set(graph.constants) - set(graph.symbol_inputs)
    if others:
        _fail(where, f"graph inputs {sorted(others)} are neither input buffers nor int (size) inputs")
    for o in graph.outputs:
        if isinstance(o, BufferRef) and o.name not in defined:
            _fail(where, f"output {o.name!r} is not a buffer of the graph")


def _step_io(step: Any) -> tuple[list[str], list[str], list[str]]:
    """(nodes it runs, buffers it stores, buffers it reads from memory) of one schedule step."""
    if isinstance(step, (Extern, ExternOutput)):
        return [step.name], [step.name], sorted(step.reads())
    if hasattr(step, "extern"):     # codegen's matmul template: the matmul and its epilogue kernel as one step
        k = step.kernel
        return ([step.name] + ([n.name for n in k.nodes] if k else []), [step.name] + (list(k.stores) if k else []),
                sorted(step.reads()))
    if getattr(step, "nodes", None) is None:
        raise IRError(f"unknown step {type(step).__name__}: {step!r}"[:300])
    return [n.name for n in step.nodes], list(step.stores), list(step.reads)


def verify_schedule(sched: Any, where: str = "schedule", inplace: dict | None = None) -> None:
    """Check a ``Schedule`` against its graph (see the module docstring); raise ``IRError`` if broken.
    ``inplace`` is the memory plan (``{buffer: memory owner}``): a scatter stored into an input's memory may
    have dropped the step that copied the input into its target (``inplace.scatter_in_place``), and a removed
    step is ``None``."""
    graph = sched.graph
    inplace = inplace or {}
    # targets of scatters that write into another buffer's memory: their copy step may be gone
    dropped = {n.target for n in graph.nodes if isinstance(n, Scatter) and n.name in inplace}
    inputs = {n.name for n in graph.nodes if isinstance(n, InputBuffer)} | set(graph.constants) | dropped
    computed = {n.name for n in graph.nodes if not isinstance(n, InputBuffer)}
    if len(sched.frees) != len(sched.steps):
        _fail(where, f"{len(sched.frees)} free lists for {len(sched.steps)} steps")
    stored: dict[str, int] = {}
    ran: set[str] = set()
    last_read: dict[str, int] = {}
    for i, step in enumerate(sched.steps):
        if step is None:
            continue
        nodes, stores, reads = _step_io(step)
        ran.update(nodes)
        early = [r for r in reads if r not in inputs and r not in stored]
        if early:
            _fail(where, f"step {i} ({getattr(step, 'name', step)}) reads {early} before any step stores them")
        for r in reads:
            last_read[r] = i
        for s in stores:
            if s in stored:
                _fail(where, f"buffer {s!r} is stored by steps {stored[s]} and {i}")
            stored[s] = i
    if computed - ran - dropped:
        _fail(where, f"nodes {sorted(computed - ran - dropped)[:8]} run in no step")
    outputs = graph.output_names()
    lost = sorted(o for o in outputs if o not in stored and o not in inputs)
    if lost:
        _fail(where, f"outputs {lost} are stored by no step")
    for i, names in enumerate(sched.frees):
        for name in names:
            if name in outputs:
                _fail(where, f"output {name!r} is freed at step {i}")
            if last_read.get(name, -1) > i:
                _fail(where, f"buffer {name!r} is freed at step {i} but read at step {last_read[name]}")
