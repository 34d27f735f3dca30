"""The reference partitioner: split a joint graph at the tangents, saving every forward value the backward reads
(no recomputation). ``ember.autograd.partition.partition_joint`` (the min cut) is tested against it; the tests
put it in the min cut's place through ``aot._partitioner``."""
from __future__ import annotations

from typing import Any, Sequence

import torch.fx as fx

from ember.autograd.partition import PartitionResult, is_rng
from ember.decomp.core import is_impure_node
from ember.errors import AotError


def fallback_partition(joint: fx.GraphModule, num_primals: int, num_tangents: int, num_fwd_outputs: int, *,
                       recompute: bool = True, copied: Any = ()) -> PartitionResult:
    """Split ``joint`` at the tangents: every node not depending on a tangent runs in the forward, and every
    such value the backward reads is saved (``recompute``, ``copied``: the real partitioner's signature)."""
    del recompute, copied
    nodes = list(joint.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    primals, tangents = placeholders[:num_primals], placeholders[num_primals:num_primals + num_tangents]
    out_node = next(n for n in nodes if n.op == "output")
    outs = list(out_node.args[0])
    fwd_outs, grad_outs = outs[:num_fwd_outputs], outs[num_fwd_outputs:]
    bwd_side = set(tangents)
    for n in nodes:
        if n.op == "call_function" and any(a in bwd_side for a in n.all_input_nodes):
            bwd_side.add(n)
    needed = _ancestors([g for g in grad_outs if isinstance(g, fx.Node)])
    saved: list[fx.Node] = []
    for n in nodes:
        if n in needed and n not in bwd_side and n.op != "get_attr" and n.op != "output":
            if any(u in bwd_side and u in needed for u in n.users) or n in grad_outs:
                saved.append(n)
    draws = [n for n in nodes if is_rng(n) and n not in bwd_side]    # run even if unread, as eager does
    fwd = _subgraph(joint, primals, fwd_outs + saved, draws)
    bwd = _subgraph(joint, saved + tangents, grad_outs)
    names = [n.name for n in saved]
    summary = f"fallback partitioner: saved {len(saved)} values ({', '.join(names) or 'none'}), recomputed 0"
    return PartitionResult(fwd, bwd, len(saved), names, [], summary, num_fwd_outputs)


def _ancestors(roots: list[fx.Node], stop: frozenset | set = frozenset()) -> set[fx.Node]:
    seen: set[fx.Node] = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            if n not in stop:
                stack.extend(n.all_input_nodes)
    return seen


def _subgraph(joint: fx.GraphModule, inputs: list[fx.Node], outputs: list[Any],
              effects: Sequence[fx.Node] = ()) -> fx.GraphModule:
    """A graph computing ``outputs`` from ``inputs`` (the rest of what they need is copied from ``joint``), and
    running the ``effects`` nodes too (random draws nothing reads)."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in inputs:
        env[n] = graph.placeholder(n.name)
        env[n].meta = dict(n.meta)
    needed = _ancestors([o for o in outputs if isinstance(o, fx.Node)] + list(effects), set(inputs))
    for n in joint.graph.nodes:
        if n in env or n not in needed:
            continue
        if n.op == "placeholder":
            raise AotError(f"partition: {n.name} is needed but is not an input of this graph")
        env[n] = graph.node_copy(n, lambda a: env[a])
    graph.output(tuple(env[o] if isinstance(o, fx.Node) else o for o in outputs))
    graph.eliminate_dead_code(is_impure_node)
    return fx.GraphModule(joint, graph)
