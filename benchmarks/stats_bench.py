"""Variance/mean kernels (ember.loopir.welford): ember vs eager vs torch.compile, time and accuracy.

Shapes that take each path: rows held whole (persistent Triton reductions, LayerNorm), long looped rows, split
rows (few long rows on CUDA: chunks of whole points, or a prime length: shifted sums of squares), per-channel
batch statistics over NCHW. The data is ``offset + noise`` (offset 0 and 1e4; std 1 and 0.01) so that the error
columns show what each engine loses to cancellation; errors are max relative to float64.

    python benchmarks/stats_bench.py [--device cuda] [--reps 50]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ember  # noqa: E402
from ember.bench.measure import time_interleaved  # noqa: E402

CASES = [
    ("layer_norm 32768x768", lambda x: F.layer_norm(x, x.shape[-1:]), (32768, 768), False),
    ("var_mean rows 8192x8192", lambda x: torch.var_mean(x, -1), (8192, 8192), True),
    ("var_mean rows 512x65536", lambda x: torch.var_mean(x, -1), (512, 65536), True),
    ("var_mean 4x2^24 (split)", lambda x: torch.var_mean(x, -1), (4, 1 << 24), True),
    ("var_mean 4x16777213 (prime)", lambda x: torch.var_mean(x, -1), (4, 16777213), True),
    ("bn stats 64x128x56x56", lambda x: torch.var_mean(x, (0, 2, 3)), (64, 128, 56, 56), True),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    dev = torch.device(args.device)
    torch.manual_seed(0)
    print(f"device {torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}; times are medians (us) of calls queued back to back; GB/s: the input (and the output of layer_norm) over ember's time; "
          "err: max relative error of the variance vs float64 (std 0.01 around 1e4)")
    print(f"{'case':32s} {'eager':>9s} {'ember':>9s} {'inductor':>9s} {'ember/ind':>9s} {'ember GB/s':>10s}  "
          f"{'err eager':>9s} {'err ember':>9s} {'err ind':>9s}")
    for name, fn, shape, stats in CASES:
        x = torch.randn(*shape, device=dev)
        off = 1e4 + 0.01 * torch.randn(*shape, device=dev)
        engines = {"eager": fn, "ember": ember.compile(fn), "inductor": torch.compile(fn)}
        errs = {}
        for k, f in engines.items():
            f(x)
            if stats:
                var = f(off)[0]
                ref = fn(off.double())[0]
                errs[k] = ((var.double() - ref).abs() / ref.abs()).max().item()
            else:
                errs[k] = float("nan")
        t, bad = time_interleaved({k: (lambda f=f: f(x)) for k, f in engines.items()}, dev, args.reps)
        med = {k: v.median_ms * 1e3 for k, v in t.items()}
        gbs = x.numel() * x.element_size() * (2 if not stats else 1) / (med['ember'] * 1e-6) / 1e9
        print(f"{name:32s} {med['eager']:9.1f} {med['ember']:9.1f} {med['inductor']:9.1f} "
              f"{med['ember'] / med['inductor']:9.2f} {gbs:10.0f}  {errs['eager']:9.2e} {errs['ember']:9.2e} "
              f"{errs['inductor']:9.2e}{'  errors: ' + str(bad) if bad else ''}")


if __name__ == "__main__":
    main()
