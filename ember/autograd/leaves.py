"""Graphs that make one of their own tensors require grad (``h.requires_grad_()`` / ``h.requires_grad = True``
on an intermediate, as Wav2Vec2's feature encoder does in training).

``requires_grad_`` is an autograd-level call, not an ATen op: tracing the graph on fake tensors under the
autograd engine runs it as eager does (the tensors after it require grad, the gradient stops at it), and the
recorded ATen graph simply has no node for it. That is right in a training variant whose every output that
requires grad also depends on an input that requires grad (the compiled function's outputs get their grad_fn
through its inputs); otherwise the graph runs with eager autograd. A graph input's flag is the caller's
object: ``requires_grad_`` on a placeholder always runs as captured.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.fx as fx

from ember.errors import AotError


def own_leaf(n: fx.Node) -> bool:
    """Whether ``requires_grad_`` node ``n`` acts on a tensor the graph made (not a graph input)."""
    return bool(n.args) and getattr(n.args[0], "op", "") != "placeholder"


def makes_leaves(gm: Any) -> bool:
    """Whether ``gm`` (a captured graph, or a plain function of tensors: no graph to look at) has one."""
    graph = getattr(gm, "graph", None)
    return graph is not None and any(n.op == "call_method" and n.target == "requires_grad_" for n in graph.nodes)


def check_leaf_outputs(traced: Any, unconnected: Sequence[int]) -> None:
    """Raise ``AotError`` (the graph runs with eager autograd) if an output of ``traced`` (a ``TracedGraph``) requires grad but depends on no
    input that requires grad and that autograd reaches (``unconnected``: the inputs it does not reach)."""
    phs = [n for n in traced.gm.graph.nodes if n.op == "placeholder"]
    skip = set(unconnected)
    reach = {phs[i] for i in traced.grad_input_indices if i < len(phs) and i not in skip}
    for n in traced.gm.graph.nodes:
        if n.op == "call_function" and any(a in reach for a in n.all_input_nodes):
            reach.add(n)
    out = next(n for n in traced.gm.graph.nodes if n.op == "output")
    for o in list(out.args[0])[:traced.num_forward_outputs]:
        v = o.meta.get("val") if isinstance(o, fx.Node) else None
        if isinstance(v, torch.Tensor) and v.requires_grad and o not in reach:
            raise AotError("an output requires grad only through a tensor the graph made require grad")


# Ops that change a tensor's metadata in place (or make it require grad): functionalization has no
# functional form for them, so a graph calling one runs as captured
_METADATA_INPLACE = frozenset({"t_", "transpose_", "swapdims_", "swapaxes_", "unsqueeze_", "squeeze_", "resize_",
                               "resize_as_", "as_strided_", "set_", "requires_grad_", "share_memory_"})


def eager_only_reason(gm: fx.GraphModule, training: bool) -> str | None:
    """Why a variant (training or not) of captured graph ``gm`` must run as captured, or None."""
    for n in gm.graph.nodes:
        name = n.target if n.op == "call_method" else getattr(n.target, "__name__", "") if n.op == "call_function" \
            else ""
        if name in _METADATA_INPLACE and not (name == "requires_grad_" and training and own_leaf(n)):
            return f"Tensor.{name} changes a tensor's metadata in place"
    return None
