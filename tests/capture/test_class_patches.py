"""A method defined on (or replaced in) a plain object's class after the compile is what the next cached call
runs, as eager does.

Capture decides some calls on the class alone: which dunder ``str(o)``, ``format(o)``, ``reversed(o)`` and
``callable(o)`` reach, and which ``__call__`` an object call inlines. Each such decision is guarded on the
class's dict (``lookups.resolved_type_attr``); every row below patches the class between cached calls of one
compiled function and checks compiled == eager on fresh inputs before and after. (The module-tree versions,
``forward``/``__call__`` of module classes, are in ``test_module_tree_mutations.py``.)
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repo root, for `tests.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ember  # noqa: E402
from tests.capture.harness import assert_same  # noqa: E402


@dataclass
class Case:
    name: str
    make: Callable      # () -> (fn(x), patch()): fresh classes per case, so patches stay in it


def _str_added():
    class S:
        def __repr__(self):
            return "s"
    o = S()

    def fn(x):
        return x + len(str(o))
    return fn, lambda: setattr(S, "__str__", lambda self: "a longer string")


def _format_added():
    class S:
        def __repr__(self):
            return "s"
    o = S()

    def fn(x):
        return x * len(f"{o}")
    return fn, lambda: setattr(S, "__format__", lambda self, spec: "formatted")


def _reversed_added():
    class Seq:
        def __len__(self):
            return 3

        def __getitem__(self, i):
            if i >= 3:
                raise IndexError(i)
            return float(i + 1)
    q = Seq()

    def fn(x):
        for i, v in enumerate(reversed(q)):
            x = x * (i + 2) + v
        return x
    return fn, lambda: setattr(Seq, "__reversed__", lambda self: iter([7.0, 8.0, 9.0]))


def _call_added():
    class C:
        pass
    o = C()

    def fn(x):
        return x + 1 if callable(o) else x - 1
    return fn, lambda: setattr(C, "__call__", lambda self: None)


def _call_replaced():
    class C:
        def __call__(self, x):
            return x * 2
    o = C()

    def fn(x):
        return o(x) + 1
    return fn, lambda: setattr(C, "__call__", lambda self, x: x - 5)


def _repr_replaced():       # read through getattr: guarded before this change too (a control row)
    class S:
        def __repr__(self):
            return "s"
    o = S()

    def fn(x):
        return x + len(repr(o))
    return fn, lambda: setattr(S, "__repr__", lambda self: "a longer repr")


CASES = [Case(f.__name__.lstrip("_"), f) for f in
         (_str_added, _format_added, _reversed_added, _call_added, _call_replaced, _repr_replaced)]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_class_patched_after_the_compile_is_what_runs(case, fresh_ember):
    fn, patch = case.make()
    f = ember.compile(fn)
    for step in range(4):
        if step == 2:
            patch()
        x = torch.randn(3, generator=torch.Generator().manual_seed(step))
        assert_same(f(x), fn(x), path=f"step {step} ({case.name})")
