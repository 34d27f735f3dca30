"""Debug output switched by ``EMBER_LOGS`` (a comma list) or ``ember.set_logs(name=True, ...)``.

Names: graph_breaks, guards, recompiles, dynamic, graph, aot_graphs, output_code, schedule, passes (each kernel-compiler
pass's output IR), perf_hints, cache, autotune, and
``+ember`` for everything. Output goes to stderr through the ``ember`` logger. Torch-free."""
from __future__ import annotations

import logging
import os
import sys
import threading

KINDS = ("graph_breaks", "guards", "recompiles", "dynamic", "graph", "aot_graphs", "output_code", "schedule",
         "passes", "perf_hints", "cache", "autotune")
_enabled: set[str] = set()
_logger = logging.getLogger("ember")
_once: set = set()     # keys said already: warn_once's, and (kind, key) of log_once
_lock = threading.Lock()


def _from_env() -> None:
    raw = os.environ.get("EMBER_LOGS", "")
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        if part in ("+ember", "all"):
            _enabled.update(KINDS)
        elif part.lstrip("+") in KINDS:
            _enabled.add(part.lstrip("+"))
        else:
            print(f"ember: unknown EMBER_LOGS entry {part!r}; known: {', '.join(KINDS)}, +ember", file=sys.stderr)


_from_env()


def set_logs(**kinds: bool) -> None:
    """``ember.set_logs(guards=True, recompiles=True)``; ``all=True`` turns everything on."""
    for k, on in kinds.items():
        names = KINDS if k in ("all", "ember") else (k,)
        for n in names:
            if n not in KINDS:
                raise ValueError(f"unknown log kind {n!r}; known: {', '.join(KINDS)}")
            (_enabled.add if on else _enabled.discard)(n)


def enabled(kind: str) -> bool:
    return kind in _enabled


def log(kind: str, msg: str) -> None:
    if kind in _enabled:
        with _lock:         # threads logging at once install one handler, not one each
            if not _logger.handlers and not logging.getLogger().handlers:
                h = logging.StreamHandler(sys.stderr)
                h.setFormatter(logging.Formatter("[ember %(kind)s] %(message)s"))
                _logger.addHandler(h)
                _logger.propagate = False
            if _logger.level == logging.NOTSET or _logger.level > logging.INFO:
                _logger.setLevel(logging.INFO)      # a kind switched on is shown, whatever handlers exist
        _logger.info(msg, extra={"kind": kind})


def log_once(kind: str, key: str, msg: str) -> None:
    """``log(kind, msg)`` the first time ``key`` is logged in this process (a condition met by every graph of a
    model is said once, not once per graph)."""
    if kind not in _enabled:
        return
    with _lock:
        if (kind, key) in _once:
            return
        _once.add((kind, key))
    log(kind, msg)


def warn_once(key: str, msg: str) -> None:
    with _lock:
        if key in _once:
            return
        _once.add(key)
    import warnings
    warnings.warn(msg, stacklevel=3)
