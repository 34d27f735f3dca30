"""Where max-autotune's time goes for one kernel microbenchmark case: the choices it made, and the time of the
compiled call in each mode, measured back to back (device throughput) and one call at a time (with host time).

    python bench/autotune_check.py --only rms_norm,gelu_mlp [--dtype bfloat16]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ember  # noqa: E402
from kernels import cases  # noqa: E402


def _events(fn, n: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n * 1e3


def _one_at_a_time(fn, n: int) -> float:
    ts = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[n // 2] * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="rms_norm,gelu_mlp")
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    dt = getattr(torch, a.dtype)
    for name, fn, args, _ in cases("cuda", dt, False):
        if name not in a.only.split(","):
            continue
        engines = {"eager": fn, "torch": torch.compile(fn), "torch-ma": torch.compile(fn, mode="max-autotune-no-cudagraphs"),
                   "ember": ember.compile(fn), "ember-ma": ember.compile(fn, mode="max-autotune-no-cudagraphs")}
        for k, f in engines.items():
            for _ in range(3):
                f(*args)
        torch.cuda.synchronize()
        for rnd in range(3):
            row = []
            for k, f in engines.items():
                row.append(f"{k} {_events(lambda f=f: f(*args), 50):.1f}/{_one_at_a_time(lambda f=f: f(*args), 30):.1f}")
            print(f"{name} round {rnd} (us, back-to-back/one-at-a-time): " + ", ".join(row), flush=True)


if __name__ == "__main__":
    main()
