"""Counts of the pipeline's expensive steps below capture, for ``ember.stats()``: ``traces`` (runs of AOT
autograd's ATen tracer) and ``kernel_compiles`` (C++ compiler processes started; Triton JIT compiles, or loads
from Triton's own cache, in this process), ``graph_cache_hits``/``graph_cache_misses`` (the whole-graph cache,
``ember.graphcache``: a hit skips AOT autograd, lowering and codegen), ``partition_fallbacks`` (training graphs
whose min-cut partition failed, so that the forward saves every value the backward reads:
``ember.autograd.partition``), ``eager_autograd_graphs`` (graphs AOT autograd could not trace: they run as
captured, with eager autograd; ``ember.autograd.aot``).

Torch-free and stage-free, so every stage may bump it (capture's own counts live in ``capture.frontend``). A
process that only loads a package (``ember.load_package``) keeps both at zero.
"""
from __future__ import annotations

import threading

NAMES = ("traces", "kernel_compiles", "graph_cache_hits", "graph_cache_misses", "partition_fallbacks",
         "eager_autograd_graphs")
_lock = threading.Lock()
_counts = dict.fromkeys(NAMES, 0)


def bump(name: str, n: int = 1) -> None:
    with _lock:
        _counts[name] += n


def snapshot() -> dict[str, int]:
    with _lock:
        return dict(_counts)


def reset() -> None:
    with _lock:
        for k in NAMES:
            _counts[k] = 0
