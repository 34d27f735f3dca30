"""torch.autograd.Function.apply inside compiled code: captured (forward inlined under no_grad) where no input
requires grad, a graph break with eager's values and gradients where one does."""
from __future__ import annotations

import pytest
import torch

import ember

BACKENDS = ["eager", "aot_eager", "ember"]


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x * k + float(torch.is_grad_enabled())     # forward runs without grad, as in eager

    @staticmethod
    def backward(ctx, g):
        return g * ctx.k * 2, None                          # not the true derivative: eager's backward is used


class _Exp(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x.exp()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * out


class _AddInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        x.add_(y)
        ctx.mark_dirty(x)
        ctx.mark_non_differentiable(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g, g


def _uses_functions(x):
    return _Scale.apply(x, 3) + _Exp.apply(x).sin()


def _in_place_function(x):
    y = x.clone()
    return _AddInPlace.apply(y, x) * 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_uses_functions, _in_place_function])
def test_captured_without_grad(fresh_ember, backend, fn):
    x = torch.randn(5)
    with torch.no_grad():
        assert torch.allclose(ember.compile(fn, backend=backend)(x), fn(x))
    got = ember.compile(fn, backend=backend)(x)     # grad mode on, no input requires grad
    want = fn(x)
    assert torch.allclose(got, want) and got.requires_grad == want.requires_grad
    assert ember.stats()["graph_breaks"] == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_requiring_grad_use_the_custom_backward(fresh_ember, backend):
    x = torch.randn(5)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    _uses_functions(xe).sum().backward()
    got = ember.compile(_uses_functions, backend=backend)(xc)
    got.sum().backward()
    assert torch.allclose(got, _uses_functions(x)) and torch.allclose(xc.grad, xe.grad)
