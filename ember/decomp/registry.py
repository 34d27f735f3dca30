"""The decomposition table: ATen OpOverload -> small Python function written in prims.

``@register_decomposition(aten.gelu.default)`` adds a rule; ``decompose(op, *args, **kwargs)`` applies the table
recursively (rules call ``decompose`` for other ATen ops) down to prims. An op without a rule becomes the
extern prim ``aten_extern`` (never a crash) and is recorded for ``coverage_report``.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Iterable

import torch

from .core import PRIMS

aten = torch.ops.aten

DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
MISSING: Counter = Counter()


def _overloads(op: Any) -> list:
    if isinstance(op, torch._ops.OpOverloadPacket):
        return [getattr(op, name) for name in op.overloads()]
    return [op]


def register_decomposition(*ops: Any) -> Callable[[Callable], Callable]:
    """Register fn as the decomposition of each op (an OpOverload, or a packet for all its overloads)."""
    def wrap(fn: Callable) -> Callable:
        for op in ops:
            for ov in _overloads(op):
                if ov in DECOMPOSITIONS:
                    raise ValueError(f"ember.decomp: {ov} has two decompositions")
                DECOMPOSITIONS[ov] = fn
        return fn
    return wrap


def decompose(op: Any, *args: Any, **kwargs: Any) -> Any:
    """Run op's decomposition (recursively down to prims); ops without one become ``aten_extern``."""
    fn = DECOMPOSITIONS.get(op)
    if fn is None:
        MISSING[op] += 1
        return PRIMS["aten_extern"](op, args, kwargs)
    return fn(*args, **kwargs)


def has_decomposition(op: Any) -> bool:
    return op in DECOMPOSITIONS


def decomposed_ops() -> list[str]:
    return sorted(str(op) for op in DECOMPOSITIONS)


def coverage_report(ops: Iterable[Any] | None = None) -> dict[str, Any]:
    """Which of ``ops`` (default: every op that reached ``decompose``) have decompositions.

    Returns ``{"decomposed": [...], "missing": [...], "n_table": len(table)}`` with op names sorted.
    """
    ops = list(MISSING) if ops is None else list(ops)
    have = sorted({str(o) for o in ops if o in DECOMPOSITIONS})
    miss = sorted({str(o) for o in ops if o not in DECOMPOSITIONS})
    return {"decomposed": have, "missing": miss, "n_table": len(DECOMPOSITIONS)}


def format_coverage(report: dict[str, Any]) -> str:
    lines = [f"ember.decomp coverage: {len(report['decomposed'])} decomposed, {len(report['missing'])} "
             f"without a decomposition (table has {report['n_table']} overloads)"]
    lines += [f"  missing: {name}" for name in report["missing"]]
    return "\n".join(lines)
