"""Input factories shared by the code generators' differential tables (C++ and Triton)."""
from __future__ import annotations

import importlib.util

import pytest
import torch

# Triton's interpreter runs CPU tensors only where no CUDA device makes Triton compile for real (as in
# test_triton.py); tests/gpu covers the CUDA side
INTERPRETED = pytest.mark.skipif(importlib.util.find_spec("triton") is None or torch.cuda.is_available(),
                                 reason="Triton's interpreter on CPU tensors: needs triton and no CUDA device")


def _rn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype)


def _ints(*shape: int, lo: int = -50, hi: int = 50, nonzero: bool = False) -> torch.Tensor:
    t = torch.randint(lo, hi, shape)
    return torch.where(t == 0, torch.ones_like(t), t) if nonzero else t


def _distinct_rows(n: int, k: int, cols: int) -> torch.Tensor:
    """(k, cols) indices into n rows, distinct within each column (a scatter without two writes to one place)."""
    return torch.stack([torch.randperm(n)[:k] for _ in range(cols)], 1)


def _with_nans(*shape: int) -> torch.Tensor:
    t = torch.randn(*shape)
    t[1, 3] = float("nan")
    t[4, 0] = float("nan")
    return t


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _special_rows(rows: int, cols: int) -> torch.Tensor:
    """Long rows for looped softmax kernels: one of -inf only, one with a +inf, one with a NaN, one mostly -inf,
    one of large values (the running maximum keeps growing), the rest random."""
    t = torch.randn(rows, cols)
    t[0] = float("-inf")
    t[1, 5] = float("inf")
    t[2, 7] = float("nan")
    t[3, 100:] = float("-inf")
    t[4] = torch.linspace(-50, 80, cols)
    return t


def _stats_rows(rows: int, cols: int) -> torch.Tensor:
    """Rows for variance kernels: one with a NaN, one with a +inf, one constant (variance exactly 0), one of
    1e4 plus noise of std 0.01 (a sum of squares minus the squared sum cancels to nothing there), the rest
    random."""
    t = torch.randn(rows, cols)
    t[0, 3] = float("nan")
    t[1, 5] = float("inf")
    t[2] = 1.5
    if rows > 3:
        t[3] = 1e4 + 0.01 * torch.randn(cols)
    return t
