"""Why a memory-bound row reduction (RMSNorm over rows of 4096, bf16) runs below copy bandwidth: hand-written
Triton variants of the same kernel (persistent: the row in registers; looped: two passes, the second re-reading
the row from L2), each timed over rotating input sets (so no run reads its input from L2), next to ember's and
torch.compile's compiled functions timed the same way. Prints microseconds and the fraction of copy bandwidth.

    python bench/rownorm_variants.py [--rows 8192] [--cols 4096] [--dtype bfloat16]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@triton.jit
def _persistent(x_ptr, w_ptr, out_ptr, R: tl.constexpr, XB: tl.constexpr, RB: tl.constexpr):
    row = tl.program_id(0) * XB + tl.arange(0, XB)[:, None]
    col = tl.arange(0, RB)[None, :]
    x = tl.load(x_ptr + row * R + col).to(tl.float32)
    inv = tl.math.rsqrt(tl.sum(x * x, 1)[:, None] / R + 1e-6)
    w = tl.load(w_ptr + col).to(tl.float32)
    y = (x * inv).to(out_ptr.dtype.element_ty).to(tl.float32) * w
    tl.store(out_ptr + row * R + col, y.to(out_ptr.dtype.element_ty))


@triton.jit
def _looped(x_ptr, w_ptr, out_ptr, R: tl.constexpr, RB: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([RB], tl.float32)
    for off in range(0, R, RB):
        x = tl.load(x_ptr + row * R + off + tl.arange(0, RB), eviction_policy="evict_last").to(tl.float32)
        acc += x * x
    inv = tl.math.rsqrt(tl.sum(acc, 0) / R + 1e-6)
    for off in range(0, R, RB):
        col = off + tl.arange(0, RB)
        x = tl.load(x_ptr + row * R + col, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(w_ptr + col, eviction_policy="evict_last").to(tl.float32)
        y = (x * inv).to(out_ptr.dtype.element_ty).to(tl.float32) * w
        tl.store(out_ptr + row * R + col, y.to(out_ptr.dtype.element_ty))


def rms_norm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def _time(fn, sets: list, reps: int = 40) -> float:
    """Median microseconds of ``fn(*args)`` cycling through ``sets`` (each larger than L2 together)."""
    for args in sets:
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        args = sets[i % len(sets)]
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)        # the launch waits in the queue: host time stays out of the number
        s.record()
        fn(*args)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    import ember
    dt = getattr(torch, a.dtype)
    n, r = a.rows, a.cols
    sets = [(torch.randn(n, r, device="cuda", dtype=dt), torch.randn(r, device="cuda", dtype=dt)) for _ in range(6)]
    outs = [torch.empty(n, r, device="cuda", dtype=dt) for _ in range(6)]
    big = torch.empty(1 << 28, device="cuda")
    copy_us = _time(lambda: big[1 << 27:].copy_(big[:1 << 27]), [()])
    bw = 2 * (1 << 27) * 4 / (copy_us * 1e-6)
    nbytes = 2 * n * r * dt.itemsize + r * dt.itemsize
    ref = rms_norm(*sets[0])
    rows = []

    def report(name, us, out=None):
        ok = "" if out is None or torch.allclose(out.float(), ref.float(), atol=3e-2, rtol=3e-2) else "  WRONG"
        rows.append((name, us))
        print(f"{name:<36}{us:9.1f} us {nbytes / (us * 1e-6) / bw:7.0%} of copy bandwidth{ok}", flush=True)
    print(f"rms_norm {n}x{r} {a.dtype}; copy bandwidth {bw / 1e9:.0f} GB/s")
    sets2 = [(x, wt, o) for (x, wt), o in zip(sets, outs)]
    variants = [(f"persistent XBLOCK={xb} warps={w}",
                 lambda x, wt, o, xb=xb, w=w: _persistent[(n // xb,)](x, wt, o, r, xb, r, num_warps=w))
                for xb, w in ((1, 4), (1, 8), (1, 16), (2, 8), (2, 16), (4, 16)) if xb * r <= 16384]
    variants += [(f"looped RBLOCK={rb} warps={w} stages={st}",
                  lambda x, wt, o, rb=rb, w=w, st=st: _looped[(n,)](x, wt, o, r, rb, num_warps=w, num_stages=st))
                 for rb, w, st in ((1024, 4, 1), (2048, 8, 1), (2048, 8, 2), (4096, 8, 1), (4096, 16, 1),
                                   (1024, 8, 3))]
    for name, f in variants:
        us = _time(f, sets2)
        outs[0].zero_()
        f(*sets2[0])
        report(name, us, outs[0])
    torch._dynamo.reset()
    for name, f in (("torch.compile", torch.compile(rms_norm)), ("ember", ember.compile(rms_norm))):
        report(name, _time(f, sets), f(*sets[0]))


if __name__ == "__main__":
    main()
