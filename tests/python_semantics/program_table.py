"""The table machinery behind the Python-semantics suite (torch-free, numpy-free).

A program is a plain function plus the argument sets to call it with. Each ``programs_*.py`` module builds a
``Table`` and registers its functions with ``@T.case(...)``; ``programs.py`` collects them into ``TABLE``.

    T = Table("basic")

    @T.case((1, 2), (3, 4), A(5, b=6))
    def add(a, b):
        return a + b

An argument set is a tuple of positional arguments or ``A(*args, **kwargs)``. ``globals=("NAME", ...)``
names the module globals a program reads-and-writes: the harness restores them before each run and compares
them after.
``check_message=False`` is for exceptions whose text CPython's C argument binder writes (wrong-arity calls):
there only the exception type must match, in every mode.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from types import FunctionType


class A:
    """One argument set with keyword arguments: ``A(1, 2, key=3)``."""

    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs

    def __repr__(self):
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"A({', '.join(parts)})"


@dataclass
class Program:
    fn: FunctionType
    group: str
    argsets: list[tuple[tuple, dict]]
    global_names: tuple[str, ...] = ()
    check_message: bool = True
    initial_globals: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.group}.{self.fn.__name__}"

    def reset_globals(self) -> None:
        """Restore the program's mutable globals. Containers are refilled in place (their identity is kept, as
        across real calls); anything else is rebound to a fresh copy of its initial value."""
        g = self.fn.__globals__
        for name, init in self.initial_globals.items():
            fresh = copy.deepcopy(init)
            cur = g.get(name)
            if type(cur) is type(fresh) and isinstance(fresh, list):
                cur[:] = fresh
            elif type(cur) is type(fresh) and isinstance(fresh, (dict, set)):
                cur.clear()
                cur.update(fresh)
            else:
                g[name] = fresh

    def snapshot_globals(self) -> dict:
        g = self.fn.__globals__
        return {name: copy.deepcopy(g.get(name, "<unbound>")) for name in self.global_names}


class Table:
    def __init__(self, group: str):
        self.group = group
        self.programs: list[Program] = []

    def case(self, *argsets, globals: tuple[str, ...] = (), check_message: bool = True):
        if not argsets:
            raise ValueError("a program needs at least one argument set; use () for no arguments")
        norm = []
        for a in argsets:
            if isinstance(a, A):
                norm.append((a.args, a.kwargs))
            elif isinstance(a, tuple):
                norm.append((a, {}))
            else:
                raise TypeError(f"argument set must be a tuple or A(...), got {a!r}")

        def deco(fn):
            g = fn.__globals__
            missing = [n for n in globals if n not in g]
            if missing:
                raise NameError(f"{fn.__name__}: globals {missing} are not defined at registration")
            self.programs.append(Program(fn, self.group, norm, tuple(globals), check_message,
                                         {n: copy.deepcopy(g[n]) for n in globals}))
            return fn
        return deco
