"""Thread safety: compiled functions and modules called from 8 threads at once, on their first (compiling)
calls and on cached calls, give eager's values and gradients, raise nothing, and compile one entry per
distinct function and guard set (not one per thread).

Every test starts its threads together (``threading.Barrier``) and runs with a tiny GIL switch interval, so
threads interleave inside compiles as often as they can."""
from __future__ import annotations

import sys
import threading
import time
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


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                               torch.nn.Linear(16, 4))


def grads(out: torch.Tensor, wrt: list[torch.Tensor]) -> tuple:
    """Gradients without accumulating into ``.grad`` (the threads share the parameters)."""
    return torch.autograd.grad((out * out).sum(), wrt)


# -- a plain function: the same one from every thread (first calls race to compile it), then cached --------
def pointwise(x, y):
    return (x * y + 1).sin().sum(-1) * 2 + y.cos().mean()


def reduction(x, y):
    return torch.softmax(x @ y.T, dim=-1).amax(0) - x.abs().sum()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [pointwise, reduction], ids=lambda f: f.__name__)
def test_same_function_first_and_cached_calls(fn, backend):
    compiled = ember.compile(fn, backend=backend)
    inputs = [(torch.randn(4, 8), torch.randn(4, 8)) for _ in range(N)]
    before = ember.stats()["graphs_compiled"]
    for _ in range(2):      # the first round compiles (all threads miss at once), the second hits
        outs = run_threads(lambda i: compiled(*inputs[i]))
        for (x, y), out in zip(inputs, outs):
            torch.testing.assert_close(out, fn(x, y))
    assert entries(compiled) == 1
    assert ember.stats()["graphs_compiled"] - before == 1
    # every call but the one that compiled is a hit (those that waited for the compile too), none lost
    assert ember.stats()["cache_hits"] == 2 * N - 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_distinct_guard_sets_compile_once_each(backend):
    """Half the threads call with float32, half with float64: two entries, whatever the order."""
    compiled = ember.compile(pointwise, backend=backend)
    inputs = [tuple(torch.randn(4, 8, dtype=torch.float32 if i % 2 else torch.float64) for _ in range(2))
              for i in range(N)]
    outs = run_threads(lambda i: compiled(*inputs[i]))
    for (x, y), out in zip(inputs, outs):
        torch.testing.assert_close(out, pointwise(x, y))
    assert entries(compiled) == 2


# -- 8 different functions compiled at once ---------------------------------------------------------------
def _make(i: int, w: torch.Tensor):
    # tanh's argument stays where tanh does not saturate: at x + 7 (as this test had it) six saturated values
    # differ only in their last bits and layer_norm scales those bits up to ~1e-5, past float32's tolerance for
    # any two correct tanh implementations (ember's float tanh is within 3 ulp, glibc's within 1)
    def f(x):
        return torch.nn.functional.layer_norm(torch.tanh(x * w[0] + i / 8), (6,)).softmax(-1) @ w.T
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


# -- nn.Modules: inference and training --------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_module_inference(backend):
    torch.manual_seed(0)
    m = mlp().eval()
    cm = ember.compile(m, backend=backend)
    xs = [torch.randn(5, 8) for _ in range(N)]
    for _ in range(2):
        with torch.no_grad():
            outs = run_threads(lambda i: _no_grad(cm, xs[i]))
            for x, out in zip(xs, outs):
                torch.testing.assert_close(out, m(x))
    assert entries(cm) == 1


def _no_grad(f, *args):
    with torch.no_grad():       # grad mode is per thread: each thread sets its own
        return f(*args)


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_training_shared(backend):
    """One module, 8 threads: forward and backward at once; gradients (inputs and parameters) equal eager's."""
    torch.manual_seed(0)
    m = mlp()
    cm = ember.compile(m, backend=backend)
    params = list(m.parameters())
    xs = [torch.randn(5, 8, requires_grad=True) for _ in range(N)]

    def step(i):
        out = cm(xs[i])
        return out, grads(out, [xs[i], *params])

    for _ in range(2):
        results = run_threads(step)
        for x, (out, g) in zip(xs, results):
            ref = m(x)
            torch.testing.assert_close(out, ref)
            for a, b in zip(g, grads(ref, [x, *params])):
                torch.testing.assert_close(a, b)
    assert entries(cm) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_training_one_per_thread(backend):
    """8 modules compiled at once, each trained a step in its own thread with .backward()."""
    torch.manual_seed(0)
    mods = [mlp() for _ in range(N)]
    cms = [ember.compile(m, backend=backend) for m in mods]
    xs = [torch.randn(5, 8) for _ in range(N)]

    def step(i):
        out = cms[i](xs[i])
        (out * out).sum().backward()
        g = [p.grad for p in mods[i].parameters()]
        for p in mods[i].parameters():
            p.grad = None
        return out, g

    outs = run_threads(step)
    for m, x, (out, g) in zip(mods, xs, outs):
        ref = m(x)
        (ref * ref).sum().backward()
        torch.testing.assert_close(out, ref)
        for a, p in zip(g, m.parameters()):
            torch.testing.assert_close(a, p.grad)
    assert [entries(c) for c in cms] == [1] * N


