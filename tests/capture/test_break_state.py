"""The live state a graph break hands to its continuation, compiled == eager on every backend.

- Python numbers that cross a break (loop counters, accumulators, ``.item()`` results) and reach a later graph
  as 0-dim tensor inputs arrive with the dtype the graph was traced with (an int counter read by a C++ kernel
  through ``int64_t*`` from a float32 buffer was garbage).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repo root, for `tests.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ember  # noqa: E402
from tests.capture.harness import assert_same, clone_value  # noqa: E402

BACKENDS = ["ember", "aot_eager", "eager"]


# -- Python numbers across a break -------------------------------------------------------------------------
def counter_in_tensor_math(x):
    s = torch.zeros(())
    for i in range(4):
        _ = x[i].item()                 # break: i crosses it, then changes every iteration (dynamic)
        s = s + x * i
    return s


def counter_and_accumulator(x):
    s = 0.0
    for i in range(3):
        s = s + x[i].item() * i
        x = x * i + 1
    return x, s


def float_and_bool_locals(x):
    j, b = 1.5, True
    for i in range(3):
        _ = x[i].item()
        x = x * j + i + b
        j = j * 2
        b = not b
    return x


def item_value_in_math(x):
    out = x
    for i in range(3):
        v = x[i].item()                 # a float from outside the graph
        out = out * v - i
    return out


def int_item_in_math(x, xi):
    out = x
    for i in range(3):
        n = xi[i].item()                # an int from an int tensor: changes every call
        out = out + n * x - i
    return out


def counter_with_int_tensor(x, xi):
    for i in range(1, 4):
        _ = x[i].item()
        xi = xi * i + i                 # int32 arithmetic: the counter must not promote or truncate it
        x = x / i
    return x, xi


def counter_with_double(x64):
    for i in range(3):
        v = x64[i].item()
        x64 = x64 * i + v / 3
    return x64


def counter_changes_type(x):
    k = 0
    for i in range(4):
        _ = x[i].item()
        x = x + k                       # k: int on some iterations, float on others
        k = k + 0.5 if i % 2 else k + 1
    return x


def _f32(n=6):
    return torch.randn(n)


SCALAR_PROGRAMS = [
    (counter_in_tensor_math, lambda: (_f32(),)),
    (counter_and_accumulator, lambda: (_f32(),)),
    (float_and_bool_locals, lambda: (_f32(),)),
    (item_value_in_math, lambda: (_f32(),)),
    (int_item_in_math, lambda: (_f32(), torch.randint(-5, 5, (6,)))),
    (counter_with_int_tensor, lambda: (_f32(), torch.randint(-5, 5, (6,), dtype=torch.int32))),
    (counter_with_double, lambda: (torch.randn(6, dtype=torch.float64),)),
    (counter_changes_type, lambda: (_f32(),)),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn,make", SCALAR_PROGRAMS, ids=[p[0].__name__ for p in SCALAR_PROGRAMS])
def test_numbers_across_breaks(fresh_ember, fn, make, backend):
    compiled = ember.compile(fn, backend=backend)
    for _ in range(3):                  # fresh inputs: later calls take the dynamic (unguarded) path
        args = make()
        expected = fn(*clone_value(args))
        actual = compiled(*clone_value(args))
        assert_same(actual, expected)
