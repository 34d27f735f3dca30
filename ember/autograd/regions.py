"""Activation-checkpoint regions: which recorded ATen ops came from inside ``torch.utils.checkpoint``.

Capture turns ``checkpoint(fn, *args)`` into ``fn``'s ops between two marker calls, ``enter(region)`` and
``exit(region)``, in the captured graph. Run eagerly the markers only set a per-thread region number; while
AOT autograd traces the graph, the recorder tags every op recorded in between with
``node.meta["ember_recompute"] = region``. The partitioner never saves a tagged value that only its region's
ops read: the backward recomputes it from what the region reads, as eager checkpointing does (values of
random ops are saved instead, so the recomputation draws nothing).
"""
from __future__ import annotations

import threading

TAG = "ember_recompute"
_STATE = threading.local()


def enter(region: int) -> None:
    """Marker: the ops that follow belong to checkpoint region ``region`` (until ``exit``)."""
    stack = getattr(_STATE, "stack", None)
    if stack is None:
        stack = _STATE.stack = []
    stack.append(region)


def exit(region: int) -> None:  # noqa: A001  (the marker's name in graphs)
    stack = getattr(_STATE, "stack", None)
    if stack and stack[-1] == region:
        stack.pop()


def current() -> int | None:
    """The innermost open region of this thread, or None."""
    stack = getattr(_STATE, "stack", None)
    return stack[-1] if stack else None


def clear() -> None:
    """Forget open regions (a trace that raised between the two markers)."""
    _STATE.stack = []
