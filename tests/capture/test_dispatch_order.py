"""The dispatcher checks the entry used last first (most recently used first, as torch.compile's cache).

A decode loop compiles a static entry for its first steps and then the symbolic one that serves every later
step; checking the entries in compile order made every token run the static entries' guards first, which fail
only at the KV cache's size, hundreds of checks in. Each case: outputs equal eager, the entry that served the
last call is first, no extra compile, and an entry that runs eagerly (the recompile limit's catch-all) is
never moved in front of the compiled ones.
"""
from __future__ import annotations

import pytest
import torch

import ember
from ember.capture.frontend import MISS


def decode(q, cache):
    k = torch.cat([cache, q], dim=1)
    return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ k, k


def scale(x, n: int):
    return x * n + x.sum()


def two_shapes(x):
    return x.relu() * 2


CASES = {
    # (function, the calls' arguments, options)
    "growing_cache": (decode, lambda: [(torch.randn(1, 1, 8), torch.randn(1, n, 8))
                                       for n in (4, 5, 6, 7, 8, 9)], {}),
    "int_argument": (scale, lambda: [(torch.randn(3), n) for n in (2, 3, 4, 5, 6)], {}),
    "alternating_static": (two_shapes, lambda: [(torch.randn(n, 3),) for n in (2, 5, 2, 5, 2, 5)],
                           {"dynamic": False}),
}


def _walked(cache, args) -> int:
    """How many entries the dispatcher's walk would call for ``args`` before one matches."""
    for i, fn in enumerate(list(cache._entry_fns)):
        if fn(*args) is not MISS:
            return i + 1
    return -1


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_entry_used_last_is_checked_first(name):
    fn, make_calls, kw = CASES[name]
    ember.reset()
    cf = ember.compile(fn, **kw)
    calls = make_calls()
    for args in calls:
        out, ref = cf(*args), fn(*args)
        torch.testing.assert_close(out, ref)
    cache = cf.__ember_cache__
    compiled = len(cache.entries)
    assert compiled >= 2, "the premise: more than one entry"
    assert _walked(cache, calls[-1]) == 1           # the entry of the last call comes first
    assert _walked(cache, calls[-1]) == 1
    assert len(cache.entries) == compiled and ember.stats()["fallbacks_to_eager"] == 0


def test_the_recompile_limits_eager_entry_is_never_moved_first():
    ember.reset()
    runs = []

    def backend(gm, example_inputs):
        def run(*a):
            runs.append(1)
            return gm.forward(*a)
        return run
    cf = ember.compile(two_shapes, backend=backend, dynamic=False, options={"cache_size_limit": 2})
    for n in (2, 3, 4, 5):               # 2 compiled entries, then the eager catch-all for every other size
        x = torch.randn(n, 3)
        torch.testing.assert_close(cf(x), two_shapes(x))
    assert ember.stats()["fallbacks_to_eager"] == 1
    runs.clear()
    x = torch.randn(2, 3)                # a size of a compiled entry: still runs compiled
    torch.testing.assert_close(cf(x), two_shapes(x))
    assert runs == [1]
    cache = cf.__ember_cache__
    assert cache._entry_fns[-1] is cache.entries[-1].fn and cache.entries[-1].eager
