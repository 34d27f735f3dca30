"""An input updated in place by a kernel that also reads it: no read of the input's old value may come after the
store of its new value, in any loop of the kernel (a reduction kernel recomputes an inlined value in each loop that
needs it) or in a later kernel. Values and input mutations equal eager's, on inputs that alias each other too."""
from __future__ import annotations

import importlib.util

import pytest
import torch

import ember

from .backends import CPU_BACKENDS

BACKENDS = CPU_BACKENDS + (["triton"] if importlib.util.find_spec("triton") else [])


def mul_then_mean(x, y):
    y.mul_(0.5)
    return y + x.mean()


def var_then_relu(x, y):
    t = y + x.var()
    y.relu_()
    return t


def add_then_row_sums(x, y):
    y.add_(1)
    return y * x.sum(1, keepdim=True)


def copy_then_amax(x, y):
    y.copy_(x * 2)
    return y - y.amax(1, keepdim=True)


def softmax_then_mul(x, y):
    s = torch.softmax(y, 1)
    y.mul_(2)
    return s + y


def mul_then_softmax(x, y):
    y.mul_(2)
    return torch.softmax(y, 1) + x


def relu_then_own_mean(x, y):
    y.relu_()
    return y - y.mean()


def own_row_mean_added(x, y):
    y.add_(y.mean(1, keepdim=True))
    return y * 2


def other_var_subtracted(x, y):
    y.sub_(x.var(1, keepdim=True))
    return y + x


def index_put_then_sum(x, y):
    y[0] = 3.0
    return y + x.sum()


def broadcast_column_means(x, y):
    y.mul_(2)
    return y + x.mean(0)


def scaled_by_own_mean_then_mul(x, y):
    t = y * y.mean()
    y.mul_(3)
    return t


def both_updated(x, y):
    x.add_(1)
    y.mul_(x.mean())
    return x.sum() + y


CASES = [mul_then_mean, var_then_relu, add_then_row_sums, copy_then_amax, softmax_then_mul, mul_then_softmax,
         relu_then_own_mean, own_row_mean_added, other_var_subtracted, index_put_then_sum, broadcast_column_means,
         scaled_by_own_mean_then_mul, both_updated]


def _inputs(aliasing, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if aliasing == "distinct":
        return torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)
    if aliasing == "same":                # f(t, t)
        t = torch.randn(*shape, generator=g)
        return t, t
    b = torch.randn(shape[0] + 1, shape[1], generator=g)     # overlapping rows of one base
    return b[1:], b[:-1]


def _check(fn, backend, aliasing, shape):
    ember.reset()
    f = ember.compile(fn, options={"cpu_backend": backend})
    for seed in (0, 1):
        xe, ye = _inputs(aliasing, shape, seed)
        xc, yc = _inputs(aliasing, shape, seed)
        torch.testing.assert_close(f(xc, yc), fn(xe, ye))
        torch.testing.assert_close((xc, yc), (xe, ye))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_update_next_to_reduction(fn, backend):
    _check(fn, backend, "distinct", (3, 4))


@pytest.mark.parametrize("aliasing", ["same", "overlapping"])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_update_of_aliased_inputs(fn, aliasing):
    _check(fn, CPU_BACKENDS[-1], aliasing, (3, 4))


@pytest.mark.skipif("triton" not in BACKENDS, reason="needs triton")
@pytest.mark.parametrize("fn", [mul_then_mean, var_then_relu, softmax_then_mul, mul_then_softmax,
                                scaled_by_own_mean_then_mul], ids=lambda f: f.__name__)
def test_update_next_to_looped_reduction(fn):
    """Rows longer than a persistent Triton reduction holds: each loop of the kernel loads its values again."""
    _check(fn, "triton", "distinct", (2, 4500))
