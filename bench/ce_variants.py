"""Cross-entropy forward over a 32k vocabulary as hand-written Triton variants: which loop form reaches the copy
bandwidth (a diagnosis for the kernel compiler's online softmax; not a benchmark of ember).

    python bench/ce_variants.py [--dtype bfloat16] [--rows 4096] [--vocab 32768]

Variants, each per (XBLOCK, RBLOCK, num_warps):
- ``lane``: a running max and sum per lane (ember's online softmax before this comparison; one exp per point);
- ``block``: a running max and sum per row (ember's since), updated once per block from the block's max
  (``tl.max``) and its sum of exps: one exp per point and fewer ALU ops per point, two cross-thread reductions
  per block;
- ``twopass``: the max in one loop, the sum of exps in a second loop over the same row (L2 may hold it);
- ``read``: the row's sum alone, the read bandwidth a row kernel reaches.
Prints the median time (triton.testing.do_bench), bytes / time, and that as a fraction of the device's copy
bandwidth (2 * bytes / time of ``y.copy_(x)``).
"""
from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

from ember.codegen import triton_helpers as _h


@triton.jit
def _lane_step(m, s, x):
    """The per-lane online softmax step ember used before (one exp per point: with ``d = x - m``, ``exp(-|d|)``
    is both the term added when ``x`` is not a new maximum and the rescale of ``s`` when it is)."""
    d = x - m
    e = tl.exp(-tl.abs(d))
    s_new = tl.where(d > 0, s * e + 1.0, s + e)
    return _h.maximum(m, x), tl.where(x == float("-inf"), s, s_new)


@triton.jit
def _lane_finish(m, s):
    """The row's sum of exp(g - M) from the lanes' (m, s), M the row's max."""
    big = tl.reduce(m, 1, _h.maximum)[:, None]
    return tl.sum(s * tl.exp(m - big), 1)[:, None]


@triton.jit
def lane_kernel(p_x, p_t, p_out, V: tl.constexpr, XB: tl.constexpr, RB: tl.constexpr):
    xi = tl.program_id(0) * XB + tl.arange(0, XB)[:, None]
    rb = tl.arange(0, RB)[None, :]
    t = tl.load(p_t + xi)
    xt = tl.load(p_x + xi * V + t).to(tl.float32)
    m = tl.full([XB, RB], float("-inf"), tl.float32)
    s = tl.full([XB, RB], 0.0, tl.float32)
    for r0 in range(0, V, RB):
        x = tl.load(p_x + xi * V + r0 + rb).to(tl.float32)
        m, s = _lane_step(m, s, x)
    big = tl.reduce(m, 1, _h.maximum)[:, None]
    tot = _lane_finish(m, s)
    tl.store(p_out + xi, big + tl.log(tot) - xt)


@triton.jit
def block_kernel(p_x, p_t, p_out, V: tl.constexpr, XB: tl.constexpr, RB: tl.constexpr):
    xi = tl.program_id(0) * XB + tl.arange(0, XB)[:, None]
    rb = tl.arange(0, RB)[None, :]
    t = tl.load(p_t + xi)
    xt = tl.load(p_x + xi * V + t).to(tl.float32)
    m = tl.full([XB, 1], float("-inf"), tl.float32)
    s = tl.full([XB, 1], 0.0, tl.float32)
    for r0 in range(0, V, RB):
        x = tl.load(p_x + xi * V + r0 + rb).to(tl.float32)
        bm = tl.max(x, 1)[:, None]
        mn = tl.maximum(m, bm)
        base = tl.where(mn == float("-inf"), 0.0, mn)
        s = s * tl.exp(m - base) + tl.sum(tl.exp(x - base), 1)[:, None]
        m = mn
    tl.store(p_out + xi, m + tl.log(s) - xt)


@triton.jit
def twopass_kernel(p_x, p_t, p_out, V: tl.constexpr, XB: tl.constexpr, RB: tl.constexpr):
    xi = tl.program_id(0) * XB + tl.arange(0, XB)[:, None]
    rb = tl.arange(0, RB)[None, :]
    t = tl.load(p_t + xi)
    xt = tl.load(p_x + xi * V + t).to(tl.float32)
    m = tl.full([XB, RB], float("-inf"), tl.float32)
    for r0 in range(0, V, RB):
        x = tl.load(p_x + xi * V + r0 + rb).to(tl.float32)
        m = tl.maximum(m, x)
    big = tl.max(m, 1)[:, None]
    s = tl.full([XB, RB], 0.0, tl.float32)
    for r0 in range(0, V, RB):
        x = tl.load(p_x + xi * V + r0 + rb).to(tl.float32)
        s += tl.exp(x - big)
    tl.store(p_out + xi, big + tl.log(tl.sum(s, 1)[:, None]) - xt)


@triton.jit
def read_kernel(p_x, p_t, p_out, V: tl.constexpr, XB: tl.constexpr, RB: tl.constexpr):
    xi = tl.program_id(0) * XB + tl.arange(0, XB)[:, None]
    rb = tl.arange(0, RB)[None, :]
    s = tl.full([XB, RB], 0.0, tl.float32)
    for r0 in range(0, V, RB):
        s += tl.load(p_x + xi * V + r0 + rb).to(tl.float32)
    tl.store(p_out + xi, tl.sum(s, 1)[:, None])


KERNELS = {"lane": lane_kernel, "block": block_kernel, "twopass": twopass_kernel, "read": read_kernel}
CONFIGS = [(1, 2048, 8), (1, 4096, 8), (1, 4096, 16), (2, 2048, 8), (2, 4096, 16), (4, 1024, 8), (4, 2048, 16),
           (8, 512, 8), (1, 8192, 16), (1, 1024, 4)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=32768)
    a = ap.parse_args()
    dt = getattr(torch, a.dtype)
    x = torch.randn(a.rows, a.vocab, device="cuda").to(dt)
    t = torch.randint(0, a.vocab, (a.rows,), device="cuda")
    out = torch.empty(a.rows, device="cuda")
    ref = torch.nn.functional.cross_entropy(x.float(), t, reduction="none")
    nbytes = x.numel() * x.element_size()
    y = torch.empty_like(x)
    copy_ms = triton.testing.do_bench(lambda: y.copy_(x), rep=200)
    bw = 2 * nbytes / (copy_ms * 1e-3)
    print(f"{torch.cuda.get_device_name()} {a.dtype} {a.rows}x{a.vocab}: copy bandwidth {bw / 1e9:.0f} GB/s")
    for name, k in KERNELS.items():
        for xb, rb, nw in CONFIGS:
            if a.rows % xb:
                continue
            def run():
                k[(a.rows // xb,)](x, t, out, V=a.vocab, XB=xb, RB=rb, num_warps=nw)
            try:
                run()
                torch.cuda.synchronize()
            except Exception as e:       # noqa: BLE001 - a config the compiler refuses (registers, shared memory)
                print(f"{name:8} X{xb} R{rb} w{nw}: {type(e).__name__}")
                continue
            ok = name == "read" or torch.allclose(out, ref, atol=2e-3, rtol=2e-3)
            ms = triton.testing.do_bench(run, rep=200)
            print(f"{name:8} X{xb:<2} R{rb:<5} w{nw:<3} {ms * 1e3:8.1f} us  {nbytes / (ms * 1e-3) / 1e9:6.0f} GB/s  "
                  f"{nbytes / (ms * 1e-3) / bw:5.0%}{'' if ok else '  WRONG'}")


if __name__ == "__main__":
    main()
