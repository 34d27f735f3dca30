"""Gradients of ``amax``/``amin``/``max``/``min`` of a computed value. Their backward picks the points equal to the
result; when the backward recomputed the value (``cos(x)``) instead of loading it, a vector loop's result could
differ in the last bit from the forward's, match no point, and the gradient came out wrong (off by up to 0.96:
fuzz seed 450184). Such values, or their equality masks, are saved as eager saves them. Differential: gradients
compiled == eager, on shapes with vector tails."""
from __future__ import annotations

import pytest
import torch

import ember


def cos_permute_amin(x):
    return x.cos().permute(0, 2, 1).amin(1).sum()


def sin_amax_dim(x):
    return (x.sin().amax(-1) * 2).sum()


def exp_transposed_max(x):
    return x.transpose(1, 2).exp().max() + x.mean()


def log_min_dim(x):
    return x.abs().add(1).log().min(1).values.sum()


def tanh_amax_keepdim(x):
    t = (x * 0.5).tanh()        # not saturated: no ties at 1.0, where eager and ember may round apart
    return (t - t.amax(1, keepdim=True)).mul(torch.arange(t.shape[-1])).sum()


CASES = [cos_permute_amin, sin_amax_dim, exp_transposed_max, log_min_dim, tanh_amax_keepdim]


@pytest.mark.parametrize("shape", [(6, 4, 4), (3, 7, 5), (2, 9, 17), (4, 16, 33)])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_extremum_gradients(fn, shape):
    ember.reset()
    f = ember.compile(fn)
    for seed in (0, 1):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        fn(xe).backward()
        f(xc).backward()
        torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-4, atol=1e-5)
