"""Graph outputs computed by kernels have eager's strides: pointwise ops on channels-last tensors stay
channels-last (also after a convolution, whose CPU result is channels-last), mixed layouts follow torch's
rules as the traced fake tensors give them, and a permuted or strided input's pointwise result keeps its
order. Values, strides and gradients equal eager's on every CPU kernel backend."""
from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F

import ember

from .backends import CPU_BACKENDS

BACKENDS = CPU_BACKENDS + (["triton"] if importlib.util.find_spec("triton") else [])
CL = torch.channels_last


def times_two(x, y):
    return x * 2


def relu(x, y):
    return torch.relu(x)


def add(x, y):
    return x + y


def add_contiguous(x, y):
    return x + y.contiguous()


def add_contiguous_first(x, y):
    return y.contiguous() + x


def add_broadcast(x, y):
    return x + y[:, :, :1, :1]


def conv_relu(x, y):
    return torch.relu(F.conv2d(x, y[:, :, :3, :3], padding=1))


def conv_weight_channels_last(x, y):
    return F.conv2d(x.contiguous(), y[:, :, :3, :3]).sigmoid()


def two_outputs_and_a_reduction(x, y):
    return x * 2, (x * y).sum(1, keepdim=True), x.exp()


def transposed(x, y):
    return x.transpose(2, 3) + 1


def permuted_then_updated(x, y):
    t = (x * 2).permute(0, 2, 3, 1)
    t.sub_(1)
    return t + 1


def exp_of_strided_view(x, y):
    return x.flatten().as_strided((4, 5), (1, 7)).exp()


def value_and_its_permuted_view(x, y):
    t = x * 2           # used twice: stored once, and the graph returns it and a view of it
    return t, t.permute(0, 2, 3, 1)


def reused_value_transposed_view(x, y):
    t = torch.sigmoid(x) + y
    return t.transpose(1, 3), t.sum()


def slice_of_product(x, y):
    return (x * 2)[:, :, 1:]             # eager: a view of the channels-last product


def channel_of_clone(x, y):
    return x.clone()[:, 1]


def step_slice_of_contiguous_sum(x, y):
    return (x.contiguous() + 1)[:, ::2, :, 1::2]


CASES = [slice_of_product, channel_of_clone, step_slice_of_contiguous_sum, value_and_its_permuted_view, reused_value_transposed_view, times_two, relu, add, add_contiguous, add_contiguous_first, add_broadcast, conv_relu,
         conv_weight_channels_last, two_outputs_and_a_reduction, transposed, permuted_then_updated,
         exp_of_strided_view]


def _inputs(seed, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 4, 5, 6, generator=g).contiguous(memory_format=CL)
    y = torch.randn(4, 4, 5, 6, generator=g).contiguous(memory_format=CL)[:2]
    return x.requires_grad_(requires_grad), y


def _flat(out):
    return list(out) if isinstance(out, tuple) else [out]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_output_strides(fn, backend):
    ember.reset()
    f = ember.compile(fn, options={"cpu_backend": backend})
    for seed in (0, 1):
        expected, got = _flat(fn(*_inputs(seed))), _flat(f(*_inputs(seed)))
        torch.testing.assert_close(got, expected)
        assert [t.stride() for t in got] == [t.stride() for t in expected]


@pytest.mark.parametrize("fn", [times_two, add, conv_relu, transposed], ids=lambda f: f.__name__)
def test_output_strides_with_grad(fn):
    ember.reset()
    f = ember.compile(fn, options={"cpu_backend": CPU_BACKENDS[-1]})
    (xe, ye), (xc, yc) = _inputs(0, True), _inputs(0, True)
    expected, got = _flat(fn(xe, ye)), _flat(f(xc, yc))
    torch.testing.assert_close(got, expected)
    assert [t.stride() for t in got] == [t.stride() for t in expected]
    sum(t.sum() for t in expected).backward()
    sum(t.sum() for t in got).backward()
    torch.testing.assert_close(xc.grad, xe.grad)


def test_channels_last_3d():
    ember.reset()
    fn = lambda x: torch.relu(x) * 3       # noqa: E731
    x = torch.randn(2, 3, 4, 5, 6).contiguous(memory_format=torch.channels_last_3d)
    got, expected = ember.compile(fn)(x), fn(x)
    torch.testing.assert_close(got, expected)
    assert got.stride() == expected.stride()
