"""Thread safety: compiled functions and modules called from 8 threads at once, on their first (compiling)
calls and on cached calls, give eager's values and gradients, raise nothing, and compile one entry per
distinct function and guard set (not one per thread).

Every test starts its threads together (``threading.Barrier``) and runs with a tiny GIL switch interval, so
threads interleave inside compiles as often as they can."""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable

import pytest
import torch

import ember

N = 8
BACKENDS = ["ember", "eager", "aot_eager"]


@pytest.fixture(autouse=True)
def _interleave():
    ember.reset()
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)
    ember.reset()


def run_threads(work: Callable[[int], Any], n: int = N) -> list:
    """``work(i)`` in ``n`` threads started together; their results in order. Any exception fails the test."""
    barrier = threading.Barrier(n)
    results: list = [None] * n
    errors: list = []

    def body(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(i)
        except BaseException as e:      # noqa: BLE001 - reported below with the thread's number
            errors.append((i, e))

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung (deadlock?)"
    if errors:
        raise AssertionError(f"{len(errors)} of {n} threads raised; thread {errors[0][0]}") from errors[0][1]
    return results


def entries(compiled: Any) -> int:
    cache = getattr(compiled, "_ember_cache", None) or compiled.__ember_cache__
    return len(cache.entries)


# -- 8 different functions compiled at once ---------------------------------------------------------------
def _make(i: int, w: torch.Tensor):
    def f(x):
        return torch.nn.functional.layer_norm(torch.tanh(x * w[0] + i), (6,)).softmax(-1) @ w.T
    return f


@pytest.mark.parametrize("backend", BACKENDS)
def test_different_functions_compiled_at_once(backend):
    ws = [torch.randn(6, 6) for _ in range(N)]
    fns = [_make(i, ws[i]) for i in range(N)]
    compiled = [ember.compile(f, backend=backend) for f in fns]
    xs = [torch.randn(3, 6) for _ in range(N)]
    before = ember.stats()["graphs_compiled"]
    outs = run_threads(lambda i: compiled[i](xs[i]))
    for f, x, out in zip(fns, xs, outs):
        torch.testing.assert_close(out, f(x))
    assert [entries(c) for c in compiled] == [1] * N
    assert ember.stats()["graphs_compiled"] - before == N
