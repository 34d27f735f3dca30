"""itertools helpers run symbolically: same values as eager and no graph break."""
from __future__ import annotations

import itertools

import pytest
import torch

import ember


def _pairs(x):
    return [u * v for u, v in itertools.combinations([x, x + 1, x + 2], 2)]


def _index_pairs(x):
    return [x * i + j for i, j in itertools.combinations(range(4), 2)]


def _perms(x):
    return [u - 2 * v for u, v in itertools.permutations([x, x + 1, x + 2], 2)]


def _perms_full(x):
    return [a - b * c for a, b, c in itertools.permutations([x, x * 2, x - 1])]


def _with_replacement(x):
    return [u * v for u, v in itertools.combinations_with_replacement([x, x + 1, x * 3], 2)]


def _starmap(x):
    return list(itertools.starmap(lambda u, k: u * k, [(x, 2), (x + 1, 3)]))


def _takewhile(x):
    return [x * i for i in itertools.takewhile(lambda i: i < 3, range(10))]


def _dropwhile(x):
    return [x * i for i in itertools.dropwhile(lambda i: i < 3, [0, 1, 5, 2, 7])]


def _compress(x):
    return [x * i for i in itertools.compress(range(5), [1, 0, 1, 0, 1])]


CASES = [_pairs, _index_pairs, _perms, _perms_full, _with_replacement, _starmap, _takewhile, _dropwhile, _compress]


@pytest.mark.parametrize("fn", CASES, ids=[c.__name__ for c in CASES])
def test_itertools_without_break(fresh_ember, fn):
    x = torch.randn(3)
    got = ember.compile(fn, backend="eager")(x)
    want = fn(x)
    assert len(got) == len(want) and all(torch.allclose(a, b) for a, b in zip(got, want))
    assert ember.stats()["graph_breaks"] == 0
