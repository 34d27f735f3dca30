"""Differential Python-semantics tests: ember's interpreter against CPython on every program of
``programs.TABLE``.

Three tests per program, each comparing with a direct CPython call on fresh deep copies of the arguments:
  - concrete: ``run_concrete`` (every value real); the exception type and message must match;
  - symbolic: ``symbolic_call`` (trace, generate glue, run it; native fallback allowed);
  - compiled: ``compile_python`` called on every argument set in turn and then on the first again, with module
    globals carried across the calls as they would be, so that stale guards show up as wrong results.
Compared: the return value (equal, and of the same type, recursively), the raised exception type, the
arguments after the call (side effects), the program's mutable globals after the call, and printed output.
No torch, no numpy: this suite runs on every supported CPython.
"""
from __future__ import annotations

import contextlib
import copy
import enum
import io
import math
import types
from dataclasses import dataclass

import pytest
from program_table import Program
from programs import TABLE

from ember.capture import compile_python, run_concrete, symbolic_call


@dataclass
class Outcome:
    raised: type | None      # the exception type, or None when the call returned
    value: object            # the return value, or str(exception)
    state: object            # (args, kwargs) after the call
    globals: dict            # the program's mutable globals after the call
    stdout: str


def run(call, program: Program, args: tuple, kwargs: dict) -> Outcome:
    a, k = copy.deepcopy((args, kwargs))        # one deepcopy keeps aliasing between arguments
    out = io.StringIO()
    raised = None
    with contextlib.redirect_stdout(out):
        try:
            value = call(program.fn, a, k)
        except Exception as e:  # noqa: BLE001 - recorded and compared, never ignored
            raised, value = type(e), str(e)
    # copy now: a later globals reset refills containers in place and would change what we hold
    value, state = copy.deepcopy((value, (a, k)))
    return Outcome(raised, value, state, program.snapshot_globals(), out.getvalue())


def native(fn, a, k):
    return fn(*a, **k)


def concrete(fn, a, k):
    return run_concrete(fn, *a, **k)


def symbolic(fn, a, k):
    return symbolic_call(fn, *a, **k)


_IDENTITY_TYPES = (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType, enum.Enum)


def difference(a, b, path: str) -> str | None:
    """Where ``b`` differs from the reference ``a`` (values and types, recursively), or None."""
    if type(a) is not type(b):
        return f"{path}: type {type(b).__name__} ({b!r}), CPython gives {type(a).__name__} ({a!r})"
    if isinstance(a, float):
        if math.isnan(a) and math.isnan(b):
            return None
        if a == b and math.copysign(1.0, a) == math.copysign(1.0, b):
            return None
        return f"{path}: {b!r}, CPython gives {a!r}"
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: length {len(b)} ({b!r}), CPython gives length {len(a)} ({a!r})"
        for i, (x, y) in enumerate(zip(a, b)):
            d = difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(a, dict):
        d = difference(list(a), list(b), f"{path}.keys()")   # insertion order is observable
        if d:
            return d
        for key in a:
            d = difference(a[key], b[key], f"{path}[{key!r}]")
            if d:
                return d
        return None
    if isinstance(a, BaseException):
        return difference(a.args, b.args, f"{path}.args")
    if isinstance(a, _IDENTITY_TYPES) or not (hasattr(a, "__dict__") or hasattr(type(a), "__slots__")):
        return None if a == b else f"{path}: {b!r}, CPython gives {a!r}"
    # a user instance: compare its state rather than trusting (or lacking) its __eq__
    for slot in getattr(type(a), "__slots__", ()):
        d = difference(getattr(a, slot, "<unset>"), getattr(b, slot, "<unset>"), f"{path}.{slot}")
        if d:
            return d
    if hasattr(a, "__dict__"):
        return difference(vars(a), vars(b), f"{path}.__dict__")
    return None


def describe(o: Outcome) -> str:
    return f"raised {o.raised.__name__}({o.value!r})" if o.raised else f"returned {o.value!r}"


def assert_same(ref: Outcome, got: Outcome, what: str, check_message: bool) -> None:
    if ref.raised or got.raised:
        assert got.raised is ref.raised, f"{what}: CPython {describe(ref)}, ember {describe(got)}"
        if check_message:
            assert got.value == ref.value, f"{what}: exception message {got.value!r}, CPython {ref.value!r}"
    else:
        d = difference(ref.value, got.value, "result")
        assert d is None, f"{what}: {d}"
    d = difference(ref.state, got.state, "(args, kwargs) after the call")
    assert d is None, f"{what}: {d}"
    d = difference(ref.globals, got.globals, "globals after the call")
    assert d is None, f"{what}: {d}"
    assert got.stdout == ref.stdout, f"{what}: printed {got.stdout!r}, CPython printed {ref.stdout!r}"


def show(args: tuple, kwargs: dict) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"({', '.join(parts)})"


def one_by_one(call, program: Program, mode: str, check_message: bool) -> None:
    """Each argument set on its own, globals restored before every run."""
    try:
        for args, kwargs in program.argsets:
            program.reset_globals()
            ref = run(native, program, args, kwargs)
            program.reset_globals()
            got = run(call, program, args, kwargs)
            assert_same(ref, got, f"{mode} {program.name}{show(args, kwargs)}", check_message)
    finally:
        program.reset_globals()


PROGRAMS = pytest.mark.parametrize("program", TABLE, ids=[p.name for p in TABLE])


@PROGRAMS
def test_concrete(program: Program):
    one_by_one(concrete, program, "run_concrete", program.check_message)


@PROGRAMS
def test_symbolic(program: Program):
    one_by_one(symbolic, program, "symbolic_call", False)


@PROGRAMS
def test_compiled(program: Program):
    sequence = program.argsets + program.argsets[:1]
    try:
        program.reset_globals()
        refs = [run(native, program, a, k) for a, k in sequence]
        program.reset_globals()
        g = compile_python(program.fn)
        gots = [run(lambda fn, a, k: g(*a, **k), program, a, k) for a, k in sequence]
    finally:
        program.reset_globals()
    for i, ((a, k), ref, got) in enumerate(zip(sequence, refs, gots)):
        assert_same(ref, got, f"compile_python {program.name}, call {i + 1} of {len(sequence)}{show(a, k)}",
                    False)


def test_table_size():
    assert len(TABLE) >= 130, len(TABLE)
    assert all(p.argsets for p in TABLE)


@PROGRAMS
def test_reference_is_deterministic(program: Program):
    """The harness's own check: two CPython runs of a program agree, so a mismatch above is ember's."""
    one_by_one(native, program, "CPython twice", program.check_message)
