"""collections.deque, types.MappingProxyType, dict views compared and combined as sets, list dunders called
explicitly, and CPython's ValueError text of tuple.index (issue 32: test_list.py / test_dicts.py of PyTorch's
Dynamo tests). Each case runs compiled under fullgraph and eagerly on copies of the same inputs; results (values,
exact types) and the inputs afterwards (side effects written back) must agree."""
from __future__ import annotations

import collections
import copy
import types

import pytest
import torch

import ember


def _deque_methods(x, q, m, d):
    a = collections.deque([1, 2, 3], maxlen=3)
    a.append(4)
    a.appendleft(0)
    a.rotate(1)
    a.extend([7, 8])
    a.extendleft([9])
    r = [a.popleft(), a.pop(), len(a), list(a), a.maxlen, 8 in a, a.count(7), a[0], a[-1]]
    b = collections.deque("abc")
    b.insert(1, "z")
    b.remove("a")
    b.reverse()
    b[0] = "q"
    del b[1]
    return x + r[0], r, b, a.copy(), collections.deque([], 0)


def _deque_errors(x, q, m, d):
    out = []
    for fn in (lambda: collections.deque().pop(), lambda: collections.deque([1], maxlen=1).insert(0, 2),
               lambda: collections.deque([1])[5], lambda: collections.deque([1, 2]).index(9),
               lambda: collections.deque([1])[0:1]):
        try:
            fn()
        except (IndexError, ValueError, TypeError) as e:
            out.append(f"{type(e).__name__}: {e}")
    return x + 1, out


def _deque_input_mutated(x, q, m, d):
    q.append(5)
    q.appendleft(6)
    q.rotate(-1)
    return x * q[0] + len(q), q.maxlen


def _deque_bounded_window(x, q, m, d):
    w = collections.deque(maxlen=2)
    total = x
    for i in range(5):
        w.append(i)
        total = total + sum(w)
    return total, list(w)


def _proxy_is_live_and_read_only(x, q, m, d):
    base = {"a": 1}
    p = types.MappingProxyType(base)
    base["b"] = 2
    errs = []
    for fn in (lambda: p.__setitem__("c", 3), lambda: p.update({}), lambda: p.pop("a")):
        try:
            fn()
        except (TypeError, AttributeError) as e:
            errs.append(f"{type(e).__name__}: {e}")
    return x + p["a"] + len(p), list(p.items()), "b" in p, p.get("z", 7), sorted(p), errs, p, base


def _proxy_input(x, q, m, d):
    return x + m["k"], dict(m), list(m.keys()), m.copy(), "k" in m


def _dict_views_as_sets(x, q, m, d):
    e = {"a": 1, "b": 2}
    return x + 1, [e.keys() == {"a", "b"}, e.keys() == ["a", "b"], e.items() == {("a", 1), ("b", 2)},
                   d.keys() == {"k"}, e.keys() & {"a"}, e.keys() - {"a"}, e.keys() | d.keys(), {"b"} <= e.keys(),
                   e.keys() == d.keys(), e.items() ^ {("a", 1)}]


def _list_dunders(x, q, m, d):
    p = list("abcdef")
    p.__setitem__(0, "z")
    p.__delitem__(1)
    p.__delitem__(slice(0, 2))
    r = p.__iadd__(["q"])
    s = p.__imul__(2)
    errs = []
    for fn in (lambda: p.__delitem__(slice(1, 1, 0)), lambda: p.__setitem__(99, 1), lambda: p.__imul__(2.5)):
        try:
            fn()
        except (ValueError, IndexError, TypeError) as e:
            errs.append(f"{type(e).__name__}: {e}")
    return x + len(p), p, r is p, s is p, (1, 2).__mul__(2), [1].__add__([2]), errs


def _index_messages(x, q, m, d):
    out = []
    for seq in ((1, 2, 3), [1, 2, 3], ("a",), ["a"]):
        try:
            seq.index("z")
        except ValueError as e:
            out.append(str(e))
    return x + 1, out


class _Num:
    def __radd__(self, other):
        return other + 100


def _number_dunders_decline(x, q, m, d):
    return x + 1, [(3).__add__(x), int.__mul__(3, x), (1.5).__eq__(x), True.__and__(x), (3).__add__(_Num()),
                   (3).__lt__([1]), x.__radd__(3), (3).__add__(4), int.__add__(3, 2.5)]


CASES = [_number_dunders_decline, _deque_methods, _deque_errors, _deque_input_mutated, _deque_bounded_window, _proxy_is_live_and_read_only,
         _proxy_input, _dict_views_as_sets, _list_dunders, _index_messages]


def _same(a, b):
    assert type(a) is type(b), (a, b)
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for u, v in zip(a, b):
            _same(u, v)
    elif isinstance(a, collections.deque):
        assert a.maxlen == b.maxlen and list(a) == list(b), (a, b)
    elif isinstance(a, types.MappingProxyType):
        assert dict(a) == dict(b), (a, b)
    else:
        assert a == b, (a, b)


def _inputs():
    return collections.deque([1, 2], maxlen=3), types.MappingProxyType({"k": 3}), {"k": 4}


@pytest.mark.parametrize("fn", CASES, ids=[c.__name__.lstrip("_") for c in CASES])
def test_builtin_containers(fresh_ember, fn):
    x = torch.randn(3)
    eager_in, ember_in = _inputs(), _inputs()
    want = fn(x, *eager_in)
    got = ember.compile(fn, backend="eager", fullgraph=True)(x, *ember_in)
    _same(got, want)
    _same(list(ember_in[0]), list(eager_in[0]))
    assert ember_in[2] == eager_in[2]
    again = ember.compile(fn, backend="eager", fullgraph=True)(x, *_inputs())     # the cached entry
    _same(again, fn(x, *_inputs()))
