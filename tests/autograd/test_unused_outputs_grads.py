"""Gradients when the loss uses only some outputs of a compiled graph. Eager's autograd never runs the backward
of a branch the loss does not reach; running it with a zero tangent is not the same where that backward makes
0 * inf or 0 / 0 (sqrt or log at 0, an amin whose result was changed in place), which put NaN into the gradient
of an input the loss does use (fuzz seed 306383). Differential: gradients compiled == eager (NaN where eager
has NaN), on aot_eager and ember, with the unused output returned or live across a graph break."""
from __future__ import annotations

import pytest
import torch

import ember

STATE: list = []


def sqrt_unused(x, y):
    return x.sqrt(), x * y


def log_unused(x, y):
    return x.log() * y, (x + y).sin()


def pow_unused(x, y):
    return (x ** 0.5, y * 3, x * y)


def amin_relu_unused_across_break(x, y):
    t1 = torch.maximum(x.unsqueeze(0) - 1, y).amin(1, keepdim=True)
    t2 = y[-1]
    t1.relu_()
    t2 = t2 - 1.83
    STATE.append(float(y.sum()))
    return (t2,)


def div_unused_across_break(x, y):
    a = y / x
    b = x * y
    STATE.append(float(b.sum()))
    return b * 2


CASES = [sqrt_unused, log_unused, pow_unused, amin_relu_unused_across_break, div_unused_across_break]


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_unused_outputs_do_not_reach_gradients(fn, backend):
    ember.reset()
    f = ember.compile(fn, backend=backend)
    for seed in (0, 1):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(5, 4, generator=g).clamp(min=0)       # zeros: sqrt, log and 1/x blow up there
        y = torch.randn(5, 4, generator=g)
        xe, ye = x.clone().requires_grad_(), y.clone().requires_grad_()
        xc, yc = x.clone().requires_grad_(), y.clone().requires_grad_()
        expected, got = fn(xe, ye), f(xc, yc)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        w = torch.randn(expected[-1].shape, generator=g)
        (expected[-1] * w).sum().backward()
        (got[-1] * w).sum().backward()
        for c, e in ((xc, xe), (yc, ye)):
            assert (c.grad is None) == (e.grad is None)
            if e.grad is not None:
                torch.testing.assert_close(c.grad, e.grad, equal_nan=True)


def zeroed_then_used(x, y):         # x reaches the used output (eager: x.grad is zeros), its gradient does not
    t = x * 2
    t.zero_()
    return t + y, x.sin()


DYNAMIC_CASES = [zeroed_then_used]


@pytest.mark.parametrize("fn", DYNAMIC_CASES, ids=lambda f: f.__name__)
def test_zero_gradients_with_dynamic_sizes(fn):
    """Fuzz seed 341232: the loss uses the first output only, the backward knows a gradient to be zeros, and the
    graph has symbolic sizes (recompiled dynamic at the second batch size): the zeros were made with the
    gradient's symbolic shape (TypeError); they take the input's shape of the call."""
    ember.reset()
    f = ember.compile(fn)
    for n in (3, 4, 5, 7):
        g = torch.Generator().manual_seed(n)
        x, y = torch.randn(n, 3, generator=g), torch.randn(n, 3, generator=g)
        xe, ye = x.clone().requires_grad_(), y.clone().requires_grad_()
        xc, yc = x.clone().requires_grad_(), y.clone().requires_grad_()
        expected, got = fn(xe, ye)[0], f(xc, yc)[0]
        w = torch.randn(expected.shape, generator=g)
        (expected * w).sum().backward()
        (got * w).sum().backward()
        for c, e in ((xc, xe), (yc, ye)):
            assert (c.grad is None) == (e.grad is None)
            if e.grad is not None:
                torch.testing.assert_close(c.grad, e.grad)
