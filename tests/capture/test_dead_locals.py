"""Locals the rest of a function never reads are not handed across a graph break (``ember.capture.liveness``).

Handing them over made them graph outputs, and their backward ran with a zero gradient where eager never runs
it: a dead ``x1.std(0).norm()`` of one element (nan) turned the input's gradient into nan (fuzz seed 471969).
Locals that are read later (on any path, through ``del``, in an exception handler, by ``locals()`` or zero-argument
``super()``) must still arrive. Differential: values, gradients and raised exceptions compiled == eager."""
from __future__ import annotations

import warnings

import pytest
import torch

import ember


def _brk(t):
    return float(t.sum())       # a graph break


def dead_nan_grad(x, y):
    t = y[:1].std(dim=0).norm()          # nan, never used
    u = y.index_select(0, torch.tensor([0, 0, 1]))
    _brk(x)
    return u * 2, x + 1


def live_on_one_path(x, y):
    t = x * 2
    s = y.sum(0)
    _brk(x)
    if float(y.mean()) > 10:
        return t
    return x + s


def loop_carried(x, y):
    acc = x * 0
    keep = y * 3
    for i in range(3):
        acc = acc + x * i
        _brk(acc)
    return acc + keep


def read_by_del(x, y):
    t = x * 2
    _brk(x)
    del t
    return y + 1


def read_in_handler(x, y):
    t = (x * 2).exp()
    try:
        if _brk(x) > -1e9:
            raise ValueError("boom")
    except ValueError:
        return t + y
    return y


def read_by_locals(x, y):
    t = x * 2 + y
    _brk(x)
    return locals()["t"] * 3


class _Base(torch.nn.Module):
    def forward(self, x):
        return x * 2


class _Child(_Base):
    def forward(self, x):
        h = x.tanh()
        _brk(h)
        return super().forward(h) + 1


def zero_arg_super(x, y):
    return _Child()(x) + y


CASES = [dead_nan_grad, live_on_one_path, loop_carried, read_by_del, read_in_handler, read_by_locals,
         zero_arg_super]


def _run(f, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 3, generator=g, requires_grad=True)
    y = torch.randn(4, 3, generator=g, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # std of one element: eager's degrees-of-freedom warning
        out = f(x, y)
    outs = out if isinstance(out, tuple) else (out,)
    sum(((o * (1 + k)).sum() for k, o in enumerate(outs)), torch.zeros(())).backward()
    return [o.detach() for o in outs], x.grad, y.grad


@pytest.mark.parametrize("backend", ["ember", "eager"])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_dead_locals(fn, backend):
    ember.reset()
    f = ember.compile(fn, backend=backend)
    for seed in (0, 1):
        expected, got = _run(fn, seed), _run(f, seed)
        torch.testing.assert_close(got, expected, equal_nan=True)
