"""The live state a graph break hands to its continuation, compiled == eager on every backend.

- Python numbers that cross a break (loop counters, accumulators, ``.item()`` results) and reach a later graph
  as 0-dim tensor inputs arrive with the dtype the graph was traced with (an int counter read by a C++ kernel
  through ``int64_t*`` from a float32 buffer was garbage).
- A local unbound at a break (a loop that ran zero times, a ``del``, a branch that did not assign it, an empty
  cell) stays unbound in the continuation, and one bound stays bound, whatever the call that compiled the
  continuation saw; reading it raises eager's exception with eager's message.
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


def items_on_the_stack(x, xi):
    out = x
    for i in range(3):
        out = out * x[i].item() + xi[i].item() - i     # the numbers cross the breaks on the value stack
    return out


def bool_counter(x):
    b = True
    for i in range(3):
        _ = x[i].item()
        x = x + b * i                   # a bool local and an int counter in tensor arithmetic
        b = not b
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
    (items_on_the_stack, lambda: (_f32(), torch.randint(-3, 3, (6,)))),
    (bool_counter, lambda: (_f32(),)),
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


# -- locals unbound at a break -----------------------------------------------------------------------------
@ember.disable
def opaque(t):
    """A graph break that hands ``t`` back unchanged."""
    return t


def loop_var_after_zero_trips(x, n):
    for i in range(n):
        x = x + i
    x = opaque(x) * 2
    x = opaque(x)
    if n > 0:
        x = x * i                       # i is read only where the loop ran
    return x


def loop_var_read_unguarded(x, n):
    for i in range(n):
        x = x + 1
    x = opaque(x)
    x = opaque(x) - 1                   # a segment that does not read i passes it on
    return x * i                        # n == 0: UnboundLocalError, as in eager


def deleted_local(x, flag):
    y = x + 1
    if flag:
        del y
    x = opaque(x)
    x = opaque(x * 2)                   # a segment that reads neither flag nor y
    return x * y                        # flag: UnboundLocalError


def branch_only_local(x, flag):
    if flag:
        z = x.sin()
    x = opaque(x) + 1
    try:
        return x * z
    except UnboundLocalError as e:
        return x, str(e)


def unbound_cell(x, flag):
    if flag:
        c = x.cos()
    x = opaque(x)
    read = lambda: c * x                # noqa: E731 - c is a cell of this frame
    try:
        return read()
    except NameError as e:
        return x - 1, type(e).__name__, str(e)


def unbound_cell_direct(x, flag):
    if flag:
        c = x.cos()
    x = opaque(x)
    keep = lambda: c                    # noqa: E731, F841 - makes c a cell
    return x + c


UNBOUND_PROGRAMS = [loop_var_after_zero_trips, loop_var_read_unguarded, deleted_local, branch_only_local,
                    unbound_cell, unbound_cell_direct]
# the flag/count of each call: the first call compiles the continuations, later ones reuse or add entries
UNBOUND_ORDERS = {"bound_first": [2, 0, 3, 0], "unbound_first": [0, 2, 0, 1]}


def _outcome(fn, *args):
    try:
        return "ok", fn(*args)
    except Exception as e:             # noqa: BLE001 - the exception is part of what is compared
        return "raised", (type(e), str(e))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("order", list(UNBOUND_ORDERS))
@pytest.mark.parametrize("fn", UNBOUND_PROGRAMS, ids=[f.__name__ for f in UNBOUND_PROGRAMS])
def test_unbound_locals_across_breaks(fresh_ember, fn, order, backend):
    compiled = ember.compile(fn, backend=backend)
    for k in UNBOUND_ORDERS[order]:
        x = torch.randn(5)
        arg = k if "loop" in fn.__name__ else bool(k)
        kind, expected = _outcome(fn, x.clone(), arg)
        got_kind, actual = _outcome(compiled, x.clone(), arg)
        assert got_kind == kind, f"{fn.__name__}({arg}): compiled {got_kind} {actual}, eager {kind} {expected}"
        assert_same(actual, expected)


def _float_across_break(x):
    v = x[0].item()
    print("", end="")
    return x * v, x.int() * v, x > v, torch.full((2,), v), x.half() + v, torch.clamp(x, min=v), v * x.sum()


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "ember"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_float_across_break_keeps_precision_and_promotion(fresh_ember, backend, dtype):
    """A Python float crossing a break is exact in the graph (float64) and each use computes in eager's dtype:
    a float64 program keeps every bit, an int tensor times it is float32, a half tensor plus it is half."""
    x = torch.tensor([1 / 3, 1.0, 0.2], dtype=dtype)
    got, want = ember.compile(_float_across_break, backend=backend)(x), _float_across_break(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(g, w), (g, w)
