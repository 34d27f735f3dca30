"""An output of a compiled graph that is a view of another output (``t = x * 1.5; v = t[1]``), neither
requiring grad, then updated in place with a value that requires grad after a graph break (``v.add_(y)``).
Eager's ``v`` is a view of ``t``, so ``t`` gets a ``CopySlices`` and its gradient reaches ``y``. ember rebuilt
``v`` from ``t.detach()``: ``t`` kept no history and the gradient of ``y`` missed ``t``'s part, a silently
wrong gradient. Differential: compiled == eager on values, gradients and the updated tensors."""
from __future__ import annotations

import pytest
import torch

import ember

STATE: list = []


def _graph_break(t):
    STATE.append(float(t.detach().sum()))


def row_add(x, w):
    t = x * 1.5
    v = t[1]
    _graph_break(t)
    y = w * 2
    v.add_(y[0])
    _graph_break(v)
    return t, y


def narrow_mul(x, w):
    t = x + 1
    v = t.narrow(2, 1, 3)
    _graph_break(t)
    y = w.sin()
    v.mul_(y[:, :, :3])
    _graph_break(v)
    return t, y


def column_copy(x, w):
    t = x.exp()
    v = t[:, :, :1].permute(2, 0, 1)
    _graph_break(t)
    y = w.cos()
    v.copy_(y[:, :, 0].unsqueeze(0))
    _graph_break(v)
    return t, y


def diagonal_sub(x, w):
    t = (x * x).sum(0)                          # (6, 5)
    v = t.diagonal()
    _graph_break(t)
    y = w.sum(0)
    v.sub_(y.diagonal(), alpha=0.5)
    _graph_break(v)
    return t, y


def scalar_view(x, w):
    t = x - 0.5
    v = t[2, 3, 4]
    _graph_break(t)
    y = w * w
    v.add_(y.sum())
    _graph_break(v)
    return t, y


CASES = [row_add, narrow_mul, column_copy, diagonal_sub, scalar_view]


def _run(fn, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 6, 5, generator=gen)
    w = torch.randn(3, 6, 5, generator=gen, requires_grad=True)
    STATE.clear()
    outs = fn(x, w)
    sum((o * (i + 1)).sum() for i, o in enumerate(outs) if o.requires_grad).backward()
    return [o.detach() for o in outs], [o.requires_grad for o in outs], x, w.grad, list(STATE)


@pytest.mark.parametrize("fn", CASES, ids=[f.__name__ for f in CASES])
def test_update_of_output_view_with_grad_value(fn):
    ember.reset()
    compiled = ember.compile(fn)
    for seed in (0, 1):
        expected = _run(fn, seed)
        actual = _run(compiled, seed)
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
