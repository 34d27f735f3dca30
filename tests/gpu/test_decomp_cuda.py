"""Decompositions whose ATen results depend on the device: on CUDA, batch norm's and layer norm's saved
statistics are in the accumulate type, and batch norm in eval mode returns the running mean and the inverse std
it normalized with (the CPU returns empty tensors). Each decomposition must return what ATen returns on the
device it runs on: shapes, dtypes and values (the OpInfo sweep on CUDA found these).

Run on the device machine: ``python -m pytest -q tests/gpu/test_decomp_cuda.py``.
"""
import pytest
import torch

import ember.decomp as D

pytestmark = pytest.mark.gpu
aten = torch.ops.aten


def _same(out, ref) -> None:
    for i, (a, b) in enumerate(zip(out, ref)):
        assert (a.dtype, tuple(a.shape)) == (b.dtype, tuple(b.shape)), (i, a.dtype, a.shape, b.dtype, b.shape)
        tol = 1e-5 if b.dtype == torch.float32 else 2e-2
        torch.testing.assert_close(a, b, atol=tol, rtol=tol, msg=lambda m, i=i: f"tensor {i}: {m}")


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
def test_native_batch_norm_matches_aten_on_cuda(dt, training, affine) -> None:
    x = torch.randn(6, 4, 5, device="cuda", dtype=dt)
    w = torch.randn(4, device="cuda") if affine else None
    b = torch.randn(4, device="cuda") if affine else None
    rm, rv = torch.randn(4, device="cuda"), torch.rand(4, device="cuda") + 0.5
    stats = (None, None) if training else (rm, rv)       # with running stats in training: an extern (in place)
    ref = aten.native_batch_norm.default(x, w, b, *stats, training, 0.1, 1e-5)
    _same(D.run_decomposition(aten.native_batch_norm.default, x, w, b, *stats, training, 0.1, 1e-5), ref)
    if not training:
        _same(D.run_decomposition(aten._native_batch_norm_legit_no_training.default, x, w, b, rm, rv, 0.1, 1e-5),
              aten._native_batch_norm_legit_no_training.default(x, w, b, rm, rv, 0.1, 1e-5))


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
def test_native_layer_norm_matches_aten_on_cuda(dt, affine) -> None:
    x = torch.randn(6, 33, device="cuda", dtype=dt)
    w = torch.randn(33, device="cuda", dtype=dt) if affine else None
    ref = aten.native_layer_norm.default(x, (33,), w, w, 1e-5)
    _same(D.run_decomposition(aten.native_layer_norm.default, x, (33,), w, w, 1e-5), ref)
