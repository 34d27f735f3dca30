"""Tracebacks of the program's own exceptions raised inside compiled code read as eager's: the same user
frames (function names and the lines that raised, outermost first), no frame of ember's (its package, glue,
dispatchers, the interpreter), and the exception itself unchanged (type, message, identity, chaining).

Covered: a raise in the compiled function, in an inlined callee, in a callee after a graph break, in a
continuation, in an ``ember.disable``d callee, a raise inside ``except`` (implicit chaining) and ``from``,
and an error of a torch op (shape mismatch) in a traced line; each on ember, aot_eager and eager. An op
that raises only at run time inside a compiled graph (an index out of range) shows the user's line of that op.
"""
from __future__ import annotations

import sys
import traceback
from pathlib import Path

import pytest
import torch

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repo root, for `tests.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ember  # noqa: E402

THIS_FILE = str(Path(__file__).resolve())
EMBER_DIR = str(Path(ember.__file__).resolve().parent)
BACKENDS = ["ember", "aot_eager", "eager"]
SHARED = ValueError("the one shared exception object")


def bar(y):
    if y.sum() > -1e9:                  # always true; a tensor condition: a graph break (data-dependent)
        pass
    raise ValueError(f"bad {y.shape[0]}")


def bar_traced(y):
    y = y * 2
    raise ValueError(f"bad {y.shape[0]}")


@ember.disable
def bar_native(y):
    raise KeyError("native")


def raise_in_function(x):
    y = x + 1
    raise RuntimeError(f"own {y.shape[0]}")


def raise_in_inlined_callee(x):
    y = x.sin()
    return bar_traced(y) + 1


def raise_in_callee_after_break(x):
    y = x + 1
    print("break")
    return bar(y)


def raise_in_continuation(x):
    y = x + 1
    print("break")
    y = y * 2
    raise KeyError(f"continued {y.shape[0]}")


def raise_in_continuation_callee(x):
    y = x + 1
    print("break")
    y = y * 2
    return bar_traced(y)


def raise_in_disabled_callee(x):
    y = x.cos()
    return bar_native(y)


def raise_shared_object(x):
    print("break")
    raise SHARED


def raise_while_handling(x):
    y = x + 1
    print("break")
    try:
        {}["missing"]
    except KeyError:
        raise ValueError(f"while handling {y.shape[0]}")


def raise_from(x):
    try:
        bar_traced(x)
    except ValueError as e:
        raise TypeError("from") from e


def op_shape_mismatch(x):
    y = x + 1
    z = y @ torch.ones(7, 2)            # (5,) @ (7, 2): the op raises
    return z


def op_shape_mismatch_after_break(x):
    y = x + 1
    print("break")
    return y.view(2, 3)                 # 5 elements: the op raises


PROGRAMS = [raise_in_function, raise_in_inlined_callee, raise_in_callee_after_break, raise_in_continuation,
            raise_in_continuation_callee, raise_in_disabled_callee, raise_shared_object, raise_while_handling,
            raise_from, op_shape_mismatch, op_shape_mismatch_after_break]


def _call(fn, *args):
    try:
        fn(*args)
    except Exception as e:             # noqa: BLE001 - the exception is what is compared
        return e
    raise AssertionError(f"{fn} did not raise")


def _user_frames(e: BaseException) -> list[tuple[str, int]]:
    return [(f.name, f.lineno) for f in traceback.extract_tb(e.__traceback__) if f.filename == THIS_FILE]


def _chain(e: BaseException | None) -> list:
    out = []
    while e is not None and len(out) < 5:
        out.append((type(e), str(e), e.__suppress_context__))
        e = e.__cause__ or e.__context__
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", PROGRAMS, ids=[f.__name__ for f in PROGRAMS])
def test_user_frames_in_traceback(fresh_ember, fn, backend, capsys):
    compiled = ember.compile(fn, backend=backend)
    for _ in range(2):                  # the compiling call, then a cached one
        x = torch.randn(5)
        expected = _call(fn, x)
        actual = _call(compiled, x)
        assert type(actual) is type(expected) and str(actual) == str(expected)
        if expected is SHARED:
            assert actual is SHARED
        assert _chain(actual) == _chain(expected)
        frames = traceback.extract_tb(actual.__traceback__)
        ember_frames = [f"{f.filename}:{f.lineno} {f.name}" for f in frames
                        if f.filename.startswith("<ember") or f.filename.startswith(EMBER_DIR)]
        assert not ember_frames, f"ember's frames in the traceback: {ember_frames}"
        text = "".join(traceback.format_tb(actual.__traceback__))
        assert _user_frames(actual) == _user_frames(expected), text
        assert all(ln.strip() for ln in text.splitlines()), f"a blank underline in the traceback:\n{text}"


# -- errors raised at run time by an op inside a compiled graph --------------------------------------------
def pick(y, idx):
    return y[idx] * 2                   # the op that raises


def index_in_inlined_callee(x, idx):
    y = x + 1
    z = pick(y, idx)
    return z.sum()


def gather_out_of_range(x, idx):
    y = x.exp()
    return torch.gather(y, 0, idx) + 1


def index_after_break(x, idx):
    y = x + 1
    print("break")
    y = y * 2
    return pick(y, idx) - 1


RUNTIME_PROGRAMS = [index_in_inlined_callee, gather_out_of_range, index_after_break]
# the ember backend's C++ kernels do not check indices (no error, an out-of-bounds read): not run there
RUNTIME_BACKENDS = ["ember", "aot_eager", "eager"]


@pytest.mark.parametrize("backend", RUNTIME_BACKENDS)
@pytest.mark.parametrize("fn", RUNTIME_PROGRAMS, ids=[f.__name__ for f in RUNTIME_PROGRAMS])
def test_graph_op_error_shows_user_line(fresh_ember, fn, backend, capsys):
    compiled = ember.compile(fn, backend=backend)
    for _ in range(2):
        x, idx = torch.randn(5), torch.tensor([1, 7])
        expected = _call(fn, x, idx)
        actual = _call(compiled, x, idx)
        assert type(actual) is type(expected) and str(actual) == str(expected)
        frames = traceback.extract_tb(actual.__traceback__)
        assert not [f for f in frames if f.filename.startswith("<ember") or f.filename.startswith(EMBER_DIR)]
        text = "".join(traceback.format_tb(actual.__traceback__))
        assert _user_frames(actual) == _user_frames(expected), text
        assert all(ln.strip() for ln in text.splitlines()), f"a blank underline in the traceback:\n{text}"


def test_error_of_embers_own_code_keeps_its_frames(fresh_ember):
    """An exception raised by ember's code (a bug, not the program's error) keeps ember's frames: the report
    needs them. Stood in for by a function whose code claims a file in ember's package."""
    ns: dict = {}
    exec(compile("def boom(x):\n    raise KeyError('a bug in ember')\n",   # noqa: S102 - fixed test source
                 str(Path(EMBER_DIR) / "capture" / "not_a_real_module.py"), "exec"), ns)
    boom = ns["boom"]

    def fn(x):
        return boom(x + 1)

    e = _call(ember.compile(fn, backend="eager"), torch.randn(3))
    frames = traceback.extract_tb(e.__traceback__)
    assert type(e) is KeyError
    assert any(f.filename.startswith("<ember") for f in frames), frames
    assert frames[-1].name == "boom"
