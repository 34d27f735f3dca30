"""Autotuning (mode ``max-autotune``): run each candidate implementation of a kernel on the first call's own
arguments, keep the fastest, and remember the choice on disk.

``Autotuned(choices, key, name, scratch)`` is a kernel callable like the ones it chooses between (``fn(*args)``).
On its first call it looks up ``key`` (a digest of every candidate's source and the device) in the ``diskcache``
store ``$EMBER_CACHE_DIR/autotune`` (default ``~/.cache/ember/autotune``); without a recorded choice it times the
candidates (one warm-up call each, then the median of samples taken in interleaved rounds, CUDA events on a
GPU) and records the winner with all times. ``scratch`` names the argument positions a candidate both reads and writes (values stored in place):
those are timed on copies, so the real tensors see exactly one run, the chosen one. A candidate that fails to
compile or run is skipped with a perf hint (the first candidate, ember's heuristic choice, is the fallback).
While a CUDA graph is being recorded nothing is timed: the first candidate runs and nothing is recorded.
``EMBER_LOGS=autotune`` prints every measurement.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ember import diskcache, logs
from ember.heuristics import heuristics


_CHOICES: dict[str, int] = {}     # key -> chosen index, this process


def cache_dir() -> Path:
    from . import cache_root
    return cache_root() / "autotune"


def _store() -> diskcache.Store:
    return diskcache.store_at(cache_dir(), scope=diskcache.root())


def digest(sources: Sequence[str], device: torch.device) -> str:
    h = hashlib.sha256()
    for s in sources:
        h.update(s.encode())
        h.update(b"\0")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    h.update(f"{name}|{torch.__version__}".encode())
    try:
        import triton
        h.update(triton.__version__.encode())
    except ImportError:
        pass
    return h.hexdigest()[:32]


def _load(key: str) -> int | None:
    if key in _CHOICES:
        return _CHOICES[key]
    try:
        data = _store().read(f"{key}.json")
        choice = int(json.loads(data)["choice"]) if data is not None else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if choice is None:
        return None
    _CHOICES[key] = choice
    return choice


def _save(key: str, record: dict) -> None:
    _CHOICES[key] = record["choice"]
    try:
        _store().write(f"{key}.json", json.dumps(record, indent=1).encode())
    except OSError as e:
        logs.log("perf_hints", f"autotune: cannot record a choice under {cache_dir()}: {e}")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _calibrate(fn: Callable[[], Any], device: torch.device) -> int:
    """Calls per sample so that a sample lasts at least autotune_min_time_s (after one warm-up call)."""
    fn()
    _sync(device)
    inner = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        _sync(device)
        if time.perf_counter() - t0 >= heuristics().autotune_min_time_s or inner >= 256:
            return inner
        inner *= 4


def _sample(fn: Callable[[], Any], inner: int, device: torch.device) -> float:
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / inner
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def time_calls(fns: Sequence[Callable[[], Any]], device: torch.device
               ) -> tuple[list[float | None], list[BaseException | None]]:
    """(median seconds of one call, error) of each of ``fns``, sampled in interleaved rounds so that clock
    ramps and other load on the machine weigh on every candidate alike. A candidate that raises gets no time
    and its exception."""
    inner: list[int] = [0] * len(fns)
    errors: list[BaseException | None] = [None] * len(fns)
    for i, fn in enumerate(fns):
        try:
            inner[i] = _calibrate(fn, device)
        except Exception as e:  # noqa: BLE001 - reported by the caller
            errors[i] = e
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(heuristics().autotune_reps):
        for i, fn in enumerate(fns):
            if errors[i] is None:
                try:
                    samples[i].append(_sample(fn, inner[i], device))
                except Exception as e:  # noqa: BLE001 - reported by the caller
                    errors[i], samples[i] = e, []
    return [sorted(s)[len(s) // 2] if s else None for s in samples], errors


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


class Autotuned:
    """The fastest of ``choices`` (callables taking the same arguments), chosen on the first call."""

    def __init__(self, choices: list[Callable[..., Any]], key: str, name: str, scratch: Sequence[int] = (),
                 labels: Sequence[str] = ()) -> None:
        self.choices, self.key, self.name = choices, key, name
        self.scratch = tuple(scratch)
        self.labels = list(labels) or [f"choice{i}" for i in range(len(choices))]
        self.chosen: Callable[..., Any] | None = None
        # called with this object once a first call chose (ember.graphcache then writes the choice into its entry)
        self.on_chosen: list[Callable[[Autotuned], None]] = []
        cached = _load(key)
        if cached is not None and 0 <= cached < len(choices):
            self.chosen = choices[cached]

    def __call__(self, *args: Any) -> Any:
        fn = self.chosen
        if fn is None:
            if _capturing():
                return self.choices[0](*args)
            fn = self.chosen = self.choices[self.tune(args)]
            for cb in list(self.on_chosen):
                cb(self)
        return fn(*args)

    def tune(self, args: tuple) -> int:
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        trial = list(args)
        for i in self.scratch:                    # read and written: time on copies
            trial[i] = args[i].clone()
        times, errors = time_calls([lambda fn=fn: fn(*trial) for fn in self.choices], device)
        for label, err in zip(self.labels, errors):
            if err is not None:
                logs.log("perf_hints", f"autotune {self.name}: {label} failed ({type(err).__name__}: "
                                       f"{str(err).splitlines()[0] if str(err) else ''}); not chosen")
        ok = [(t, i) for i, t in enumerate(times) if t is not None]
        best = min(ok)[1] if ok else 0
        if logs.enabled("autotune"):
            rows = ", ".join(f"{lab}={t * 1e6:.1f}us" if t is not None else f"{lab}=failed"
                             for lab, t in zip(self.labels, times))
            logs.log("autotune", f"{self.name}: {rows} -> {self.labels[best]}")
        if ok:
            _save(self.key, {"choice": best, "name": self.name, "labels": self.labels,
                             "times_us": [None if t is None else round(t * 1e6, 3) for t in times]})
        return best


__all__ = ["Autotuned", "cache_dir", "digest", "time_calls"]
