"""The reductions of BERT's training step (6 layers, batch 8 x 512, bf16 autocast) that ember's profile shows
behind torch.compile's, timed alone on the GPU: ember's default configuration, ember max-autotune (its table
printed with EMBER_LOGS=autotune), torch.compile default, eager. Median device microseconds of calls queued
back to back over rotating input copies (``bench/kernels.py``'s ``time_queued``), and achieved GB/s.

    EMBER_LOGS=autotune python bench/bert_reductions.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ember  # noqa: E402
from kernels import _nbytes, time_queued  # noqa: E402


def softmax_fwd(s, mask):
    return torch.softmax(s.float() * 0.125 + mask, -1)


def softmax_bwd(g, y):
    return torch._softmax_backward_data(g.float(), y, -1, torch.float32).bfloat16()


def ln_weight_grad(g, x, mean, rstd):
    xhat = (x.float() - mean[:, None]) * rstd[:, None]
    return (g.float() * xhat).sum(0), g.float().sum(0)


def cases():
    dev = "cuda"
    s = torch.randn(8, 12, 512, 512, device=dev, dtype=torch.bfloat16)
    mask = torch.zeros(8, 1, 1, 512, device=dev)
    mask[:, :, :, 480:] = -1e4
    y = torch.softmax(s.float(), -1)
    g = torch.randn_like(s)
    x = torch.randn(4096, 768, device=dev, dtype=torch.bfloat16)
    gx = torch.randn_like(x)
    mean = x.float().mean(1)
    rstd = torch.rsqrt(x.float().var(1, unbiased=False) + 1e-12)
    return [("softmax_fwd 8x12x512x512", softmax_fwd, (s, mask), _nbytes(s) + 4 * s.numel()),
            ("softmax_bwd 8x12x512x512", softmax_bwd, (g, y), _nbytes((g, y)) + _nbytes(g)),
            ("ln_weight_grad 4096x768", ln_weight_grad, (gx, x, mean, rstd), _nbytes((gx, x)))]


def main() -> None:
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'case':28s} {'eager us':>9s} {'torch us':>9s} {'ember us':>9s} {'ember MA':>9s} {'ember GB/s':>10s}")
    for name, fn, args, nbytes in cases():
        fns = {"eager": fn, "torch": torch.compile(fn), "ember": ember.compile(fn),
               "ember_ma": ember.compile(fn, mode="max-autotune-no-cudagraphs")}
        for f in fns.values():
            f(*args)
        sets = [tuple(a.clone() for a in args) for _ in range(4)]
        t = time_queued(fns, sets, 60)
        us = {k: 1e3 * v for k, v in t.items()}
        print(f"{name:28s} {us['eager']:9.1f} {us['torch']:9.1f} {us['ember']:9.1f} {us['ember_ma']:9.1f} "
              f"{nbytes / (us['ember'] * 1e-6) / 1e9:10.0f}", flush=True)


if __name__ == "__main__":
    main()
