"""A graph's result that eager lays out expanded (stride 0: ``y.expand(3, -1)``) keeps that layout when it
leaves the graph: the code after a graph break may write through it, and eager's write then shows in every
expanded copy. Differential (values, strides and side effects compiled == eager) on ember and aot_eager."""
from __future__ import annotations

import warnings

import pytest
import torch

import ember


def _brk(x):
    return float(x.sum())       # a graph break


def setitem_after_break(x):
    t = x.flip(1).unsqueeze(0).expand(3, 4, 6)
    s = t.sum()
    _brk(x)
    t[1:2, 1:3:2, 2:4] = s
    return t * 1


def add_row_after_break(x):
    t = (x * 2).unsqueeze(0).expand(3, 4, 6)
    _brk(x)
    t[0].add_(1)
    return t + t


def fill_after_break(x):
    t = x.sum(0, keepdim=True).expand(5, -1)
    _brk(x)
    t[:, 1].fill_(0.5)
    return t.cumsum(0)


def returned_expanded(x):
    return x.exp().unsqueeze(1).expand(4, 2, 6), (x * 3)[:, None].expand(-1, 3, -1)


CASES = [setitem_after_break, add_row_after_break, fill_after_break, returned_expanded]


@pytest.mark.parametrize("backend", ["ember", "aot_eager"])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_expanded_results(fn, backend):
    ember.reset()
    f = ember.compile(fn, backend=backend)
    for seed in (0, 1):
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(seed))
        xe, xc = x.clone(), x.clone()
        expected, got = fn(xe), f(xc)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        torch.testing.assert_close(got, expected)
        assert [t.stride() for t in got] == [t.stride() for t in expected]
        torch.testing.assert_close(xc, xe)


# Expanded results whose other dims eager keeps interleaved in memory (``c[3:, ::2, 4:6]`` of a (5, 3, 6) value:
# strides 18, 12, 1), or that the graph also stores dense for another use (a ``cat`` of the broadcast): ember may
# store them compactly, but must keep them expanded (fuzz seed 475687).
def interleaved_after_break(x):
    t = x.cos()[3:, ::2, 4:6].unsqueeze(0).expand(3, 2, 2, 2)
    _brk(x)
    t.index_put_((torch.tensor([1, 2]),), torch.tensor(-1.19))
    return t * 1


def reused_broadcast_after_break(x):
    t = (x * 2)[1].unsqueeze(0).expand(3, 3, 6)
    u = torch.cat([t, t], dim=1)
    _brk(x)
    t[1].fill_(0.25)
    return t + 0, u


def returned_reused_broadcast(x):
    t = x.cos()[3:, ::2, 4:6].unsqueeze(0).expand(3, 2, 2, 2)
    return t, torch.cat([t, t], dim=1)[:, 1:]


def _expanded_dims(t):
    return tuple(n > 1 and st == 0 for n, st in zip(t.shape, t.stride()))


@pytest.mark.parametrize("backend", ["ember", "aot_eager"])
@pytest.mark.parametrize("fn", [interleaved_after_break, reused_broadcast_after_break, returned_reused_broadcast],
                         ids=lambda f: f.__name__)
def test_expanded_results_stored_compactly(fn, backend):
    ember.reset()
    f = ember.compile(fn, backend=backend)
    for seed in (0, 1):
        x = torch.randn(5, 3, 6, generator=torch.Generator().manual_seed(seed))
        xe, xc = x.clone(), x.clone()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # eager's deprecation warning: index_put_ on an expanded tensor
            expected, got = fn(xe), f(xc)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        torch.testing.assert_close(got, expected)
        assert [_expanded_dims(t) for t in got] == [_expanded_dims(t) for t in expected]
        torch.testing.assert_close(xc, xe)

