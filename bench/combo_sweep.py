"""Combo kernels on the Adam-like update of bench/kernels.py: ember's cold compile and kernel time for a cap on
parts per combo kernel (``ember.loopir.combo.COMBO_MAX_PARTS``; 1: no combos), and optionally torch.compile's.

    EMBER_CACHE_DIR=$(mktemp -d) TRITON_CACHE_DIR=$(mktemp -d) python bench/combo_sweep.py --parts 16 [--torch]

Run each cap in a fresh process with fresh caches, so the compile time is a cold one. Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", type=int, default=32)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--noinline", action="store_true", help="part functions called by several parts: noinline")
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    import kernels as kb

    import ember
    from ember.loopir import combo
    combo.COMBO_MAX_PARTS = a.parts
    from ember.codegen import triton_combo
    triton_combo.NOINLINE_SHARED = a.noinline
    dtype = getattr(torch, a.dtype)
    _, fn, args, nbytes = next(c for c in kb.cases("cuda", dtype, False) if c[0] == "adam_update")
    engines = {"eager": fn, "ember": ember.compile(fn)}
    if a.torch:
        engines["torch"] = torch.compile(fn)
    row: dict = {"parts": a.parts, "noinline": a.noinline, "dtype": a.dtype, "bytes": nbytes}
    for k, f in engines.items():
        t0 = time.perf_counter()
        f(*kb._clone(args))
        torch.cuda.synchronize()
        row[f"compile_s_{k}"] = round(time.perf_counter() - t0, 3)
        row[f"correct_{k}"] = kb._inplace_ok(fn, f, args, 1e-3)
    sets = [args] + [kb._clone(args) for _ in range(3)]
    for s in sets:
        for f in engines.values():
            f(*s)
    row.update({f"ms_{k}": round(t, 4) for k, t in kb.time_queued(engines, sets, a.reps).items()})
    row.update({f"host_ms_{k}": round(t, 4) for k, t in kb.host_ms(engines, sets).items()})
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        engines["ember"](*args)
        torch.cuda.synchronize()
    kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    row["ember_launches"] = len(kern)
    row["ember_kernel_us"] = round(sum(e.device_time for e in kern), 1)
    bw = kb.copy_bandwidth("cuda")
    row["copy_gbs"] = round(bw / 1e9)
    row["bw_frac_ember"] = round(nbytes / (row["ms_ember"] * 1e-3) / bw, 3)
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
