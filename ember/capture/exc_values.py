"""Exceptions that carry traced values: ``StopIteration(t * 5)`` from a generator's ``return``, or a builtin
exception class called with a tensor or a new object (``raise KeyError(obj)``).

The interpreter moves user exceptions as real objects (``UserException.exc``). One whose arguments are not
Python constants is made without arguments, and its traced arguments are kept beside it: ``ExcVar`` is the
value the trace sees when it catches it (``wrap_exception``), and answers ``args`` (and ``value`` for a
StopIteration) from them. Anything else that would read the real object's arguments (``str(e)``, leaving
compiled code) is reported rather than computed from the argument-less object. Torch-free.
"""
from __future__ import annotations

from typing import Any

from . import rules as R
from .values import Const, TupleVar, Value

_CHAIN = ("__cause__", "__context__")


class ExcVar(Value):
    """A builtin exception object made by the trace whose arguments are traced values (``attrs``)."""
    __slots__ = ("exc", "attrs")

    def __init__(self, exc: BaseException, attrs: dict[str, Value]):
        super().__init__(None)
        self.exc = exc
        self.attrs = attrs

    def python_type(self):
        return type(self.exc)

    def describe(self):
        return f"{type(self.exc).__name__} carrying traced values"


def is_builtin_exception(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, BaseException) and cls.__module__ == "builtins"


def make(d, cls: type, args: list) -> ExcVar:
    """``cls(*args)`` for a builtin exception class and non-constant ``args``."""
    exc = cls()
    attrs: dict[str, Value] = {"args": TupleVar(list(args))}
    if issubclass(cls, StopIteration):
        attrs["value"] = args[0] if args else Const(None)
    v = ExcVar(exc, attrs)
    table = d.__dict__.setdefault("exc_values", {})
    table[id(exc)] = v          # the ExcVar keeps ``exc`` alive: its id is not reused while the trace runs
    return v


def lookup(d, exc: BaseException) -> ExcVar | None:
    """The ExcVar of a real exception the trace made with traced arguments, when it is caught again."""
    table = d.__dict__.get("exc_values")
    return table.get(id(exc)) if table else None


@R.GETATTR.register(ExcVar)
def _exc_getattr(d, f, v: ExcVar, name: str) -> Value:
    if name in v.attrs:
        return v.attrs[name]
    if name == "__class__":
        return Const(type(v.exc))
    if name in _CHAIN:
        other = getattr(v.exc, name)
        return Const(None) if other is None else d.wrap_exception(other)
    raise d.unsupported(f, f"reading {name!r} of a {v.describe()}",
                        "read e.args or e.value, or make the exception outside the compiled function")
