"""A graph break inside a loop leaves a live builtin iterator on the continuation's stack (live_iters.py).

The continuation reads it without consuming it (``__reduce__``), traces the remaining items, and its glue
replays the trace's ``next`` calls on the real iterator. Before, every step of the iterator was a graph break of
its own ('calling tuple_iterator.__next__ (a method written in C)'). Differential: outputs, the state of an
iterator the caller holds, and no iterator break reasons."""
from __future__ import annotations

import pytest
import torch

import ember


def _brk(t):
    """A graph break (capture_scalar_outputs is off). Inputs are positive: the int is the same every call
    (a changing small int is a separate matter: the graph count would depend on the random draw)."""
    return int((t > 0).sum().item())


def _pos(n):
    return torch.rand(n) + 1


def _iterator_breaks(out):
    return [r.reason for r in out.break_reasons if "iterator" in r.reason or "__next__" in r.reason]


def over(make):
    """A function looping over ``make(seq)`` with a break in the body; it returns the loop's result."""
    def f(x, seq):
        for item in make(seq):
            x = x * 2 + (item if not isinstance(item, tuple) else sum(item))
            x = x + _brk(x)     # (item is dead here: a small int local changing across resumes is opaque)
        return x
    return f


CASES = {
    "tuple": (lambda s: tuple(s), [1.0, 2.0, 3.0]),
    "list": (lambda s: s, [1.0, 2.0, 3.0]),
    "enumerate_tuple": (lambda s: enumerate(tuple(s)), [1.0, 2.0, 3.0]),
    "enumerate_start": (lambda s: enumerate(s, 5), [1.0, 2.0, 3.0]),
    "zip": (lambda s: zip(s, tuple(s[::-1])), [1.0, 2.0, 3.0]),
    "range": (lambda s: range(len(s)), [1.0, 2.0, 3.0, 4.0]),
    "reversed": (lambda s: reversed(s), [1.0, 2.0, 3.0]),
    "enumerate_zip": (lambda s: ((i, a + b) for i, (a, b) in enumerate(zip(s, s))), [1.0, 2.0]),
}


@pytest.mark.parametrize("name", [k for k in CASES if k != "enumerate_zip"])
def test_loop_with_break_over_builtin_iterator(name):
    make, seq = CASES[name]
    f = over(make)
    cf = ember.compile(f)
    for _ in range(2):
        x = _pos(3)
        torch.testing.assert_close(cf(x, list(seq)), f(x, list(seq)))
    out = ember.explain(f)(_pos(3), list(seq))
    assert not _iterator_breaks(out), _iterator_breaks(out)
    assert out.graph_count <= len(seq) + 2


