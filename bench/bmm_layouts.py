"""Batched matmul time by operand layout (a diagnosis for where generated kernels should write matmul operands):
``bmm(a, b)`` with ``b`` a transposed view of a contiguous tensor against ``b`` contiguous, for fp32 and bf16,
at attention's shapes (BERT-base at batch 8, sequence 512: 96 heads of 512 x 64).

    python bench/bmm_layouts.py
"""
from __future__ import annotations

import torch
import triton


def main() -> None:
    for dt in (torch.float32, torch.bfloat16):
        for bh, m, k, n in ((96, 512, 64, 512), (96, 512, 512, 64)):
            a = torch.randn(bh, m, k, device="cuda", dtype=dt)
            bt = torch.randn(bh, n, k, device="cuda", dtype=dt)     # b as the transpose of a contiguous tensor
            b = bt.transpose(1, 2).contiguous()
            at = a.transpose(1, 2).contiguous().transpose(1, 2)     # a as a transposed view
            cases = {"a @ b (nn)": (a, b), "a @ bt.T (tn: b transposed view)": (a, bt.transpose(1, 2)),
                     "at.T @ b (a transposed view)": (at, b)}
            for name, (x, y) in cases.items():
                ms = triton.testing.do_bench(lambda: torch.bmm(x, y), rep=100)
                print(f"{str(dt):15} [{bh}, {m}, {k}] @ [{bh}, {k}, {n}]  {name:34} {ms * 1e3:8.1f} us")
            ms = triton.testing.do_bench(lambda: bt.transpose(1, 2).contiguous(), rep=100)
            print(f"{'':15} copy of b into its transposed layout {ms * 1e3:8.1f} us")


if __name__ == "__main__":
    main()
