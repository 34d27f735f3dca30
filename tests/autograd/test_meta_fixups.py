"""Where a torch version's meta kernel disagrees with its real kernels, ember's fake tensors follow the real
ones (``ember.autograd.fake.DEVICE_LAYOUT_RULES``). torch 2.11's ``linalg_vector_norm`` meta kept a reduced dim
of size 1, so ``t.norm(dim=-1)`` of a (4, 1) tensor compiled to a (4, 1) result (fuzz seeds 520243, 520367 on
the H200 host's torch 2.11). Differential on this torch, and the rule itself checked against a wrong meta."""
from __future__ import annotations

import pytest
import torch

import ember
from ember.autograd.fake import _vector_norm_shape


def norm_last_of_column(t):
    return t.norm(dim=-1) * 2


def norm_unsqueezed_scalar(t):
    return t.std(0).unsqueeze(0).norm(dim=-1) + 1


def vector_norm_kwargs(t):
    return torch.linalg.vector_norm(t, ord=2, dim=(0, 1), keepdim=False) * t.sum()


def vector_norm_keepdim(t):
    return torch.linalg.vector_norm(t, 3, dim=-1, keepdim=True) - 1


@pytest.mark.parametrize("fn", [norm_last_of_column, norm_unsqueezed_scalar, vector_norm_kwargs,
                                vector_norm_keepdim], ids=lambda f: f.__name__)
def test_norms_over_size_one_dims(fn):
    ember.reset()
    f = ember.compile(fn)
    t = torch.randn(4, 1, generator=torch.Generator().manual_seed(0))
    expected, got = fn(t), f(t)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("args,kwargs,shape", [
    (((4, 1), 2, [-1]), {}, (4,)),
    (((4, 1), 2), {"dim": [-1]}, (4,)),
    (((4, 1), 2, [-1], True), {}, (4, 1)),
    (((4, 1), 2), {"dim": [-1], "keepdim": True}, (4, 1)),
    (((1,), 2, [-1]), {}, ()),
    (((3, 1, 2), 2, [0, 1]), {}, (2,)),
])
def test_vector_norm_rule_corrects_a_kept_dim(args, kwargs, shape):
    x = torch.empty(args[0], device="meta")
    wrong = torch.empty(args[0], device="meta")         # what torch 2.11's meta kernel gave: the dims kept
    fixed = _vector_norm_shape(wrong, (x, *args[1:]), kwargs)
    assert tuple(fixed.shape) == shape
