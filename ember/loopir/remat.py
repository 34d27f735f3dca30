"""Recomputing a stored value in a kernel that reads what it is computed from (after scheduling).

A value stored for an ATen call (a batch norm's ReLU output, the input of a convolution's weight gradient) may
also be read by kernels that read, anyway, every buffer of its size it is computed from: the batch norm
backward's sums and input gradient read the convolution output ``x``, and the ReLU mask ``relu(bn(x)) > 0``
needs only ``x`` and per-channel vectors. Such a kernel computes the value from those buffers instead of loading
it: one full buffer fewer read, a few flops more. The lowering cannot see this (it decides per value, before
fusion puts the sums and the mask's other reads in one kernel); the scheduled kernels can.

Input: a scheduled kernel, its nodes, and the graph's nodes by name. Output: the kernel's nodes with such loads
replaced by the value's body placed at the load's index (the value's own loads then read the kernel's buffers
at the same points). Invariant: a value is recomputed only where every buffer of its size it reads is already
read by the kernel, its body is cheap (no expensive op, fewer than ``remat_max_ops`` ops, no gathers), it is
stored contiguous, and no load of it in the kernel is masked.
"""
from __future__ import annotations

from typing import Any

from .expr import EXPENSIVE_OPS, Bind, Load, Op, cast, loads, size, substitute, walk, xvars
from .indexing import place
from .ir import Node, Pointwise, Scatter, prod
from ember.heuristics import heuristics


def full_reads(v: Pointwise, graph_nodes: dict[str, Node]) -> set[str] | None:
    """The buffers ``v`` reads that are not small (a broadcast row or column, a per-channel vector: under
    1/``remat_small_fraction`` of ``v``'s points); None when its body is not one to recompute (expensive, large, or a
    gather)."""
    body = v.body
    h = heuristics()
    if size(body) >= h.remat_max_ops or any(isinstance(e, Bind) or (isinstance(e, Op) and e.name in EXPENSIVE_OPS)
                                          for e in walk(body)):
        return None
    need = {x for x, n in zip(xvars(len(v.ranges)), v.ranges) if n != 1}
    out = set()
    for ld in loads(body):
        if not hasattr(ld.index, "free_symbols"):
            return None
        lay = getattr(graph_nodes.get(ld.buf), "layout", None)
        small = lay is not None and isinstance(lay.numel(), int) and isinstance(prod(v.ranges), int) and \
            lay.numel() * heuristics().remat_small_fraction <= prod(v.ranges)
        if need <= ld.index.free_symbols or not small:
            out.add(ld.buf)
    return out


def rematerialize(nodes: list[Node], reads: set[str], graph_nodes: dict[str, Node], stored: set[str],
                  hoisted: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """Recompute in ``nodes`` (one kernel, reading ``reads`` from memory) each stored value they load whose
    full-size inputs the kernel reads anyway, and whose every input is in memory by then (in ``stored``: not a
    value an earlier kernel kept in registers, such as a norm's row statistics); returns the values no longer
    loaded. Values in ``hoisted`` (stored by the lowering so that large kernels load them: ``lower._hoist``) are
    not recomputed."""
    if any(isinstance(m, Scatter) for m in nodes):
        return []
    own = {m.name for m in nodes}
    done = []
    for name in sorted(reads):
        v = graph_nodes.get(name)
        if not isinstance(v, Pointwise) or name in own or not v.layout.is_contiguous() or name in hoisted:
            continue
        full = full_reads(v, graph_nodes)
        if not full or not full <= reads - {name} or not v.reads() <= stored:
            continue
        if any(ld.buf == name and ld.mask is not None for m in nodes for ld in loads(m.body)):  # type: ignore
            continue
        for m in nodes:
            m.body = substitute(m.body, lambda e: e, load=lambda ld, v=v: _inline(v, ld) if ld.buf == v.name else ld)
        done.append(name)
    return done


def _inline(v: Pointwise, ld: Load) -> Any:
    """``v``'s value at ``ld``'s point, rounded as its store rounds it (a float32 body stored bf16)."""
    groups = [(ld.index, xvars(len(v.ranges)), list(v.ranges))]
    return cast(cast(substitute(v.body, lambda e: place(e, groups)), v.layout.dtype), ld.dtype)
