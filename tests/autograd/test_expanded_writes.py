"""Expanded tensors (stride 0 along a dim of size > 1: several elements, one memory location) that ember stores
into. Fuzz seeds 320090, 320256, 320385 (backward) and 330002 (call) raised eager's "more than one element of
the written-to tensor refers to a single memory location" where eager runs fine:

- a differentiable output that is an expanded view got a tangent traced with the output's stride-0 layout; the
  backward's wrapper then copied eager's gradient (any layout) into that layout;
- a fill of an expanded temporary (``t.expand(4, 2).zero_()``) was functionalized into a ``zero`` whose result
  kept the expanded layout, and an ``as_strided_scatter`` over the expanded view;
- an update of an expanded input was copied back into it with ``copy_``.

Differential: compiled == eager (values, gradients, inputs' side effects, or the same exception), on
``aot_eager`` and ``ember``; writes whose eager result depends on loop order (``masked_fill_`` of an expanded
destination) run eagerly.
"""
from __future__ import annotations

import warnings

import pytest
import torch

import ember

BACKENDS = ["aot_eager", "ember"]


# -- outputs that are expanded views, differentiated with gradients of several layouts -------------------------
def expand_of_reduction(x):
    return x.norm(dim=2).narrow(1, 2, 1).expand(-1, 3)


def expand_of_input_slice(x):
    return x[:, :1].expand(2, 3, 3), x * 2


def broadcast_to_middle(x):
    return torch.broadcast_to((x.sum(1, keepdim=True) * 3).unsqueeze(0), (4, 2, 3, 3))


def expand_as_flipped(x):
    y = x.flip(1).reshape(-1)[:3]
    return y.unsqueeze(0).expand_as(torch.empty(5, 3)), y.exp()


def expand_of_scalar(x):
    return x.mean().expand(2, 3)


OUTPUT_CASES = [expand_of_reduction, expand_of_input_slice, broadcast_to_middle, expand_as_flipped,
                expand_of_scalar]


def _sum_loss(outs):        # autograd sends stride-0 gradients (ones expanded)
    return sum(o.sum() for o in outs)


def _weighted_loss(outs):   # dense gradients that differ along the expanded dims
    return sum((o * torch.randn(o.shape, generator=torch.Generator().manual_seed(k))).sum()
               for k, o in enumerate(outs))


def _square_loss(outs):     # gradients computed from the outputs (a mix of both)
    return sum((o * o).sum() * 0.5 + o.sum() for o in outs)


