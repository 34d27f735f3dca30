"""An ATen call the kernel compiler leaves to ATen gets its tensor arguments in the strides they had in the trace
(eager's), even where the graph's layout plan stores a value channels-last. CPU group norm's backward reads its
output gradient in its input's memory format: with the input channels-last (a convolution's result in a
channels-last plan) and the gradient contiguous, every gradient was wrong (timm's PoolFormer, off by up to 12).
Differential: values and all gradients against eager, with the channels-last plan forced on."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember

C = 16
OPTS = {"heuristics": {"channels_last_min_convs": 1}}


def _conv_then_norm(x, w, nw, nb, groups):
    return F.group_norm(F.conv2d(x, w), groups, nw, nb)


def _norm_then_conv(x, w, nw, nb, groups):
    return F.conv2d(F.group_norm(x, groups, nw, nb), w)


def _poolformer_block(x, w, nw, nb, groups):
    y = x - 0.5 * F.group_norm(x, groups, nw, nb)
    y = y + F.conv2d(torch.relu(F.conv2d(y, w)), w)
    return y - 0.5 * F.group_norm(y, groups, nw, nb)


def _instance_norm_after_conv(x, w, nw, nb, groups):
    return F.instance_norm(F.conv2d(x, w), weight=nw, bias=nb)


@pytest.mark.parametrize("groups", [1, 4, 16])
@pytest.mark.parametrize("fn", [_conv_then_norm, _norm_then_conv, _poolformer_block, _instance_norm_after_conv],
                         ids=lambda f: f.__name__)
def test_norm_next_to_channels_last_conv_matches_eager(fn, groups):
    ember.reset()
    x = torch.randn(2, C, 5, 4)
    params = [torch.randn(C, C, 1, 1) * 0.2, 1 + 0.1 * torch.randn(C), 0.1 * torch.randn(C)]
    g = torch.randn(2, C, 5, 4)

    def run(f):
        args = [t.detach().clone().requires_grad_() for t in [x, *params]]
        out = f(*args, groups)
        (out * g).sum().backward()
        return [out.detach()] + [a.grad for a in args]

    compiled = ember.compile(fn, options=OPTS)
    for got, want in zip(run(compiled), run(fn)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert ember.stats()["fallbacks_to_eager"] == 0
