"""No full garbage collections while ember compiles (``ember.gcpause``): each full collection walks every object in
the process (0.1 s with torch and sympy imported), and a compile used to trigger one or more (0.12 s of a warm
start's 0.3 s). The thresholds are made tiny here so that, without the pause, full collections run all through
a compile; with it, none runs while ``FrameCache.compile_entry`` does, the results equal eager's, and the
user's collector settings are as they were afterwards (also after a failed compile, with the collector disabled,
thresholds changed during the compile, and compiles in two threads at once)."""
from __future__ import annotations

import gc
import threading

import pytest
import torch

import ember
from ember.capture import frontend

TINY = (1, 1, 1)


@pytest.fixture
def watch(monkeypatch):
    """Counts full collections while a compile runs; the thresholds are TINY for the test."""
    seen = {"full_in_compile": 0, "compiles": 0, "paused": []}
    inside = [0]
    real = frontend.FrameCache.compile_entry

    def compile_entry(self, args, kwargs):
        seen["compiles"] += 1
        seen["paused"].append(gc.get_threshold()[2] > 1 << 20)     # the oldest generation's threshold
        inside[0] += 1
        try:
            hook = getattr(compile_entry, "hook", None)
            if hook is not None:
                hook()
            return real(self, args, kwargs)
        finally:
            inside[0] -= 1

    def on_gc(phase, info):
        if phase == "start" and info["generation"] == 2 and inside[0]:
            seen["full_in_compile"] += 1
    monkeypatch.setattr(frontend.FrameCache, "compile_entry", compile_entry)
    saved, enabled = gc.get_threshold(), gc.isenabled()
    gc.callbacks.append(on_gc)
    gc.set_threshold(*TINY)
    try:
        yield seen, compile_entry
    finally:
        gc.callbacks.remove(on_gc)
        gc.set_threshold(*saved)
        (gc.enable if enabled else gc.disable)()


def _infer(x, w):
    return torch.tanh(x @ w).softmax(-1) * 2


def _train(x, w):
    return ((x @ w).relu() ** 2).mean()


def _graph_break(x, w):
    y = (x @ w).sin()
    print("", end="")           # a graph break: two graphs, two compiles
    return y.cos() + 1


CASES = {"inference": (_infer, False), "training": (_train, True), "graph break": (_graph_break, False)}


@pytest.mark.parametrize("name", list(CASES))
def test_no_full_collection_during_a_compile_and_thresholds_restored(watch, name):
    seen, _ = watch
    fn, train = CASES[name]
    x, w = torch.randn(8, 16), torch.randn(16, 16, requires_grad=train)
    f = ember.compile(fn)
    out = f(x, w)
    ref = fn(x, w)
    torch.testing.assert_close(out, ref)
    if train:
        (g,) = torch.autograd.grad(out, w)
        (gr,) = torch.autograd.grad(ref, w)
        torch.testing.assert_close(g, gr)
    assert seen["compiles"] >= 1 and all(seen["paused"])
    assert seen["full_in_compile"] == 0
    assert gc.get_threshold() == TINY and gc.isenabled()


def test_failed_compile_restores_thresholds(watch):
    seen, _ = watch
    f = ember.compile(lambda x, w: x @ w)
    with pytest.raises(Exception):
        f(torch.randn(3, 4), torch.randn(5, 6))       # the user's shape error, raised by the compile
    assert seen["compiles"] >= 1 and all(seen["paused"]) and gc.get_threshold() == TINY


def test_disabled_collector_is_left_alone(watch):
    gc.disable()
    f = ember.compile(_infer)
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    torch.testing.assert_close(f(x, w), _infer(x, w))
    assert not gc.isenabled() and gc.get_threshold() == TINY


def test_thresholds_set_during_a_compile_are_kept(watch):
    seen, compile_entry = watch
    compile_entry.hook = lambda: gc.set_threshold(5, 6, 7)
    try:
        f = ember.compile(_infer)
        x, w = torch.randn(8, 16), torch.randn(16, 16)
        torch.testing.assert_close(f(x, w), _infer(x, w))
    finally:
        del compile_entry.hook
    assert all(seen["paused"]) and gc.get_threshold() == (5, 6, 7)


def test_compiles_in_two_threads_restore_once_both_finish(watch):
    seen, _ = watch
    fns = [ember.compile(_infer), ember.compile(_train)]
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    errors: list = []
    start = threading.Barrier(2)

    def run(f, ref):
        try:
            start.wait()
            torch.testing.assert_close(f(x, w), ref(x, w))
        except Exception as e:      # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(f, r)) for f, r in zip(fns, (_infer, _train))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert seen["compiles"] >= 2 and all(seen["paused"]) and seen["full_in_compile"] == 0
    assert gc.get_threshold() == TINY


_IMPORT = """
import gc, sys
gc.set_threshold(1, 1, 1)
full = [0]
gc.callbacks.append(lambda phase, info: full.__setitem__(0, full[0] + (phase == "start" and info["generation"] == 2)))
import torch, ember
before = full[0]
getattr(ember, sys.argv[1])
print(full[0] - before, gc.get_threshold(), "sympy" in sys.modules)
"""


@pytest.mark.parametrize("name", ["compile", "export", "list_backends"])
def test_first_use_of_ember_imports_without_full_collections(name):
    """``ember.<name>``'s first use imports the pipeline (sympy among it: 0.1 s per full collection). With tiny
    thresholds, 3 or 4 full collections ran in it; now the one that is due runs when the pause ends (and a
    compile that starts before it is due puts it off again: one collection instead of several)."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", _IMPORT, name], capture_output=True, text=True, timeout=300,
                         cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split("(")[0]) <= 1 and "(1, 1, 1)" in out.stdout, out.stdout
