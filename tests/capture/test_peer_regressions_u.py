"""Reproducers from PyTorch's Dynamo test_unspec.py run against ember (issue 32, tools/peer): numbers that are
not constants of the trace (Python's random draws, values read from tensors, float arguments that change).
Each is compiled and compared with eager on fresh inputs: values, and Python's generator state after the call."""
from __future__ import annotations

import random

import pytest
import torch

import ember


# -- Python's random module inside compiled code (test_compiled_random_calls_are_random) ------------------------
def _uniform(x):
    return (x + 1) * random.uniform(0, 1)


def _random_twice(x):
    a = random.random()
    b = random.random()
    return x * a - b, b


def _gauss_kw(x):
    return x + random.gauss(mu=1.0, sigma=2.0)


def _draw_returned(x):
    return x.sin(), random.expovariate(2.0)


def _randint(x):
    n = random.randint(2, 18)
    return x * n, n


def _randrange_then_float(x):
    k = random.randrange(0, 10, 2)
    return x + k * random.random()


def _draw_in_helper(x):
    def noise():
        return random.triangular(0.0, 1.0, 0.25)
    return x * noise() + noise()


RANDOM_CASES = [_uniform, _random_twice, _gauss_kw, _draw_returned, _randint, _randrange_then_float,
                _draw_in_helper]


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.allclose(a, b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b and type(a) is type(b)


@pytest.mark.parametrize("fn", RANDOM_CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("backend", ["eager", "ember"])
def test_random_draws_in_graph(fn, backend):
    ember.reset()
    cf = ember.compile(fn, backend=backend, fullgraph=True)
    seen = set()
    for seed in (1, 2, 3):
        x = torch.randn(5)
        random.seed(seed)
        want = fn(x)
        state = random.getstate()
        random.seed(seed)
        got = cf(x)
        assert _same(want, got), (want, got)
        assert random.getstate() == state          # the generator advanced exactly as in eager
        seen.add(repr(got))
    assert len(seen) == 3                           # a new draw on every call, not the first call's constant
