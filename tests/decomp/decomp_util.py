"""Shared helpers of the ember.decomp tests: random tensors of several shapes and dtypes."""
from __future__ import annotations

import zlib

import torch

TOL = {torch.float32: dict(atol=1e-5, rtol=1.3e-5), torch.float64: dict(atol=1e-10, rtol=1e-9),
       torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2), torch.float16: dict(atol=1e-3, rtol=1e-3)}


def rand(shape, dtype=torch.float32, low=-3.0, high=3.0, noncontig=False, gen=None):
    """A random tensor (never zeros); ints in [low, high); non-contiguous if asked (a transposed view)."""
    # a seed from the shape and dtype that is the same in every process (str hashes are randomized per process)
    g = gen or torch.Generator().manual_seed(zlib.crc32(repr((tuple(shape), str(dtype))).encode()))
    if noncontig and len(shape) >= 2:
        t = rand(tuple(shape[:-2]) + (shape[-1], shape[-2]), dtype, low, high, gen=g)
        return t.transpose(-1, -2)
    if dtype is torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(int(low), int(high), shape, generator=g, dtype=dtype)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)


def assert_same(out, ref, dtype=None):
    """Values close with per-dtype tolerances, dtypes and shapes equal, recursively over tuples/lists."""
    if isinstance(ref, (tuple, list)):
        assert isinstance(out, (tuple, list)) and len(out) == len(ref), (type(out), len(ref))
        for o, r in zip(out, ref):
            assert_same(o, r, dtype)
        return
    if not isinstance(ref, torch.Tensor):
        assert out == ref
        return
    assert out.dtype == ref.dtype, (out.dtype, ref.dtype)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    tol = TOL.get(ref.dtype, dict(atol=0, rtol=0)) if dtype is None else TOL[dtype]
    torch.testing.assert_close(out, ref, equal_nan=True, **tol)
