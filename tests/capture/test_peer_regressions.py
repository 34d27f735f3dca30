"""Reproducers of results where ember differed from eager in PyTorch's own Dynamo test files (issue 32, run by
tools/peer): each compiled under fullgraph against eager's values on fresh inputs."""
from __future__ import annotations

import pytest
import torch

import ember


# next() on the iterator of a container (a SeqIterVar during capture): test_exceptions.py::test_stop_iteration
def _next_list(x, xs):
    it = iter(xs)
    return x * next(it) + next(it)


def _next_tuple(x, xs):
    it = iter(tuple(xs))
    next(it)
    return x * next(it)


def _next_dict_keys(x, xs):
    it = iter({k: k * 2 for k in xs})
    return x + next(it)


def _next_dict_items(x, xs):
    k, v = next(iter({k: k * 2 for k in xs}.items()))
    return x * k + v


def _next_set(x, xs):
    return x + next(iter({xs[0]}))


def _next_default(x, xs):
    it = iter(xs[:1])
    next(it)
    return x + next(it, 7)


def _next_stop_iteration(x, xs):
    it = iter(xs[:1])
    next(it)
    try:
        next(it)
    except StopIteration:
        return x - 1
    return x


def _zip_longest(x, xs):
    iterators = [iter(xs), iter(xs[:1])]
    out = []
    while True:
        for it in iterators:
            try:
                out.append(next(it))
            except StopIteration:
                return x * sum(out) + len(out)


def _join_iterator(x, xs):
    return x * len("-".join(iter([str(v) for v in xs])))


def _sorted_iterator(x, xs):
    return x * sorted(iter(xs))[0]


ITER_CASES = [_next_list, _next_tuple, _next_dict_keys, _next_dict_items, _next_set, _next_default,
              _next_stop_iteration, _zip_longest, _join_iterator, _sorted_iterator]


@pytest.mark.parametrize("fn", ITER_CASES, ids=[c.__name__ for c in ITER_CASES])
def test_next_on_container_iterators(fresh_ember, fn):
    x, xs = torch.randn(3), [3, 1, 2]
    got = ember.compile(fn, backend="eager", fullgraph=True)(x, list(xs))
    torch.testing.assert_close(got, fn(x, list(xs)))
