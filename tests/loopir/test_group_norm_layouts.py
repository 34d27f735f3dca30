"""Group norm backward with a channels-last saved input: ATen's ``native_group_norm_backward`` reads grad_output
in the memory format of the input, and a convolution graph stores its activations channels-last while the
gradient reaching the group norm may be computed contiguous. Gradients were wrong by 100% (issue 31's
hf_poolformer, reduced here) until both operands are passed in one format. Differential: values and
gradients equal eager's, on fresh random inputs."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember


def _pool_mixer(y):
    return F.avg_pool2d(y, 3, 1, 1, count_include_pad=False) - y


def poolformer_block(x, w0, w1, w2, w3, gw, gb):
    # hf_poolformer's stage: a patch convolution, GroupNorm(1), pooling mixer, 1x1 MLP, the next patch conv
    x = F.conv2d(x, w0, None, 4, 2)
    x = x + _pool_mixer(F.group_norm(x, 1, gw, gb))
    x = x + F.conv2d(F.conv2d(x, w1), w2)
    return F.conv2d(x, w3, None, 2, 1)


def groups_of_four(x, w0, w1, w2, w3, gw, gb):
    x = F.conv2d(x, w0, None, 4, 2)
    x = x + _pool_mixer(F.group_norm(x, 4, gw, gb))
    x = x + F.conv2d(F.conv2d(x, w1), w2)
    return F.conv2d(x, w3, None, 2, 1)


def no_affine(x, w0, w1, w2, w3, gw, gb):
    x = F.conv2d(x, w0, None, 4, 2)
    x = x + _pool_mixer(F.group_norm(x, 2))
    x = x + F.conv2d(F.conv2d(x, w1), w2)
    return F.conv2d(x, w3, None, 2, 1).relu()


def norm_then_gelu_mlp(x, w0, w1, w2, w3, gw, gb):
    x = F.conv2d(x, w0, None, 4, 2)
    h = F.group_norm(x, 1, gw, gb)
    x = x + F.conv2d(F.gelu(F.conv2d(h * 2 - x, w1)), w2)
    return F.conv2d(x, w3, None, 2, 1)


CASES = [poolformer_block, groups_of_four, no_affine, norm_then_gelu_mlp]


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_group_norm_backward_in_convolution_graphs(fn):
    ember.reset()
    f = ember.compile(fn)
    for seed in (0, 1):
        g = torch.Generator().manual_seed(seed)
        ins = [torch.randn(2, 3, 32, 32, generator=g), torch.randn(8, 3, 7, 7, generator=g) * 0.1,
               torch.randn(32, 8, 1, 1, generator=g) * 0.3, torch.randn(8, 32, 1, 1, generator=g) * 0.3,
               torch.randn(16, 8, 3, 3, generator=g) * 0.3, torch.randn(8, generator=g) + 1,
               torch.randn(8, generator=g)]
        res = []
        for run in (f, fn):
            leaves = [t.clone().requires_grad_() for t in ins]
            out = run(*leaves)
            res.append((out.detach(), torch.autograd.grad((out * out).sum(), leaves, allow_unused=True)))
        torch.testing.assert_close(res[0][0], res[1][0], rtol=1e-4, atol=1e-4)
        # the mixer cancels a group norm bias exactly (pool(b) - b = 0): its gradient is rounding noise, so
        # the absolute tolerance follows the largest gradient of the case
        scale = max(b.abs().max().item() for b in res[1][1] if b is not None)
        for i, (a, b) in enumerate(zip(res[0][1], res[1][1])):
            if b is None:
                assert a is None or not a.any(), f"{fn.__name__}: grad {i}"
                continue
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5 * scale,
                                       msg=lambda m, i=i: f"{fn.__name__} grad of input {i}: {m}")
