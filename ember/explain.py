"""``ember.explain(fn)(*args, **kwargs)``: compile ``fn`` afresh, run it once, and report what was captured."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch


@dataclass
class BreakReason:
    reason: str
    user_stack: list[str]
    hint: str = ""

    def __str__(self) -> str:
        where = self.user_stack[-1] if self.user_stack else "?"
        return f"{self.reason} (at {where})" + (f"; hint: {self.hint}" if self.hint else "")


@dataclass
class ExplainOutput:
    graphs: list = field(default_factory=list)
    graph_count: int = 0
    graph_break_count: int = 0
    break_reasons: list[BreakReason] = field(default_factory=list)
    ops_per_graph: list[list[str]] = field(default_factory=list)
    guards: list = field(default_factory=list)
    compile_times: list[float] = field(default_factory=list)
    out: Any = None

    def __str__(self) -> str:
        lines = [f"Graph count: {self.graph_count}", f"Graph break count: {self.graph_break_count}",
                 f"Op count: {sum(len(o) for o in self.ops_per_graph)}"]
        if self.break_reasons:
            lines.append("Break reasons:")
            lines += [f"  {i + 1}. {r}" for i, r in enumerate(self.break_reasons)]
        for i, ops in enumerate(self.ops_per_graph):
            lines.append(f"Ops in graph {i}: {', '.join(ops)}")
        if self.guards:
            lines.append(f"Guards ({len(self.guards)}):")
            lines += [f"  {g.reason}" for g in self.guards]
        if self.compile_times:
            lines.append("Compile times: " + ", ".join(f"{t * 1000:.1f} ms" for t in self.compile_times))
        return "\n".join(lines)


def _op_name(n) -> str:
    t = n.target
    return t if isinstance(t, str) else getattr(t, "__name__", str(t))


def _top_cache(compiled):
    if hasattr(compiled, "_ember_cache"):
        return compiled._ember_cache
    c = getattr(compiled, "__ember_cache__", None)
    return c if c is not None else compiled.__func__.__ember_cache__


def _session_caches(compiled) -> list:
    """The caches of ``compiled``'s session in the order they were made (the top one first), or just its
    own cache when it has no session."""
    top = _top_cache(compiled)
    session = getattr(top, "session", None)
    if session is None:
        return [top]
    caches = list(session.caches)
    if top not in caches:
        caches.insert(0, top)
    return caches


def explain(fn: Callable, *extra_args, **extra_kwargs):
    """``ember.explain(fn)(*args)`` (also accepts the args directly, like torch._dynamo.explain)."""
    from .api import compile as ember_compile

    def run(*args, **kwargs) -> ExplainOutput:
        graphs: list[torch.fx.GraphModule] = []

        def record(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        target = fn._orig_mod if hasattr(fn, "_orig_mod") else getattr(fn, "__wrapped__", fn)
        compiled = ember_compile(target, backend=record)
        out = compiled(*args, **kwargs)
        res = ExplainOutput(out=out)
        res.graphs = graphs
        res.graph_count = len(graphs)
        res.ops_per_graph = [[_op_name(n) for n in g.graph.nodes if n.op in ("call_function", "call_method")]
                             for g in graphs]
        # every cache of the compile session: the function's, its continuations' and its callees'
        for cache in _session_caches(compiled):
            res.break_reasons += [BreakReason(e.reason, list(e.user_stack), e.hint)
                                  for e in cache.break_reasons]
            for e in cache.entries:
                res.guards += e.guards
                if not e.eager:
                    res.compile_times.append(e.compile_time)
        res.graph_break_count = len(res.break_reasons)
        return res

    if extra_args or extra_kwargs:
        return run(*extra_args, **extra_kwargs)
    return run
