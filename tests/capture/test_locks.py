"""``threading.Lock``/``RLock`` used inside compiled code (transformers installs its output-capturing hooks
under ``with _hook_installation_lock:``, a double-checked flag). The trace takes them as no-ops, as
torch.compile does: one graph, no break, the block's effects (attribute writes, list appends) replayed, and the
lock left free afterwards. Differential: compiled == eager (values, attributes, lock state), no graph break.
"""
from __future__ import annotations

import threading

import pytest
import torch

import ember

LOCK = threading.Lock()
RLOCK = threading.RLock()


def _with_lock(x, state):
    with LOCK:
        state.append(1)
        y = x + 1
    return y * 2


def _with_rlock_nested(x, state):
    with RLOCK:
        with RLOCK:
            state.append(len(state))
            y = x.sin()
    return y + 1


def _acquire_release(x, state):
    got = LOCK.acquire()
    try:
        y = x * 3 if got else x
    finally:
        LOCK.release()
    return y


def _double_checked(x, state):
    if not state:                   # transformers' maybe_install_capturing_hooks
        with LOCK:
            if not state:
                state.append("installed")
    return x.relu() + len(state)


def _enter_value(x, state):
    with RLOCK as ok:
        y = x + 1 if ok else x - 1
    return y


CASES = [_with_lock, _with_rlock_nested, _acquire_release, _double_checked, _enter_value]


@pytest.mark.parametrize("fn", CASES, ids=[c.__name__ for c in CASES])
def test_lock_blocks_trace_in_one_graph(fn):
    ember.reset()
    compiled = ember.compile(fn)
    for _ in range(2):
        x = torch.randn(5)
        s_eager, s_comp = [], []
        want = fn(x, s_eager)
        got = compiled(x, s_comp)
        torch.testing.assert_close(got, want)
        assert s_comp == s_eager
    assert ember.stats()["graph_breaks"] == 0, ember.stats()
    assert not LOCK.locked()
    assert RLOCK.acquire(blocking=False)         # free: not held by the trace
    RLOCK.release()


def test_lock_in_module_forward_sets_flag_once():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            if not getattr(self, "_installed", False):
                with LOCK:
                    if not getattr(self, "_installed", False):
                        self._installed = True
            return self.lin(x).tanh()

    ember.reset()
    m = M()
    cm = ember.compile(m)
    ex = ember.explain(M())(torch.randn(2, 4))
    assert ex.graph_break_count == 0, ex
    for _ in range(2):
        x = torch.randn(2, 4)
        torch.testing.assert_close(cm(x), m(x))
    assert m._installed is True and not LOCK.locked()
