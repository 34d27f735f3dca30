"""A reduction over outer points whose per-point statements load through an index read from a tensor
(``x[torch.tensor([-2])]`` of a small matrix, in the backward of ``x * tanh(x[idx])``). The C++ kernels that keep
per-point values in arrays (interleaved runs of fewer points than vector lanes, tiled column reductions) wrote the
loaded index without its point (``p[4 * tmp5 + xindex]`` with ``tmp5`` an array): the kernel did not compile
(fuzz seed 471320). Differential: values and gradients compiled == eager, for several shapes."""
from __future__ import annotations

import pytest
import torch

import ember


def gathered_row(x, idx):
    return x * torch.tanh(x[idx])


def gathered_row_and_max(x, idx):
    y = x * torch.tanh(x[idx])
    return y, y.amax()


def gathered_row_mean(x, idx):
    return (x * x[idx].sigmoid()).mean(0, keepdim=True) + x


def index_select_cols(x, idx):
    return (x.index_select(0, idx) * x).sum(0) + x.sum(0)


@pytest.mark.parametrize("shape", [(2, 4), (3, 2), (5, 4), (2, 16), (40, 4)])
@pytest.mark.parametrize("fn", [gathered_row, gathered_row_and_max, gathered_row_mean, index_select_cols], ids=lambda f: f.__name__)
def test_indirect_index_in_column_reduction(fn, shape):
    ember.reset()
    f = ember.compile(fn)
    for seed in (0, 1):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(shape, generator=g)
        neg = seed and fn is not index_select_cols        # index_select takes no negative index
        idx = torch.tensor([-2 if neg else shape[0] - 1 - seed])
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        expected, got = fn(xe, idx), f(xc, idx)
        torch.testing.assert_close(got, expected)
        expected, got = (expected, got) if isinstance(got, tuple) else ((expected,), (got,))
        w = torch.randn(expected[0].shape, generator=g)
        (expected[0] * w).sum().backward()        # the loss on the first output only
        (got[0] * w).sum().backward()
        torch.testing.assert_close(xc.grad, xe.grad)
