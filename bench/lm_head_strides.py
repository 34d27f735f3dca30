"""GPT-2's LM head (8 x 512 x 768 @ 768 x 50257 under bf16 autocast, the weight in float32) compiled by
torch.compile and by ember: the output's strides (does the compiler return the padded layout?) and the time.
    python bench/lm_head_strides.py"""
import time

import torch
import torch.nn.functional as F

import ember


def head(x, w):
    with torch.autocast("cuda", torch.bfloat16):
        return F.linear(x, w)


def bench(f, *a, n=50):
    for _ in range(5):
        f(*a)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        f(*a)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e3


x = torch.randn(8, 512, 768, device="cuda")
w = torch.randn(50257, 768, device="cuda") * 0.02
ref = head(x, w)
for name, f in [("eager", head), ("torch.compile", torch.compile(head)), ("ember", ember.compile(head))]:
    out = f(x, w)
    err = (out.float() - ref.float()).abs().max().item()
    print(f"{name:14s} {bench(f, x, w):.3f} ms  stride {out.stride()}  max err {err:.3g}")