# -- callers that arrive while the entry is being compiled --------------------------------------------------
def test_callers_wait_for_the_entry_being_compiled():
    """Thread 0's call compiles; the backend holds that compile until the other 7 threads have called too.
    They wait for the entry and use it: the backend runs once, every result is eager's."""
    started, release = threading.Event(), threading.Event()
    calls = []

    def slow_backend(gm, example_inputs):
        calls.append(gm)
        started.set()
        release.wait(timeout=30)
        return gm.forward

    compiled = ember.compile(pointwise, backend=slow_backend)
    inputs = [(torch.randn(4, 8), torch.randn(4, 8)) for _ in range(N)]
    results: list = [None] * N
    errors: list = []

    def body(i):
        try:
            results[i] = compiled(*inputs[i])
        except BaseException as e:       # noqa: BLE001
            errors.append(e)

    first = threading.Thread(target=body, args=(0,))
    first.start()
    assert started.wait(timeout=60)
    rest = [threading.Thread(target=body, args=(i,)) for i in range(1, N)]
    for t in rest:
        t.start()
    time.sleep(0.3)         # let them reach the cache and find the entry still compiling
    release.set()
    for t in [first, *rest]:
        t.join(timeout=60)
    assert not errors, errors
    for (x, y), out in zip(inputs, results):
        torch.testing.assert_close(out, pointwise(x, y))
    assert len(calls) == 1
    assert entries(compiled) == 1


# -- graph breaks: continuations and callees compiled from several threads ----------------------------------
def _helper(y, i):
    return y + i


def with_breaks(x, n):
    y = x.sin() * 2
    for i in range(n):
        y = _helper(y, i)
        if y.sum().item() > 1e9:        # data-dependent branch: a graph break inside the loop
            y = y * 0
    print(end="")                       # a break outside the loop
    return y.cos() + len(str(n))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_graph_breaks_compile_as_in_one_thread(backend):
    """The frame, its continuations after each break and its callees compile the same entries from 8 threads
    at once as from one thread."""
    def structure(compiled):
        s = compiled.__ember_cache__.session
        return sorted((c.name, len(c.entries)) for c in s.caches)

    xs = [torch.randn(5) for _ in range(N)]
    one = ember.compile(with_breaks, backend=backend)
    for x in xs:
        one(x, 3)
    expected = structure(one)
    assert len(expected) > 2, expected          # continuations and callees were compiled
    ember.reset()
    many = ember.compile(with_breaks, backend=backend)
    for _ in range(2):
        outs = run_threads(lambda i: many(xs[i], 3))
        for x, out in zip(xs, outs):
            torch.testing.assert_close(out, with_breaks(x, 3))
    assert structure(many) == expected


# -- process-wide state that compiles touch ---------------------------------------------------------------
def test_fake_modes_overlapping_in_two_threads_restore_cuda_init():
    """FakeMode skips ``torch.cuda._lazy_init`` (one process-wide attribute) on machines without CUDA. Two
    threads' FakeModes that overlap (A enters, B enters, A exits, B exits) must leave torch's own function in
    place, and a thread that is not faking must get the real init meanwhile."""
    if torch.cuda.is_available():
        pytest.skip("FakeMode changes torch.cuda._lazy_init only on machines without CUDA")
    from ember.autograd.fake import FakeMode
    real = torch.cuda._lazy_init
    steps = [threading.Event() for _ in range(4)]
    seen: dict = {}

    def a():
        with FakeMode():
            steps[0].set()
            steps[1].wait(10)
        steps[2].set()

    def b():
        steps[0].wait(10)
        with FakeMode():
            steps[1].set()
            steps[2].wait(10)
        steps[3].set()

    def outsider():     # not faking, while A and B are
        steps[1].wait(10)
        try:
            torch.cuda._lazy_init()
            seen["outsider"] = None
        except Exception as e:      # noqa: BLE001 - what the real init raises without CUDA
            seen["outsider"] = type(e)

    try:
        real()
        expected = None
    except Exception as e:          # noqa: BLE001
        expected = type(e)
    threads = [threading.Thread(target=t) for t in (a, b, outsider)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert steps[3].is_set()
    assert torch.cuda._lazy_init is real
    assert seen["outsider"] is expected


_FRESH_PROCESS = """
import logging, sys, threading, torch, ember
sys.setswitchinterval(1e-5)
ember.set_logs(guards=True)
logging.getLogger("ember").handlers.clear()
N = 8
def make(i):
    w = torch.full((8,), i + 1.0)       # a graph input: the 8 graphs share their kernels
    def f(x):
        return torch.nn.functional.gelu(x * w).softmax(-1)
    return f
fns = [make(i) for i in range(N)]
compiled = [ember.compile(f) for f in fns]
xs = [torch.randn(4, 8) for _ in range(N)]
barrier, errors = threading.Barrier(N), []
def work(i):
    try:
        barrier.wait()
        torch.testing.assert_close(compiled[i](xs[i]), fns[i](xs[i]))
    except BaseException as e:
        errors.append(repr(e))
ts = [threading.Thread(target=work, args=(i,)) for i in range(N)]
[t.start() for t in ts]
[t.join() for t in ts]
print("errors:", errors)
print("dynamo imported:", "torch._dynamo" in sys.modules)
print("ember log handlers:", len(logging.getLogger("ember").handlers))
"""


def test_first_compiles_of_a_process_from_8_threads():
    """A fresh process whose first compiles run in 8 threads at once: no errors, torch._dynamo not imported
    (the stand-ins of ``ember.dynamo_free`` are in place before any thread traces), one log handler."""
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", _FRESH_PROCESS], capture_output=True, text=True, timeout=300,
                          cwd=str(root), env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "HOME": "/tmp",
                                              "EMBER_COMPILE_WORKERS": "0", **_cache_env()})
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    assert "errors: []" in out, out
    assert "dynamo imported: False" in out, out
    assert "ember log handlers: 1" in out, out


def _cache_env() -> dict:
    import os
    return {k: v for k, v in os.environ.items() if k in ("EMBER_CACHE_DIR", "CXX")}