class _L(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.lin = torch.nn.Linear(4, 4)

    def forward(s, x):
        return s.lin(x) + int((x > 0).sum().item())


class _M(torch.nn.Module):
    def __init__(s, loop):
        super().__init__()
        s.layer = torch.nn.ModuleList(_L() for _ in range(3))
        s.loop = loop

    def forward(s, x):
        return s.loop(s, x)


def _enum_loop(s, x):      # the reproducer
    for i, l in enumerate(s.layer):
        x = l(x)
    return x


def _plain_loop(s, x):
    for l in s.layer:
        x = l(x) * 2
    return x


def _zip_loop(s, x):
    for l, k in zip(s.layer, (1, 2, 3)):
        x = l(x) * k
    return x


def _unrolled(s, x):
    x = s.layer[0](x) * 2
    x = s.layer[1](x) * 2
    return s.layer[2](x) * 2


@pytest.mark.parametrize("loop", [_enum_loop, _plain_loop, _zip_loop])
def test_module_list_loop(loop):
    """Issue 32: a break inside a layer of a ModuleList loop. Outputs match eager, and the loop costs no more
    graphs or breaks than the same calls unrolled (before: a break per step of the iterator)."""
    m = _M(loop)
    cm = ember.compile(m)
    for _ in range(2):
        x = torch.randn(2, 4)
        torch.testing.assert_close(cm(x), m(x))
    out = ember.explain(_M(loop))(torch.randn(2, 4))
    ref = ember.explain(_M(_unrolled))(torch.randn(2, 4))
    assert not _iterator_breaks(out), _iterator_breaks(out)
    assert (out.graph_count, out.graph_break_count) <= (ref.graph_count, ref.graph_break_count)


def _upto(x, it):
    """The caller's iterator: consumed partly inside (a break in the body), then the caller reads the rest."""
    for item in it:
        item = item if not isinstance(item, tuple) else item[1]
        x = x + _brk(x) + item
        if item >= 3:
            break
    return x


@pytest.mark.parametrize("make", [lambda: iter([1, 2, 3, 4, 5]), lambda: iter((1, 2, 3, 4, 5)),
                                  lambda: iter(range(1, 6)), lambda: enumerate([1, 2, 3, 4, 5]),
                                  lambda: zip([1, 2, 3, 4, 5], (1, 2, 3, 4, 5)),
                                  lambda: reversed([5, 4, 3, 2, 1]), lambda: iter([9, 9])],
                         ids=["list", "tuple", "range", "enumerate", "zip", "reversed", "exhausts"])
def test_iterator_state_after_call(make):
    """The real iterator is advanced by exactly the trace's ``next`` calls: the caller reads eager's rest."""
    cf = ember.compile(_upto)
    for _ in range(2):
        x = _pos(3)
        it_e, it_c = make(), make()
        next(it_e), next(it_c)      # started before the call
        torch.testing.assert_close(cf(x, it_c), _upto(x, it_e))
        assert list(it_c) == list(it_e)
    out = ember.explain(_upto)(_pos(3), make())
    assert not _iterator_breaks(out), _iterator_breaks(out)


def _mutates_list(x, lst, it):
    """The trace changes the list a live iterator reads: CPython's list iterator reads it by index."""
    for item in it:
        x = x + _brk(x) + item
        if item == 1:
            lst.append(10)
            lst[2] = 7
    lst.append(99)      # after exhaustion: not seen by the (finished) iterator
    return x, list(it)


def test_live_list_iterator_sees_list_changes():
    cf = ember.compile(_mutates_list)
    for _ in range(2):
        x = _pos(3)
        le, lc = [0, 1, 2, 3], [0, 1, 2, 3]
        ie, ic = iter(le), iter(lc)
        next(ie), next(ic)
        ref, got = _mutates_list(x, le, ie), cf(x, lc, ic)
        torch.testing.assert_close(got[0], ref[0])
        assert got[1] == ref[1] and lc == le
    out = ember.explain(_mutates_list)(_pos(3), [0, 1, 2], iter([0, 1, 2]))
    assert not _iterator_breaks(out), _iterator_breaks(out)


def test_long_module_list_compiles_resume_once():
    """Guards read the rest of the iterator relative to its position: the resumed loop body serves every
    layer (12 layers, over the cache-size limit, would otherwise fall back to eager)."""
    import warnings
    m = _M(_plain_loop)
    m.layer = torch.nn.ModuleList(_L() for _ in range(12))
    cm = ember.compile(m)
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # a 'recompiled N times (cache_size_limit)' warning fails
        for _ in range(2):
            x = torch.randn(2, 4)
            torch.testing.assert_close(cm(x), m(x))


_TUPLE_IT = type(iter(()))


def _type_after_break(x, it):
    x = x + _brk(x)
    return x, type(it).__name__, isinstance(it, _TUPLE_IT), next(it)


@pytest.mark.parametrize("make", [lambda: iter((1, 2)), lambda: iter(range(3)), lambda: enumerate([4, 5]),
                                  lambda: zip((1,), [2])], ids=["tuple", "range", "enumerate", "zip"])
def test_live_iterator_type(make):
    """The traced iterator reports the real one's type (before: every traced iterator said list_iterator)."""
    cf = ember.compile(_type_after_break)
    x = _pos(3)
    it_e, it_c = make(), make()
    got, ref = cf(x, it_c), _type_after_break(x, it_e)
    torch.testing.assert_close(got[0], ref[0])
    assert got[1:] == ref[1:] and list(it_c) == list(it_e)
