"""Callees run natively after a graph break are compiled even when a decorator wraps them in a closure
(transformers wraps every ``forward`` so); closures made anew per call are compiled once, then run natively."""
from __future__ import annotations

import functools

import torch

import ember


def passthrough(fn):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        return fn(self, *args, **kwargs)
    return wrapper


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    @passthrough
    def forward(self, x):
        h = torch.tanh(self.lin(x)) * 2 + x
        print("inner done")                  # a graph break at the end of the decorated forward
        return h


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.head = torch.nn.Linear(8, 2)

    @passthrough
    def forward(self, x):
        return self.head(self.inner(x))


def test_decorated_forward_after_break_is_compiled(capsys):
    torch.manual_seed(0)
    m = Outer()
    ember.reset()
    c = ember.compile(m, backend="eager")
    x = torch.randn(3, 8)
    torch.testing.assert_close(c(x), m(x))
    captured_ops = ember.explain(m)(x)
    assert "tanh" in str(captured_ops), str(captured_ops)


def test_closure_made_per_call_runs_natively_after_first():
    def outer(x):
        def scale(y):                  # a new function object per call of outer
            print("scaling")
            return y * 3
        return scale(x + 1) - 1

    ember.reset()
    c = ember.compile(outer, backend="eager")
    for _ in range(4):
        x = torch.randn(5)
        torch.testing.assert_close(c(x), outer(x))
    assert ember.stats()["frames_compiled"] < 12
