"""Rule tables keyed by value class: how each kind of symbolic value takes part in an operation.

One table per operation (``GETATTR``, ``CALL``, ...); a rule is a small function registered for a value class
and found through the class's MRO, so the torch plugin adds rules for its own values without touching these
modules. A missing rule is an ``Unsupported`` that names the operation and the value."""
from __future__ import annotations

from typing import Callable


class Rules:
    def __init__(self, op: str) -> None:
        self.op = op
        self.table: dict[type, Callable] = {}
        self._cache: dict[type, Callable | None] = {}

    def register(self, *classes: type):
        def deco(fn: Callable) -> Callable:
            for c in classes:
                self.table[c] = fn
            self._cache.clear()
            return fn
        return deco

    def find(self, cls: type) -> Callable | None:
        try:
            return self._cache[cls]
        except KeyError:
            pass
        fn = None
        for k in cls.__mro__:
            fn = self.table.get(k)
            if fn is not None:
                break
        self._cache[cls] = fn
        return fn


GETATTR = Rules("getattr")       # (d, f, v, name) -> Value
SETATTR = Rules("setattr")       # (d, f, v, name, value|NULL) -> None
CALL = Rules("call")             # (d, f, v, args, kwargs) -> Value
METHOD = Rules("method")         # (d, f, recv, name, args, kwargs) -> Value   (for MethodOf receivers)
GETITEM = Rules("getitem")       # (d, f, v, key) -> Value
SETITEM = Rules("setitem")       # (d, f, v, key, value|NULL) -> None
ITER = Rules("iter")             # (d, f, v) -> iterator Value
LEN = Rules("len")               # (d, f, v) -> int
TRUTH = Rules("truth")           # (d, f, v) -> bool
BINARY = Rules("binary")         # (d, f, op, a, b) -> Value | NotImplemented
UNARY = Rules("unary")           # (d, f, op, v) -> Value
COMPARE = Rules("compare")       # (d, f, op, a, b) -> Value | NotImplemented
RECONSTRUCT = Rules("reconstruct")  # (glue, v) -> str  (Python expression rebuilding the value after the call)
