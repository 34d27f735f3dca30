"""Capture gaps of issue 32, each compiled and compared with eager on fresh inputs: ember's user-facing errors
are ``RuntimeError`` subclasses (as torch._dynamo's are), NumPy constructors in compiled code, hooks registered
on every call, NumPy scalars as ints, indices and arguments."""
from __future__ import annotations

import pytest
import torch

import ember


# -- ember's user-facing errors are RuntimeErrors -----------------------------------------------------------
# torch._dynamo.exc.Unsupported, BackendCompilerFailed and InternalTorchDynamoError derive from RuntimeError;
# programs and test suites write ``except RuntimeError`` around a compiled call. Inside ember, the sites that
# catch RuntimeError (torch's errors of a meta run, a decomposition that cannot follow) must let ember's own
# errors through unchanged.
def _break_print(x):
    y = x.sin()
    print("", end="")
    return y.cos()


def _break_disabled(x):
    return ember.disable(torch.sin)(x) + 1


def _break_item_branch(x):
    if x.sum().item() > 0:
        return x + 1
    return x - 1


@pytest.mark.parametrize("fn", [_break_print, _break_disabled, _break_item_branch],
                         ids=lambda f: f.__name__)
def test_fullgraph_break_is_runtime_error(fresh_ember, fn):
    x = torch.randn(8)
    with pytest.raises(RuntimeError) as info:
        ember.compile(fn, fullgraph=True, backend="eager")(x)
    assert isinstance(info.value, ember.Unsupported)
    try:
        ember.compile(fn, fullgraph=True, backend="eager")(x)
    except RuntimeError as e:       # the way user code writes it
        assert "hint" in str(e) or e.user_stack
    else:
        raise AssertionError("no error")


def _failing_backend(gm, example_inputs):
    raise ValueError("backend refuses")


def test_backend_failure_is_runtime_error(fresh_ember):
    with pytest.raises(RuntimeError) as info:
        ember.compile(lambda x: x.sin() + 1, backend=_failing_backend)(torch.randn(4))
    assert isinstance(info.value, ember.BackendCompilerFailed)
    assert "backend refuses" in str(info.value)


def test_error_classes():
    assert issubclass(ember.Unsupported, RuntimeError)
    assert issubclass(ember.BackendCompilerFailed, RuntimeError)
    assert issubclass(ember.Unsupported, ember.EmberError)
    assert issubclass(ember.BackendCompilerFailed, ember.EmberError)


# A graph break inside the user's own ``try: ... except RuntimeError`` is still a graph break: the handler does
# not run, eager's result comes back.
def _try_print(x):
    try:
        y = x * 2
        print("", end="")
        return y + 1
    except RuntimeError:
        return x - 100


def _try_disabled(x):
    try:
        return ember.disable(torch.cos)(x) * 3
    except RuntimeError:
        return x - 100


def _try_data_dependent(x):
    try:
        if x.sum().item() > 0:
            return x + 1
        return x - 1
    except RuntimeError:
        return x - 100


def _try_nested_frames(x):
    def inner(t):
        print("", end="")
        return t + 1
    try:
        return inner(x) * 2
    except (ValueError, RuntimeError):
        return x - 100


@pytest.mark.parametrize("fn", [_try_print, _try_disabled, _try_data_dependent, _try_nested_frames],
                         ids=lambda f: f.__name__)
def test_break_inside_user_try_stays_a_break(fresh_ember, fn):
    cf = ember.compile(fn, backend="eager")
    for _ in range(2):
        x = torch.randn(8)
        torch.testing.assert_close(cf(x), fn(x))
    assert ember.stats()["graph_breaks"] >= 1


# The sites inside ember that catch torch's RuntimeError around an op (the meta run of a captured op, the
# decomposition fallback of a symbolic op): an ember error raised inside one passes through unchanged (a graph
# break is not the program's own error, an ember bug is not a reason to fall back quietly).
def _raises(exc):
    def fn(*args, **kwargs):
        raise exc
    fn.__name__ = "add"
    return fn


_EMBER_ERRORS = [
    ember.Unsupported("a break raised below an op", hint="h"),
    ember.errors.InternalError("an ember bug below an op"),
    ember.BackendCompilerFailed("b", ValueError("v")),
    ember.Unsupported("data-dependent meta tensor item()"),       # words the data-dependent retry looks for
]


@pytest.mark.parametrize("exc", _EMBER_ERRORS, ids=lambda e: type(e).__name__ + ":" + str(e).split()[0])
def test_meta_run_passes_ember_errors_through(exc):
    import types
    from ember.capture.torch.graph import run_meta
    st = types.SimpleNamespace(grad_enabled=True)
    with pytest.raises(type(exc)) as info:
        run_meta(None, None, st, _raises(exc), [torch.empty(2, device="meta")], {})
    assert info.value is exc


@pytest.mark.parametrize("exc", _EMBER_ERRORS, ids=lambda e: type(e).__name__ + ":" + str(e).split()[0])
def test_decomposition_fallback_passes_ember_errors_through(exc):
    from ember.decomp.interp import _or_extern
    calls = []

    def run(fn):
        calls.append(fn)
        raise exc
    with pytest.raises(type(exc)) as info:
        _or_extern(torch.ops.aten.add.Tensor, run)
    assert info.value is exc and len(calls) == 1
