"""More reproducers from PyTorch's Dynamo test files run against ember (issue 32, tools/peer): each compiled
under fullgraph and compared with eager on fresh inputs (values and the containers' final contents)."""
from __future__ import annotations

import collections

import pytest
import torch

import ember


# A C method that fills a container from an iterable consumes it one item at a time, storing each item before
# the next is produced: a generator that reads the container sees the items already added
# (test_generator.py::test_deque_extendleft). Each case returns the container's final contents.
def _list_extend(x):
    y = [1]
    y.extend(y[-1] + z for z in range(3))
    return x + 1, y


def _list_iadd(x):
    y = [1]
    y += (len(y) + z for z in range(3))
    return x + 1, y


def _deque_extend(x):
    y = collections.deque([1])
    y.extend(y[-1] + z for z in range(3))
    return x + 1, list(y)


def _deque_extendleft(x):
    y = collections.deque([1])
    y.extendleft(y[0] + z for z in range(3))
    return x + 1, list(y)


def _deque_extend_itself(x):
    y = collections.deque([1, 2])
    y.extend(y)
    return x + 1, list(y)


def _deque_maxlen_extendleft(x):
    y = collections.deque([1, 2], maxlen=3)
    y.extendleft(len(y) * 10 + z for z in range(3))
    return x + 1, list(y)


def _set_update(x):
    s = {0}
    s.update(len(s) + z for z in range(3))
    return x + 1, sorted(s)


def _set_update_two_iterables(x):
    s = {0}
    s.update((len(s) for _ in range(2)), (len(s) * 10 for _ in range(2)))
    return x + 1, sorted(s)


def _set_difference_update(x):
    s = {0, 1, 2, 3, 4}
    s.difference_update(len(s) - 1 for _ in range(3))
    return x + 1, sorted(s)


def _dict_update_pairs(x):
    d = {"a": 0}
    d.update((f"k{len(d)}", z) for z in range(3))
    return x + 1, d


class _LazyMapping:
    """A mapping whose keys() is a generator reading the dict being filled (``target``)."""

    def __init__(self, target):
        self.target = target

    def keys(self):
        return (f"k{len(self.target)}" for _ in range(3))

    def __getitem__(self, k):
        return len(self.target) * 100


def _dict_update_from_mapping_keys(x):
    d = {"a": 0}
    d.update(_LazyMapping(d))
    return x + 1, d


def _dict_update_pairs_then_kwargs(x):
    d = {}
    d.update(((f"k{len(d)}", len(d)) for _ in range(2)), extra=7)
    return x + 1, d


LAZY_CASES = [_list_extend, _list_iadd, _deque_extend, _deque_extendleft, _deque_extend_itself,
              _deque_maxlen_extendleft, _set_update, _set_update_two_iterables, _set_difference_update,
              _dict_update_pairs, _dict_update_from_mapping_keys, _dict_update_pairs_then_kwargs]


@pytest.mark.parametrize("fn", LAZY_CASES, ids=[c.__name__ for c in LAZY_CASES])
def test_container_fill_consumes_iterator_lazily(fresh_ember, fn):
    x = torch.randn(3)
    got = ember.compile(fn, backend="eager", fullgraph=True)(x)
    want = fn(x)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1]
