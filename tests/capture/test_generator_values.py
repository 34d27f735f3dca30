"""Generators made in compiled code and returned unstarted (issue 32: test_generator.py of PyTorch's Dynamo
tests, test_return_generator / test_return_tuple_generator): the caller gets a generator that runs when it
iterates, as eager's does. Each case is compiled under fullgraph and compared with eager on fresh inputs, by the
values the returned generators yield, their identity, and their laziness (side effects happen on iteration)."""
from __future__ import annotations

import contextlib
import functools
import types

import pytest
import torch

import ember


def _gen(t, k=1):
    yield t + k
    yield t.sin()


class _Holder:
    def __init__(self):
        self.log = []

    def items(self, t):
        self.log.append("started")
        yield t * 2
        self.log.append("second")
        yield t * 3


def _return_plain(t, h):
    return _gen(t * 2, k=3), t + 1


def _return_twice_same(t, h):
    a, b = _gen(t), _gen(t + 1)
    return (a, b, a), t.cos()


def _return_closure_generator(t, h):
    scale = 4

    def inner(n):
        for i in range(n):
            yield t * scale + i

    return inner(3)


def _return_method_generator_lazily(t, h):
    return h.items(t), list(h.log)


CASES = [_return_plain, _return_twice_same, _return_closure_generator, _return_method_generator_lazily]


def _drain(v):
    if isinstance(v, types.GeneratorType):
        return [x.clone() if isinstance(x, torch.Tensor) else x for x in v]
    if isinstance(v, tuple):
        return tuple(_drain(x) for x in v)
    return v


@pytest.mark.parametrize("fn", CASES, ids=[c.__name__.lstrip("_") for c in CASES])
def test_unstarted_generator_returned(fresh_ember, fn):
    t = torch.randn(3)
    h_eager, h_ember = _Holder(), _Holder()
    want = fn(t, h_eager)
    got = ember.compile(fn, backend="eager", fullgraph=True)(t, h_ember)
    assert h_ember.log == h_eager.log == []          # nothing ran yet: the generator is lazy
    assert type(got[0] if isinstance(got, tuple) else got) is type(want[0] if isinstance(want, tuple) else want)
    if isinstance(want, tuple) and isinstance(want[0], tuple):
        assert (got[0][0] is got[0][2]) == (want[0][0] is want[0][2])
    torch.testing.assert_close(_drain(got), _drain(want))
    assert h_ember.log == h_eager.log


def _started(t, h=None):
    g = _gen(t)
    next(g)
    return g


def test_started_generator_returned_in_state(fresh_ember):
    """A generator that already ran comes back paused where the trace left it (gen_rebuild.py), under
    fullgraph too; more cases in test_peer_regressions_g.py."""
    t = torch.randn(3)
    torch.testing.assert_close(list(ember.compile(_started, backend="eager", fullgraph=True)(t)),
                               list(_started(t, None)))
    torch.testing.assert_close(list(ember.compile(_started, backend="eager")(t)), list(_started(t, None)))


# -- functions made in compiled code carry the attributes the trace sets on them (functools.wraps,
#    @contextlib.contextmanager defined inside: issue 32, test_exceptions.py::test_foo)
def _deco(fn):
    @functools.wraps(fn)
    def inner(*a):
        return fn(*a) * 2
    return inner


def _wraps_inside(t):
    @_deco
    def g(v):
        """doc of g"""
        return v + 1
    return g(t), g.__name__, g.__doc__, g.__qualname__, g.__wrapped__.__name__, g.__module__


def _contextmanager_inside(t):
    log = []

    @contextlib.contextmanager
    def cm(k):
        log.append("enter")
        try:
            yield t * k
        finally:
            log.append("exit")

    with cm(3) as y:
        z = y + 1
    return z, log, cm.__name__


def _function_attributes_returned(t):
    def g(v):
        return v
    g.tag = 5
    g.__doc__ = "set"
    return t + g.tag, g, sorted(g.__dict__)


FUNC_CASES = [_wraps_inside, _contextmanager_inside, _function_attributes_returned]


@pytest.mark.parametrize("fn", FUNC_CASES, ids=[c.__name__.lstrip("_") for c in FUNC_CASES])
def test_function_attributes_set_in_trace(fresh_ember, fn):
    t = torch.randn(3)
    want = fn(t)
    got = ember.compile(fn, backend="eager", fullgraph=True)(t)
    torch.testing.assert_close(got[0], want[0])
    for g, w in zip(got[1:], want[1:]):
        if callable(w):
            assert (g.__name__, g.__doc__, g.__dict__, g(7)) == (w.__name__, w.__doc__, w.__dict__, w(7))
        else:
            assert g == w


@contextlib.contextmanager
def _translate():
    try:
        yield
    except IndexError:
        raise ValueError("translated")  # noqa: B904


def _body_raises_through_contextmanager(t):
    try:
        with _translate():
            raise IndexError
    except ValueError as e:
        return t + 1, str(e)
    return t, ""


def _throw_three_arguments(t):
    def g():
        try:
            yield 1
        except ValueError as e:
            yield f"caught {e}"
    out = []
    for args in ((ValueError, ValueError("inst"), None), (ValueError, "msg"), (ValueError, None, None)):
        it = g()
        next(it)
        out.append(it.throw(*args))
        it.close()
    return t * 2, out


@pytest.mark.parametrize("fn", [_body_raises_through_contextmanager, _throw_three_arguments],
                         ids=["body_raises_through_contextmanager", "throw_three_arguments"])
def test_generator_throw_forms(fresh_ember, fn):
    """``gen.throw(typ, val, tb)``: the form contextlib's __exit__ uses on Python 3.11."""
    t = torch.randn(3)
    want = fn(t)
    got = ember.compile(fn, backend="eager", fullgraph=True)(t)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1]
