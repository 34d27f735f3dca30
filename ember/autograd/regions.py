"""Activation-checkpoint regions: which recorded ATen ops came from inside ``torch.utils.checkpoint``.

Capture turns ``checkpoint(fn, *args)`` into ``fn``'s ops between two marker calls, ``enter(region)`` and
``exit(region)``, in the captured graph. Run eagerly the markers only set a per-thread region number; while
AOT autograd traces the graph, the recorder tags every op recorded in between with
``node.meta["ember_recompute"] = region``. The partitioner never saves a tagged value that only its region's
ops read: the backward recomputes it from what the region reads, as eager checkpointing does (values of
random ops are saved instead, so the recomputation draws nothing).

Selective checkpointing (``context_fn=functools.partial(create_selective_checkpoint_contexts, policy)``): capture
registers the region's policy (``set_policy``); the recorder asks it about each ATen op recorded in the region
(``policy_saves``, with eager's arguments: a context whose ``is_recompute`` is False, the op, its arguments) and
tags the ops it says to save (``MUST_SAVE``/``PREFER_SAVE``, ``True``, or listed) with ``SAVE_TAG``; the
partitioner never recomputes those (their values are saved where the backward needs them), and recomputes the
rest of the region as plain checkpointing does.
"""
from __future__ import annotations

import threading
from typing import Any

TAG = "ember_recompute"
SAVE_TAG = "ember_ckpt_save"
_STATE = threading.local()
_POLICIES: dict[int, Any] = {}      # region -> its selective-checkpointing policy (a function or a list of ops)


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
    """The outermost open region of this thread, or None: the ops of nested regions belong to the outer one,
    as the forward sees them (only the outer region's inputs are saved; the backward recomputes it whole)."""
    stack = getattr(_STATE, "stack", None)
    return stack[0] if stack else None


def clear() -> None:
    """Forget open regions (a trace that raised between the two markers)."""
    _STATE.stack = []


def set_policy(region: int, policy: Any) -> None:
    """Region ``region`` saves what ``policy`` says to (a policy function, or a list of ops to save)."""
    _POLICIES[region] = policy


def policy_saves(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether the policy of the innermost open region that has one says to save ``func``'s result."""
    stack = getattr(_STATE, "stack", None) or []
    policy = next((_POLICIES[r] for r in reversed(stack) if r in _POLICIES), None)
    if policy is None:
        return False
    if isinstance(policy, (list, tuple, set)):
        return func in policy or getattr(func, "overloadpacket", None) in policy
    from torch.utils.checkpoint import CheckpointPolicy, SelectiveCheckpointContext
    out = policy(SelectiveCheckpointContext(is_recompute=False), func, *args, **kwargs)
    if isinstance(out, bool):
        return out
    return out in (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE)
