"""Cheaper guards for the parameters and buffers of modules whose weights stay put between calls.

A tensor's guard checks its class, dtype, device, shape, strides and requires_grad on every call: ~0.3 us in
Python, which for a ResNet-50's ~320 parameters and buffers is more than a CUDA graph replay of the whole model
costs (a training step's forward: ~0.35 us a parameter, 11 of a 2-layer nanoGPT's 15 us of guards). For a
module's parameter or buffer, in inference and training entries alike, the guard remembers the tensor it last
checked in full, with its version counter: the same tensor object with the same ``_version`` has the same
metadata, because every in-place op that changes a tensor's shape, strides or storage (``resize_``, ``set_``,
``t_``, ``as_strided_``, ...) bumps its version, in and out of inference mode. Two things change metadata
without a version bump:
``t.data = other`` and ``torch.utils.swap_tensors``; both are wrapped here (once, when the first such guard is
made) to bump ``EPOCH``. An entry's guard compares ``EPOCH`` once, before its first remembered check, with the
value it last saw; when it moved, the entry forgets every tensor it remembered (``Records.refresh``), so each is
checked in full once more. ``requires_grad`` changes without a bump too: it is a guard of its own, dropped where
the whole graph runs without gradients and the trace never read it (``TorchPlugin.graph_hook``). The fast check
is then ~0.12 us:

    (__epoch[0] == __records.epoch or __records.refresh()) and ((__fgon := __records.on) or True)
    ...
    (__fgon and (__sv := __seen[0])[0]() is (__s4 := m._parameters['weight']) and __s4._version == __sv[1]
     or ((__s4 := m._parameters['weight']).__class__ is ... <the rest of the full check of __s4>
         and (not __fgon or __record(__s4, __seen))))

The full check reads the source again: it assigns the name that the fast check skipped when off. Weights
written in place between calls (an optimizer step bumps every parameter's version) miss the fast check on every
call, and remembering them again costs more than it saves: ``record`` counts such rewrites (the same tensor,
another version) per entry, and past ``CompileOptions.weight_guard_rewrites`` per record the entry turns its
fast path off (``__fgon``, read once per call); each weight is then checked in full only, as before this module
existed, for ~0.01 us more.

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
    records of guards that were dropped (a recompiled or evicted entry's). ``owner``: its entry's ``Records``."""
    __slots__ = ("__weakref__", "owner")


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
        version = t._version
    except (RuntimeError, TypeError):       # an inference tensor has no version counter: stay unremembered
        seen[0] = _NONE
        return True
    ref = seen[0][0]
    if ref() is t:          # the same tensor, written in place since its last check
        owner = getattr(seen, "owner", None)      # (a record made by ``new_seen`` alone has none)
        if owner is not None:
            owner.rewritten()
        seen[0] = (ref, version)
    else:
        seen[0] = (weakref.ref(t), version)
    return True


class Records:
    """The records of one entry's guard, the ``EPOCH`` they were made under, and whether the fast path is on
    (``on``: off once its weights were found rewritten in place more than ``rewrites_per_record`` times each)."""
    __slots__ = ("epoch", "seen", "on", "rewrites", "rewrites_per_record")

    def __init__(self, rewrites_per_record: int = 4) -> None:
        self.epoch = EPOCH[0]
        self.seen: list[list] = []
        self.on = rewrites_per_record > 0
        self.rewrites = 0
        self.rewrites_per_record = rewrites_per_record

    def new(self) -> list:
        seen = new_seen()
        seen.owner = self
        self.seen.append(seen)
        return seen

    def rewritten(self) -> None:
        """A remembered tensor was found with another version: past the limit, the entry checks in full only."""
        self.rewrites += 1
        if self.rewrites > self.rewrites_per_record * len(self.seen):
            self.on = False

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
