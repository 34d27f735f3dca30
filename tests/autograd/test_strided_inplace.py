"""In-place ops through views of temporaries whose eager layout is not contiguous (a ``flip`` of a transposed
value keeps the transposed strides), through strided slices, diagonals and ``as_strided``: values and output
strides equal eager's, on the ``aot_eager`` backend and on every CPU kernel backend of ``ember``."""
from __future__ import annotations

import importlib.util

import pytest
import torch

import ember

from tests.loopir.backends import CPU_BACKENDS

CONFIGS = [("aot_eager", None)] + [("ember", b) for b in CPU_BACKENDS] + (
    [("ember", "triton")] if importlib.util.find_spec("triton") else [])


def roll_flip_relu(x):
    return x.roll(1, 1).transpose(0, 1).flip(1).transpose(0, 1).relu_()


def setitem_through_transpose(x):
    t = x.clone().t()
    t[0] = 5
    return t


def transposed_clone_mul(x):
    return x.clone().t().mul_(2)


def step_slice_add(x):
    t = x.clone()
    t[:, ::2].add_(1)
    return t


def step_slice_returned(x):
    t = x.clone()
    return t[:, ::2].add_(1)


def as_strided_update(x):
    t = x.clone()
    v = t.as_strided((2, 2), (1, 4))
    v.mul_(3)
    return t, v


def flipped_transpose_setitem(x):
    y = x.t().flip(0)
    y[1] = 0
    return y


def flipped_transpose_step_mul(x):
    y = x.t().flip(0)
    y[::2].mul_(3)
    return y


def transposed_product_diagonal(x):
    y = x.t() * 2
    y.diagonal().zero_()
    return y


def permuted_sub(x):
    t = (x * 2).permute(1, 0)
    t.sub_(1)
    return t, t.sum(0)


def as_strided_of_flipped_transpose(x):
    return x.t().flip(0).as_strided((2, 2), (1, 3))


def as_strided_of_transposed_product(x):
    return (x.t() * 2).as_strided((2, 3), (1, 4), 1)


def update_read_through_as_strided(x):
    y = x.t().flip(0)
    y.add_(1)
    return y.as_strided((3, 2), (1, 5), 2)


def copy_into_transposed_zeros(x):
    t = torch.zeros(4, 3).t()
    t.copy_(x)
    return t


CASES = [roll_flip_relu, setitem_through_transpose, transposed_clone_mul, step_slice_add, step_slice_returned,
         as_strided_update, flipped_transpose_setitem, flipped_transpose_step_mul, transposed_product_diagonal,
         permuted_sub, as_strided_of_flipped_transpose, as_strided_of_transposed_product,
         update_read_through_as_strided, copy_into_transposed_zeros]


@pytest.mark.parametrize("backend,cpu_backend", CONFIGS, ids=lambda c: str(c))
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_inplace_through_strided_views(fn, backend, cpu_backend):
    ember.reset()
    opts = {"cpu_backend": cpu_backend} if cpu_backend else None
    f = ember.compile(fn, backend=backend, options=opts)
    for seed in (0, 1):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(seed))
        expected, got = fn(x.clone()), f(x.clone())
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        torch.testing.assert_close(got, expected)
        assert [t.stride() for t in got] == [t.stride() for t in expected]


@pytest.mark.parametrize("backend,cpu_backend", CONFIGS, ids=lambda c: str(c))
@pytest.mark.parametrize("fn", [roll_flip_relu, flipped_transpose_step_mul, transposed_product_diagonal,
                                as_strided_of_transposed_product], ids=lambda f: f.__name__)
def test_gradients_through_strided_views(fn, backend, cpu_backend):
    ember.reset()
    opts = {"cpu_backend": cpu_backend} if cpu_backend else None
    f = ember.compile(fn, backend=backend, options=opts)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected, got = fn(xe * 1), f(xc * 1)
    torch.testing.assert_close(got, expected)
    w = torch.randn(expected.shape, generator=torch.Generator().manual_seed(1))
    (expected * w).sum().backward()
    (got * w).sum().backward()
    torch.testing.assert_close(xc.grad, xe.grad)
