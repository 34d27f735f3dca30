"""Where an Adam-like update's kernel time goes on the GPU: ember's kernels (count, summed device time, bandwidth
against the copy's) for the same 2.8M float32 parameters as one tensor, as 40 of 65536, and as bench/kernels.py's
120 of mixed sizes; with combo kernels of at most --parts parts (1: none).

    python bench/adam_shapes.py --parts 128 [--inline]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def kernel_us(fn, args) -> tuple[int, float]:
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn(*args)
        torch.cuda.synchronize()
    kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len(kern) // 5, sum(e.device_time for e in kern) / 5


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", type=int, default=128)
    ap.add_argument("--inline", action="store_true", help="inline part functions shared by several parts")
    a = ap.parse_args()
    import kernels as kb

    import ember
    from ember.codegen import triton_combo
    from ember.loopir import combo
    combo.COMBO_MAX_PARTS = a.parts
    triton_combo.NOINLINE_SHARED = not a.inline
    bw = kb.copy_bandwidth("cuda")
    layouts = {"one_2.8M": [(2795520,)], "40x65536": [(128, 512)] * 40,
               "120_mixed": [(64, 64), (256,), (128, 512)] * 40}
    for name, sizes in layouts.items():
        def r(s):
            return torch.randn(*s, device="cuda")
        args = ([r(s) for s in sizes], [r(s) for s in sizes], [torch.zeros(*s, device="cuda") for s in sizes],
                [torch.rand(*s, device="cuda") + 1e-3 for s in sizes])
        nbytes = 7 * sum(t.numel() * 4 for t in args[0])
        ember.reset()
        f = ember.compile(kb.adam_update)
        t0 = time.perf_counter()
        f(*args)
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        n, us = kernel_us(f, args)
        print(json.dumps({"parts": a.parts, "inline": a.inline, "case": name, "launches": n, "kernel_us": round(us, 1),
                          "first_call_s": round(first_s, 2),
                          "bw_frac": round(nbytes / (us * 1e-6) / bw, 3)}), flush=True)


if __name__ == "__main__":
    main()
