"""Where a kernel microbenchmark's time goes: each generated kernel's device time (torch.profiler), ember and
torch.compile side by side, for the cases of bench/kernels.py.

    python bench/profile_kernels.py --only cross_entropy_32k --dtype bfloat16 [--code]

A diagnosis tool: numbers under the profiler are not the ones to report (bench/kernels.py is).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import cases  # noqa: E402


def _profile(fn, args, reps: int) -> list[tuple[str, float, int]]:
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn(*args)
        torch.cuda.synchronize()
    out = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t > 0:
            out.append((e.key, t / reps, e.count // reps))
    return sorted(out, key=lambda r: -r[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", required=True, help="comma-separated case names of bench/kernels.py")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--code", action="store_true", help="print ember's generated code (EMBER_LOGS=output_code)")
    a = ap.parse_args()
    import ember
    dt = getattr(torch, a.dtype)
    for name, fn, args, nbytes in cases("cuda", dt, False):
        if name not in a.only.split(","):
            continue
        ember.set_logs(output_code=a.code)
        engines = {"ember": ember.compile(fn), "torch.compile": torch.compile(fn)}
        for label, f in engines.items():
            rows = _profile(f, args, a.reps)
            total = sum(t for _, t, _ in rows)
            print(f"== {name} {a.dtype} {label}: {total:.1f} us of kernels per call "
                  f"({nbytes / total / 1e3:.0f} GB/s of the ideal bytes)")
            for key, t, n in rows[:8]:
                print(f"  {t:9.1f} us  x{n}  {key[:110]}")


if __name__ == "__main__":
    main()
