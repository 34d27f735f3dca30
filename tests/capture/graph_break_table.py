"""The table machinery of test_graph_breaks.py (issue 3): argument specs, ``BreakProgram`` and ``@breaks``.

Every program in the table graph-breaks at least once. Arguments are written as specs: the ones of
torch_program_table.py (``T``, ``P``, ``I``, ``B``) plus

- ``Alt(*shape)``: a random tensor whose values are all positive on even runs and all negative on odd runs, so
  a data-dependent branch on it takes both ways over the runs;
- ``S()``: a fresh ``Rec`` (a plain object with ``log = []``, ``d = {}``, ``n = 0`` and a seeded
  ``random.Random`` as ``rng``) that the program mutates; its attributes (and the rng's state) after the call
  must equal eager's.

Where a program breaks is written in its source as a tag comment ``# @name`` at the end of the line; the
harness finds the line (``tag_lines``) and expects ``fullgraph=True`` to raise ``ember.Unsupported`` whose
innermost ``user_stack`` frame is ``file:line`` of the ``fg`` tag (with ``stack``: whose frames in the test
file are the lines of those tags, outermost first).

``raises``: the program raises this exception out of the call (eager and compiled alike); type, message and
the side effects up to the raise must match.
"""
from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from tests.capture.torch_program_table import B, I, P, T, materialize  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class Alt:
    """A random tensor, positive on even runs and negative on odd runs."""
    shape: tuple
    dtype: torch.dtype = torch.float32

    def __init__(self, *shape, dtype=torch.float32):
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)

    def make(self, g, run: int):
        v = torch.rand(self.shape, generator=g, dtype=torch.float64) + 0.25
        return (v if run % 2 == 0 else -v).to(self.dtype)


class Rec:
    """Python-side state a program mutates (side effects the compiled run must reproduce)."""

    def __init__(self):
        self.log: list = []
        self.d: dict = {}
        self.n = 0
        self.rng = random.Random(7)

    def __repr__(self):
        return f"Rec(log={self.log!r}, d={self.d!r}, n={self.n!r})"


@dataclass(frozen=True)
class S:
    """A fresh ``Rec``."""

    def make(self):
        return Rec()


def make_args(spec, g, run: int):
    if isinstance(spec, Alt):
        return spec.make(g, run)
    if isinstance(spec, S):
        return spec.make()
    if isinstance(spec, list):
        return [make_args(s, g, run) for s in spec]
    if isinstance(spec, tuple):
        return tuple(make_args(s, g, run) for s in spec)
    if isinstance(spec, dict):
        return {k: make_args(v, g, run) for k, v in spec.items()}
    return materialize(spec, g)


@dataclass
class BreakProgram:
    name: str
    fn: Callable
    args: tuple
    kwargs: dict
    fg: str                     # tag of the line fullgraph=True must report (innermost frame)
    stack: tuple = ()           # tags of the whole user stack, outermost first (optional)
    graphs: int | None = None   # explain().graph_count on the first run's inputs (None: not checked)
    breaks: int | None = None   # explain().graph_break_count (None: not checked)
    grad: bool = True
    runs: int = 2
    module: bool = False
    globals_: tuple = ()        # module globals the program mutates (reset before, compared after each run)
    tol: dict = field(default_factory=dict)
    cached: bool = True         # later calls compile nothing new (with Alt arguments: from run 3 on)
    raises: type | None = None  # the exception the program raises out of the call
    ops: tuple = ()             # op names that must appear in a captured graph (tensor work stays compiled)
    full: str | None = None     # fullgraph=True's break where it differs from ``fg`` (.item() is captured
    #                             under fullgraph, as torch.compile does), "" where fullgraph compiles it all

    def __repr__(self):
        return self.name


PROGRAMS: list[BreakProgram] = []


def breaks(*args: Any, fg: str, stack: tuple = (), graphs: int | None = None, nbreaks: int | None = None,
           grad: bool = True, runs: int | None = None, globals_: tuple = (), tol: dict | None = None,
           cached: bool = True, raises: type | None = None, ops: tuple = (), full: str | None = None,
           **kwargs: Any):
    """Register a breaking program. ``fg``: tag of its first break's line; ``graphs``/``nbreaks``: the counts
    ``ember.explain`` must report; ``grad=False`` for programs whose outputs are not differentiable or that
    mutate their inputs; ``runs`` defaults to 2 (4 when an ``Alt`` argument makes the branch alternate);
    ``cached=False`` where later calls may legitimately compile again (values the Python logic depends on);
    ``ops``: names of ops that explain() must show in some captured graph."""
    def deco(fn):
        alt = any(isinstance(a, Alt) for a in _flat((args, kwargs)))
        PROGRAMS.append(BreakProgram(fn.__name__, fn, args, kwargs, fg, tuple(stack), graphs, nbreaks, grad,
                                     runs or (4 if alt else 2), isinstance(fn, type), tuple(globals_),
                                     tol or {}, cached, raises, tuple(ops), full))
        return fn
    return deco


def _flat(spec):
    if isinstance(spec, (list, tuple)):
        return [x for s in spec for x in _flat(s)]
    if isinstance(spec, dict):
        return [x for s in spec.values() for x in _flat(s)]
    return [spec]


_TAG = re.compile(r"#\s*@([A-Za-z_][\w]*)\s*$")


def tag_lines(path: str) -> dict[str, int]:
    """``{tag: line number}`` for every ``# @tag`` comment of a source file (each tag must be unique)."""
    out: dict[str, int] = {}
    with open(path) as fh:
        for i, line in enumerate(fh, 1):
            m = _TAG.search(line)
            if m:
                assert m.group(1) not in out, f"tag @{m.group(1)} used twice in {path}"
                out[m.group(1)] = i
    return out
