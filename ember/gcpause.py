"""No full garbage collections while ember compiles.

A compile allocates many objects that live on (imported modules, FX graphs, generated code), so Python's cyclic
collector runs full (oldest-generation) collections during it, and each one walks every object in the process:
with torch and sympy imported that is some 200 000 objects and about 0.1 s on the 2-core machine, once or more
per compile (0.12 s of the 0.3 s a warm ``ember.compile`` of a small GPT's training step took on its first
call; more in a cold compile). ``no_full_collections()`` raises the oldest generation's threshold for the
duration of a compile and puts the user's thresholds back afterwards: the young generations are still collected
(short-lived cycles are freed as usual), ``gc.collect()`` still collects everything, and the next full
collection comes after the compile, at the collector's own pace.

Process-wide state, so: nested and concurrent compiles (several threads) share one pause (a depth count; the
last to finish restores); a collector the user disabled (``gc.disable()``) or whose first threshold is 0 is left
alone; thresholds the user sets while a compile runs are kept (restoring only replaces the ones set here).
"""
from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

_HIGH = 1 << 30     # "never" for the oldest generation's threshold (a count of younger collections)
_LOCK = threading.Lock()
_STATE: dict = {"depth": 0, "saved": None, "set": None}


def _enter() -> None:
    with _LOCK:
        _STATE["depth"] += 1
        if _STATE["depth"] != 1:
            return
        t = gc.get_threshold()
        if not gc.isenabled() or not t[0] or len(t) < 3 or t[2] >= _HIGH:
            _STATE["saved"] = _STATE["set"] = None
            return
        paused = (*t[:2], _HIGH, *t[3:])
        gc.set_threshold(*paused)
        _STATE["saved"], _STATE["set"] = t, gc.get_threshold()


def _exit() -> None:
    with _LOCK:
        _STATE["depth"] -= 1
        if _STATE["depth"] or _STATE["saved"] is None:
            return
        if gc.get_threshold() == _STATE["set"]:     # else the user set thresholds meanwhile: theirs stay
            gc.set_threshold(*_STATE["saved"])
        _STATE["saved"] = _STATE["set"] = None


@contextlib.contextmanager
def no_full_collections() -> Iterator[None]:
    """Run the body without full collections (see the module docstring)."""
    _enter()
    try:
        yield
    finally:
        _exit()


__all__ = ["no_full_collections"]
