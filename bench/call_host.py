"""Host time of one cached call per engine, for the kernel microbenchmarks' cases (bench/kernels.py): calls
enqueued while the GPU sleeps (``torch.cuda._sleep``), so no launch waits for the device; microseconds per call,
median over batches. A case whose device time is below an engine's host time is host-bound for that engine.

    python bench/call_host.py [--dtype bfloat16] [--only rms_norm,layer_norm] [--calls 50] [--profile]

``--profile`` adds cProfile's top functions of ember's calls (after the timing)."""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels import cases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--only", default="")
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--batches", type=int, default=9)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    import ember
    dtype = getattr(torch, a.dtype)
    from ember.bench.measure import sleep_cycles_per_ms
    per_ms = sleep_cycles_per_ms()
    print(f"host us per cached call, {a.dtype}, {a.calls} calls per batch, median of {a.batches} batches")
    print(f"{'case':<20}{'eager':>10}{'torch':>10}{'ember':>10}")
    for name, fn, args, _ in cases("cuda", dtype, False):
        if a.only and name not in a.only.split(","):
            continue
        torch._dynamo.reset()
        ember.reset()
        engines = {"eager": fn, "torch": torch.compile(fn), "ember": ember.compile(fn)}
        row = {}
        for k, f in engines.items():
            for _ in range(3):
                f(*args)
            torch.cuda.synchronize()
            batches = []
            for _ in range(a.batches):
                torch.cuda._sleep(int(per_ms * 200))       # longer than any batch's host time here
                t = time.perf_counter()
                for _ in range(a.calls):
                    f(*args)
                batches.append((time.perf_counter() - t) / a.calls * 1e6)
                torch.cuda.synchronize()
            row[k] = statistics.median(batches)
        print(f"{name:<20}{row['eager']:>10.1f}{row['torch']:>10.1f}{row['ember']:>10.1f}", flush=True)
        if a.profile:
            import cProfile
            import pstats
            f = engines["ember"]
            pr = cProfile.Profile()
            torch.cuda._sleep(int(per_ms * 200))
            pr.enable()
            for _ in range(a.calls):
                f(*args)
            pr.disable()
            torch.cuda.synchronize()
            pstats.Stats(pr).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