LOSSES = [_sum_loss, _weighted_loss, _square_loss]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("loss", LOSSES, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("fn", OUTPUT_CASES, ids=lambda f: f.__name__)
def test_gradients_of_expanded_outputs(fn, loss, backend):
    ember.reset()
    f = ember.compile(fn, backend=backend)
    for seed in (0, 1):
        x = torch.randn(2, 3, 3, generator=torch.Generator().manual_seed(seed))
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        expected, got = fn(xe), f(xc)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        torch.testing.assert_close(got, expected)
        loss(expected).backward()
        loss(got).backward()
        torch.testing.assert_close(xc.grad, xe.grad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_expanded_output_gradient_given_explicitly(backend):
    """``out.backward(g)`` with a non-contiguous ``g`` whose values differ along the expanded dim."""
    ember.reset()
    f = ember.compile(expand_of_reduction, backend=backend)
    x = torch.randn(2, 3, 3)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    g = torch.randn(3, 2).t()
    expand_of_reduction(xe).backward(g)
    f(xc).backward(g)
    torch.testing.assert_close(xc.grad, xe.grad)


# -- in-place writes into expanded temporaries and inputs --------------------------------------------------------
def zero_expanded_temporary(x):
    t = torch.tanh(x).cos().unsqueeze(0).expand(4, *x.shape)
    t.zero_()
    return t, x + 1


def fill_row_of_expanded(x):
    t = (x * 2).unsqueeze(1).expand(3, 4, 5)
    t[1].fill_(2.5)
    return t * 1


def fill_expanded_view_of_input(x):
    y = x.expand(3, 4)
    y.fill_(1.5)
    return y + 1


def zero_expanded_returns_base(x):
    b = x * 2
    t = b.expand(3, 4)
    t.zero_()
    return b, t


def fill_tensor_expanded_slice(x):
    t = (x * 2).expand(3, 4).clone()
    u = t[:, :2].unsqueeze(0).expand(2, 3, 2)
    u.fill_(torch.tensor(-0.5))
    return t


def add_into_expanded(x):           # eager raises
    t = (x * 2).expand(3, 4)
    t.add_(1)
    return t


def masked_fill_expanded(x):        # eager's result depends on its loop order: runs eagerly
    t = (x * 2).expand(3, 4)
    t.masked_fill_(torch.tensor([[True, False, False, True], [False, True, False, False],
                                 [False, False, False, True]]), 0.5)
    return t + 0


def index_fill_expanded(x):
    t = (x * 2).expand(3, 4)
    t.index_fill_(0, torch.tensor([1]), -1.0)
    return t + 0


def zero_expanded_input(x):
    x.zero_()
    return x * 2


def _expanded_input():
    return torch.randn(1, 4).expand(3, 4)


INPLACE_CASES = [(zero_expanded_temporary, (4,)), (fill_row_of_expanded, (4, 5)),
                 (fill_expanded_view_of_input, (1, 4)), (zero_expanded_returns_base, (1, 4)),
                 (fill_tensor_expanded_slice, (1, 4)), (add_into_expanded, (1, 4)), (masked_fill_expanded, (1, 4)),
                 (index_fill_expanded, (1, 4)), (zero_expanded_input, None)]


def _run(fn, x):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # masked_fill_ on an expanded tensor is deprecated
            out = fn(x)
    except RuntimeError as e:
        return ("raised", str(e))
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn,shape", INPLACE_CASES, ids=[f.__name__ for f, _ in INPLACE_CASES])
def test_inplace_writes_into_expanded(fn, shape, backend):
    ember.reset()
    f = ember.compile(fn, backend=backend)
    for seed in (0, 1):
        torch.manual_seed(seed)
        x = _expanded_input() if shape is None else torch.randn(shape)
        xe, xc = x.clone(), x.clone()
        if shape is None:
            xe, xc = xe[:1].expand(3, 4), xc[:1].expand(3, 4)
        expected, got = _run(fn, xe), _run(f, xc)
        if expected[0] == "raised":
            assert got[0] == "raised" and got[1] == expected[1]
            continue
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(xc, xe)


def fill_expanded_differentiable(x, y):      # eager's backward raises (CopySlices over an expanded view)
    t = (x * 3).unsqueeze(0).expand(2, 3, 4)
    t[:, 1].fill_(0.25)
    return t * y


def zero_expanded_other_differentiable(x, y):
    t = (x.detach() * 3).unsqueeze(0).expand(2, 3, 4)
    t.zero_()
    return t * y + y.exp(), t


def _outcome(fn, x, y):
    try:
        outs = fn(x, y)
        outs = outs if isinstance(outs, tuple) else (outs,)
        w = torch.randn(outs[0].shape, generator=torch.Generator().manual_seed(3))
        (outs[0] * w).sum().backward()
    except RuntimeError as e:
        return ("raised", str(e))
    return outs, x.grad, y.grad


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [fill_expanded_differentiable, zero_expanded_other_differentiable],
                         ids=lambda f: f.__name__)
def test_fill_expanded_temporary_with_gradients(fn, backend):
    ember.reset()
    f = ember.compile(fn, backend=backend)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    expected = _outcome(fn, x.clone().requires_grad_(), y.clone().requires_grad_())
    got = _outcome(f, x.clone().requires_grad_(), y.clone().requires_grad_())
    if expected[0] == "raised":
        assert got == expected
    else:
        torch.testing.assert_close(got, expected)
