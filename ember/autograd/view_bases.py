"""Outputs that are overlapping views of an intermediate the graph does not return: their base, exposed.

Input: a captured graph (torch-level FX, each node's ``meta["example_value"]`` a meta tensor whose storage is
shared with the views of it). Output: the same graph returning, after its own outputs, the base of each group of
outputs that are views of one intermediate, share memory, and have no base among the outputs
(``b = x * 2; return b[0:2], b[1:3]``); and how many such hidden outputs it added, which the caller drops.

Why: the compiled graphs return each output in its own buffer. ``aliasing.output_views`` rebuilds an output as a
view of another output that holds it, but views of an intermediate that no output holds came back as separate
buffers: a later in-place update of one (after a graph break, or by the caller) did not reach the other, in value
or in gradient. With the base returned too, those outputs are rebuilt as views of it, as eager's are.

Invariants:
- Only groups whose members overlap in memory (two outputs with a common element, or an expanded one) are
  exposed: views that share no element (``split``, ``chunk``, ``q, k = qkv[..., :d], qkv[..., d:]``) are
  indistinguishable from separate buffers for values and gradients, and cost nothing extra.
- Static layouts only (as ``output_views``); a base that is an input or a parameter is the input-alias path's.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch.utils._python_dispatch import _disable_current_modes as _no_modes

MAX_EXACT_ELEMENTS = 1 << 20     # larger views: overlapping extents count as overlapping (exposing is safe)


def expose_view_bases(gm: fx.GraphModule) -> tuple[fx.GraphModule, int]:
    """A graph like ``gm`` (``gm`` itself where there is nothing to expose) returning the hidden bases after
    its outputs, and their number."""
    out = next((n for n in reversed(gm.graph.nodes) if n.op == "output"), None)
    if out is None or not isinstance(out.args[0], (tuple, list)):
        return gm, 0
    outs = list(out.args[0])
    groups: dict[fx.Node, list[fx.Node]] = {}
    for o in outs:
        root = _root(o)
        if root is not None and root is not o:
            groups.setdefault(root, []).append(o)
    bases = [r for r, members in groups.items() if r not in outs and _overlapping([_val(m) for m in members])]
    if not bases:
        return gm, 0
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    rv = graph.graph_copy(gm.graph, env)
    graph.output(type(out.args[0])(list(rv) + [env[b] for b in bases]))
    new = fx.GraphModule(gm, graph)
    new.meta.update(gm.meta)
    return new, len(bases)


def _val(n: Any) -> Any:
    return n.meta.get("example_value") if isinstance(n, fx.Node) else None


def _static(t: torch.Tensor) -> bool:
    return all(type(d) is int for d in (*t.shape, *t.stride(), t.storage_offset()))


def _storage(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return None


def _root(node: Any) -> fx.Node | None:
    """The node that made the memory ``node``'s value views (following tensor arguments with its storage), or
    None where that is an input, an attribute or not a static-layout tensor."""
    v = _val(node)
    if not isinstance(v, torch.Tensor) or v.layout is not torch.strided or not _static(v):
        return None
    key = _storage(v)
    while True:
        if node.op in ("placeholder", "get_attr"):
            return None
        nxt = next((a for a in node.all_input_nodes
                    if isinstance(_val(a), torch.Tensor) and _storage(_val(a)) == key), None)
        if nxt is None:
            return node if node.op == "call_function" or node.op == "call_method" else None
        node = nxt


def _extent(t: torch.Tensor) -> tuple[int, int]:
    lo = t.storage_offset()
    return lo, lo + 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))


def _overlapping(vals: list[Any]) -> bool:
    """Whether two of ``vals`` (views of one storage) share an element, or one repeats an element."""
    ts = [v for v in vals if isinstance(v, torch.Tensor) and v.numel() > 0]
    if any(s == 0 and n > 1 for t in ts for n, s in zip(t.shape, t.stride())):
        return True
    if len(ts) < 2:
        return False
    spans = sorted(_extent(t) for t in ts)
    if all(a[1] <= b[0] for a, b in zip(spans, spans[1:])):
        return False                        # disjoint ranges of memory
    if sum(t.numel() for t in ts) > MAX_EXACT_ELEMENTS:
        return True
    seen: set[int] = set()
    with _no_modes():
        for t in ts:
            hi = _extent(t)[1]
            addrs = torch.arange(hi, device="cpu").as_strided(t.shape, t.stride(), t.storage_offset()).flatten()
            a = set(addrs.tolist())
            if len(a) < t.numel() or a & seen:
                return True
            seen |= a
    return False
