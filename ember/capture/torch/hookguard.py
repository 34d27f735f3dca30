"""The guard that submodules a trace called without hooks still have none.

A submodule with no forward/backward hooks is called by inlining its ``forward``; a hook registered on it
later (``register_forward_hook``, a global ``register_module_forward_hook``) would be ignored by that entry.
Checking each such module's four hook dicts on every call costs ~0.1 us per module (a ResNet-50 has ~160).
Instead, every hook registration makes a ``torch.utils.hooks.RemovableHandle``, which increments the class
counter ``RemovableHandle.next_id``. An entry's guard compares that counter with the value it last saw (one
clause); only when it moved (a hook was registered anywhere, tensor hooks included) does it re-check the
entry's modules, and accept the new counter value if none of them has hooks now:

    (__RemovableHandle.next_id == __hook_watch.seen or __hook_watch.recheck())

Modules are held by weak reference. Hooks added without a handle (writing into ``_forward_hooks`` directly)
are not seen.
"""
from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

_NAME = "__hook_watch"


class HookWatch:
    """The modules one entry called without hooks, and the handle counter when they were last checked."""
    __slots__ = ("seen", "modules", "_ids")

    def __init__(self) -> None:
        self.seen = RemovableHandle.next_id
        self.modules: list[weakref.ref] = []
        self._ids: set[int] = set()

    def add(self, m: torch.nn.Module) -> None:
        if id(m) not in self._ids:
            self._ids.add(id(m))
            self.modules.append(weakref.ref(m))

    def recheck(self) -> bool:
        """A hook was registered somewhere: True (and remember the counter) if none of the modules has one."""
        from .modules import _has_hooks
        now = RemovableHandle.next_id
        for r in self.modules:
            m = r()
            if m is not None and _has_hooks(m):
                return False
        self.seen = now
        return True


def watch_hooks(d: Any, m: torch.nn.Module) -> None:
    """Guard that module ``m``, called without hooks in this trace, still has none."""
    cg = d.cg
    hw = cg.bindings.get(_NAME)
    if hw is None:
        hw = cg.bindings[_NAME] = HookWatch()
    hw.add(m)
    counter = f"{cg.bind(RemovableHandle, 'RemovableHandle')}.next_id"
    d.guards.add(f"({counter} == {_NAME}.seen or {_NAME}.recheck())",
                 "no hook was registered on the modules called without hooks")
