"""``ember.compile``'s argument checks and the lifetime of what it compiles (issue 31, items 4 and 5).

Bad ``options`` types raise a TypeError naming the valid form; a compiled function the user drops is garbage
collected with the tensors and objects its entries captured, while ``ember.reset()`` still resets live ones."""
from __future__ import annotations

import gc
import weakref

import pytest
import torch

import ember


@pytest.mark.parametrize("bad", ["max_autotune", "max-autotune", ["max_autotune"], ("max_autotune", True), 3,
                                 {1: True}])
def test_bad_options_type_is_a_clear_type_error(bad):
    with pytest.raises(TypeError) as ei:
        ember.compile(lambda x: x + 1, options=bad)
    msg = str(ei.value)
    assert "list_options()" in msg
    if not isinstance(bad, dict):
        assert "dict" in msg and type(bad).__name__ in msg
    if bad == "max_autotune":
        assert "mode='max-autotune'" in msg


def test_bad_mode_type_is_a_clear_type_error():
    with pytest.raises(TypeError, match="mode must be a str"):
        ember.compile(lambda x: x + 1, mode={"max_autotune": True})


@pytest.mark.parametrize("options", [None, {}, {"max_autotune": False}])
def test_good_options_still_accepted(options):
    f = ember.compile(lambda x: x * 2, options=options)
    x = torch.randn(3)
    torch.testing.assert_close(f(x), x * 2)


def _compiled_closure(kind: str):
    """A compiled callable whose entries capture ``w`` (a tensor) and ``cfg`` (an object); weak references
    to both, and the compiled callable."""
    w = torch.randn(3)

    class Cfg:
        scale = 2.0
    cfg = Cfg()
    if kind == "lambda":
        compiled = ember.compile(lambda x: x * w * cfg.scale)
    elif kind == "function":
        def f(x):
            return x * w * cfg.scale
        compiled = ember.compile(f)
    else:
        class M(torch.nn.Module):
            def forward(self, x):
                return x * w * cfg.scale
        compiled = ember.compile(M())
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * w * 2.0)
    return weakref.ref(w), weakref.ref(cfg), compiled


@pytest.mark.parametrize("kind", ["lambda", "function", "module"])
def test_dropped_compiled_function_is_collected(fresh_ember, kind):
    rw, rc, compiled = _compiled_closure(kind)
    gc.collect()
    assert rw() is not None and rc() is not None       # alive while the compiled callable is
    del compiled
    gc.collect()
    assert rw() is None and rc() is None


def test_many_throwaway_compiles_do_not_accumulate(fresh_ember):
    refs = [_compiled_closure("lambda")[:2] for _ in range(30)]
    gc.collect()
    assert all(r() is None for pair in refs for r in pair)


def test_reset_still_resets_live_compiled_functions(fresh_ember):
    def f(x):
        return x + 1
    compiled = ember.compile(f)
    gc.collect()
    x = torch.randn(2)
    compiled(x)
    compiled(x)
    cache = compiled.__ember_cache__
    assert len(cache.entries) == 1
    ember.reset()
    assert len(cache.entries) == 0
    torch.testing.assert_close(compiled(x), x + 1)
    assert len(cache.entries) == 1
