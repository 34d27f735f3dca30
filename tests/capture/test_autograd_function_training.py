"""``torch.autograd.Function.apply`` with inputs that require grad, captured in one graph whose gradient is the
class's own ``backward`` (BLOOM's ``GeLUFunction`` broke the training graph at every layer: 7 graphs, 11 breaks).

Each case: compiled == eager for the value and the gradients of every input and parameter, on two batch sizes
(the second a dynamic-shape recompile), and one graph without a break. A class whose ``forward`` has Python side
effects stays a break and still matches eager, side effect included.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import ember


class TanhGelu(torch.autograd.Function):
    """BLOOM's GeLUFunction: saves the input, recomputes in backward."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
        return g * (0.5 * x * ((1 - t * t) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + t))


class StraightThrough(torch.autograd.Function):
    """Forward rounds; backward passes the gradient through unchanged (autograd of round would give zero)."""
    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, g):
        return g


class ReverseGrad(torch.autograd.Function):
    """A non-tensor argument kept on ctx; its gradient is None."""
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -ctx.alpha * g, None


class TwoOutputs(torch.autograd.Function):
    """Two inputs (one may not require grad), two outputs, ``needs_input_grad``."""
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b, a.sin()

    @staticmethod
    def backward(ctx, g1, g2):
        a, b = ctx.saved_tensors
        ga = g1 * b + g2 * a.cos() * 2 if ctx.needs_input_grad[0] else None     # deliberately not autograd's
        gb = g1 * a if ctx.needs_input_grad[1] else None
        return ga, gb


class SetupContextClamp(torch.autograd.Function):
    """The ``setup_context`` form: ``forward`` takes no ctx."""
    @staticmethod
    def forward(x, lo):
        return x.clamp(min=lo)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, lo = inputs
        ctx.save_for_backward(x)
        ctx.lo = lo

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x > ctx.lo - 0.5).to(g.dtype), None


class Net(nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.lin = nn.Linear(6, 6)
        self.other = nn.Parameter(torch.randn(6))

    def forward(self, x):
        h = self.lin(x)
        if self.kind == "gelu":
            h = TanhGelu.apply(h)
        elif self.kind == "ste":
            h = StraightThrough.apply(h) * h
        elif self.kind == "reverse":
            h = ReverseGrad.apply(h, 0.7) + h
        elif self.kind == "two_outputs":
            p, q = TwoOutputs.apply(h, self.other)
            r, s = TwoOutputs.apply(h, x.detach())
            h = p + q + r * s
        elif self.kind == "setup_context":
            h = SetupContextClamp.apply(h, 0.1)
        return (h * h).sum()


@pytest.mark.parametrize("kind", ["gelu", "ste", "reverse", "two_outputs", "setup_context"])
@pytest.mark.parametrize("backend", ["ember", "aot_eager"])
def test_custom_function_training_in_one_graph(kind, backend):
    torch.manual_seed(0)
    eager = Net(kind)
    comp_mod = Net(kind)
    comp_mod.load_state_dict(eager.state_dict())
    compiled = ember.compile(comp_mod, backend=backend)
    for batch in (3, 5):
        x = torch.randn(batch, 6, requires_grad=True)
        xc = x.detach().clone().requires_grad_(True)
        ref = eager(x)
        ref.backward()
        got = compiled(xc)
        got.backward()
        torch.testing.assert_close(got, ref)
        torch.testing.assert_close(xc.grad, x.grad)
        for (n, p), q in zip(eager.named_parameters(), comp_mod.parameters()):
            torch.testing.assert_close(q.grad, p.grad, msg=n)
    ex = ember.explain(Net(kind))(torch.randn(3, 6, requires_grad=True))
    assert ex.graph_count == 1 and ex.graph_break_count == 0, str(ex)


CALLS: list[int] = []


class Counting(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        CALLS.append(1)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class CountingAttr(torch.autograd.Function):
    state = type("S", (), {"n": 0})()

    @staticmethod
    def forward(ctx, x):
        CountingAttr.state.n = CountingAttr.state.n + 1
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 3


@pytest.mark.parametrize("cls", [Counting, CountingAttr])
def test_custom_function_with_side_effects_matches_eager(cls):
    """A forward that writes outside itself runs eagerly at every call, as eager runs it (the side effect too)."""
    def f(x):
        return cls.apply(x * 1.5).sum()
    compiled = ember.compile(f)
    before = (len(CALLS), CountingAttr.state.n)
    for _ in range(3):
        x = torch.randn(4, requires_grad=True)
        compiled(x).backward()
        torch.testing.assert_close(x.grad, torch.full((4,), 1.5 * (2 if cls is Counting else 3)))
    after = (len(CALLS), CountingAttr.state.n)
    assert after[0] - before[0] == (3 if cls is Counting else 0)
    assert after[1] - before[1] == (3 if cls is CountingAttr else 0)


SCALE = 2.0


def _helper(x):
    return x * SCALE


class UsesGlobals(torch.autograd.Function):
    """Reads a module-level float through a helper function: the node depends on both staying the same."""
    @staticmethod
    def forward(ctx, x):
        return _helper(x)

    @staticmethod
    def backward(ctx, g):
        return g * SCALE


def _closure_class(k: float):
    class Scaled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g * k
    return Scaled


def test_custom_function_follows_rebound_globals_and_closures():
    global SCALE
    scaled = _closure_class(1.5)

    def f(x):
        return (UsesGlobals.apply(x) + scaled.apply(x)).sum()
    compiled = ember.compile(f)
    try:
        for scale in (2.0, 5.0):
            SCALE = scale
            x = torch.randn(4, requires_grad=True)
            compiled(x).backward()
            torch.testing.assert_close(x.grad, torch.full((4,), scale + 1.5))
    finally:
        SCALE = 2.0
    ex = ember.explain(f)(torch.randn(4, requires_grad=True))
    assert ex.graph_count == 1 and ex.graph_break_count == 0, str(ex)
