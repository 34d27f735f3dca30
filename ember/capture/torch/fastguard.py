"""Cheaper guards for the parameters and buffers of modules run without gradients (inference).

A tensor's guard checks its class, dtype, device, shape, strides and requires_grad on every call: ~0.3 us in
Python, which for a ResNet-50's ~320 parameters and buffers is more than a CUDA graph replay of the whole model
costs. For a module's parameter or buffer in an entry compiled under ``no_grad``/``inference_mode`` (weights
that do not change between calls), the guard remembers the tensor it last checked in full, with its version
counter: the same tensor object with the same ``_version`` has the same metadata, because every in-place op
that changes a tensor's shape, strides or storage (``resize_``, ``set_``, ``t_``, ``as_strided_``, ...) bumps
its version, in and out of inference mode. Two things change metadata without a version bump:
``t.data = other`` and ``torch.utils.swap_tensors``; both are wrapped here (once, when the first such guard is
made) to bump ``EPOCH``. An entry's guard compares ``EPOCH`` once, before its first remembered check, with the
value it last saw; when it moved, the entry forgets every tensor it remembered (``Records.refresh``), so each is
checked in full once more. ``requires_grad`` changes without a bump too: it is a guard of its own, dropped where
the whole graph runs without gradients and the trace never read it (``TorchPlugin.graph_hook``). The fast check
is then ~0.15 us:

    (__epoch[0] == __records.epoch or __records.refresh())
    ...
    ((__sv := __seen[0])[0]() is (__s4 := m._parameters['weight']) and __s4._version == __sv[1]
     or (<the full check of __s4> and __record(__s4, __seen)))

A record is one slot holding a ``(weak reference, version)`` pair, read once per check: two threads checking
different tensors at one source never pair one's reference with the other's version.

``__seen`` holds a weak reference, so a remembered tensor is not kept alive, and a new tensor at a freed one's
address is never taken for it (``swap_tensors``, which refuses tensors with weak references, drops them all
first). A tensor without a version counter (made in inference mode) is checked in full on every call.
"""
from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any

import torch

EPOCH = [0]          # bumped by every ``tensor.data = ...`` and ``torch.utils.swap_tensors``
_installed = [False]
_INSTALL_LOCK = threading.Lock()


def _dead() -> None:
    return None


_NONE = (_dead, -1)


class _Seen(list):
    """A record: a list (the guard indexes it) that can be weakly referenced, so ``_ALL`` does not keep the
    records of guards that were dropped (a recompiled or evicted entry's)."""
    __slots__ = ("__weakref__",)


# the live records (a list is unhashable, so not a WeakSet): ``swap_tensors`` drops their references
_ALL: "weakref.WeakValueDictionary[int, _Seen]" = weakref.WeakValueDictionary()
_serial = itertools.count()


def new_seen() -> list:
    """The record one guarded tensor keeps: [(weak reference, version)]; matches no tensor at first."""
    seen = _Seen([_NONE])
    _ALL[next(_serial)] = seen
    return seen


def record(t: torch.Tensor, seen: list) -> bool:
    """After ``t`` passed its full check: remember it (always True: the guard's result is the check's)."""
    try:
        seen[0] = (weakref.ref(t), t._version)
    except (RuntimeError, TypeError):       # an inference tensor has no version counter: stay unremembered
        seen[0] = _NONE
    return True


class Records:
    """The records of one entry's guard, and the ``EPOCH`` they were made under."""
    __slots__ = ("epoch", "seen")

    def __init__(self) -> None:
        self.epoch = EPOCH[0]
        self.seen: list[list] = []

    def new(self) -> list:
        seen = new_seen()
        self.seen.append(seen)
        return seen

    def refresh(self) -> bool:
        """``EPOCH`` moved (a ``.data`` assignment somewhere): forget every tensor (always True)."""
        for seen in self.seen:
            seen[0] = _NONE
        self.epoch = EPOCH[0]
        return True


def install() -> None:
    """Make ``tensor.data = x`` and ``torch.utils.swap_tensors`` bump ``EPOCH`` (idempotent)."""
    if _installed[0]:
        return
    with _INSTALL_LOCK:         # two threads' first such guards must not wrap swap_tensors twice
        if not _installed[0]:
            _install()
            _installed[0] = True


def _install() -> None:
    base = torch._C.TensorBase.__dict__["data"]

    def get_data(self: torch.Tensor) -> torch.Tensor:
        return base.__get__(self, type(self))

    def set_data(self: torch.Tensor, value: Any) -> None:
        base.__set__(self, value)
        EPOCH[0] += 1

    torch.Tensor.data = property(get_data, set_data, doc=base.__doc__)  # type: ignore[assignment]
    swap = torch.utils.swap_tensors

    def swap_tensors(t1: torch.Tensor, t2: torch.Tensor) -> None:
        # swap_tensors refuses tensors with weak references: forget every remembered tensor first (all guards
        # then check in full once)
        EPOCH[0] += 1
        for seen in list(_ALL.values()):
            seen[0] = _NONE
        return swap(t1, t2)

    swap_tensors.__doc__ = swap.__doc__
    swap_tensors.__wrapped__ = swap  # type: ignore[attr-defined]
    torch.utils.swap_tensors = swap_tensors
