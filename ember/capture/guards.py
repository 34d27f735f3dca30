"""Guards: the facts a trace relied on, and the Python function generated to check them on every call.

Each guard is one boolean expression over sources, kept in the order the trace discovered it (a type check
always precedes the attribute reads it protects). Torch-free: the torch plugin adds its tensor and
global-state guards through ``GuardSet.add``.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..emit import object_name
from .sources import Codegen, Source, literal


_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None))


def _immutable(v: object) -> bool:
    """A value whose identity implies its type and value for as long as a reference to it is held."""
    if type(v) is tuple:
        return all(_immutable(x) for x in v)  # type: ignore[union-attr]
    return type(v) in _IMMUTABLE


@dataclass(frozen=True, slots=True)
class Guard:
    expr: str       # Python expression, True when the fact still holds
    reason: str     # readable: what was assumed and where it came from
    number_at: str | None = None    # for a guarded int/float: its source (a candidate for automatic dynamic)
    tag: object = None              # what a plugin knows it by (to drop it once the trace shows it is not needed)


class GuardSet:
    def __init__(self, cg: Codegen) -> None:
        self.cg = cg
        self.guards: list[Guard] = []
        self._seen: set[str] = set()
        self._assigned_at = 0      # cg.assigned entries already looked at

    def add(self, expr: str, reason: str, number_at: str | None = None, tag: object = None) -> None:
        if expr in self._seen:
            return
        self._seen.add(expr)
        if ":=" in expr:
            # the same fact checked later reads the hoisted name: ``'a' not in (__s8 := o.__dict__)`` then
            # ``'a' not in __s8``; remember this one's plain form so that the later one is dropped (this one
            # stays: it assigns the name)
            self._seen.add(self._plain_form(expr))
        self.guards.append(Guard(expr, reason, number_at, tag))

    def _plain_form(self, expr: str) -> str:
        """``expr`` with each first rendering of a hoisted source made since the last guard replaced by its
        name (outermost first: an outer rendering contains the inner ones it made)."""
        new = self.cg.assigned[self._assigned_at:]
        self._assigned_at = len(self.cg.assigned)
        for text, name in reversed(new):
            expr = expr.replace(text, name)
        return expr

    def drop(self, which: Callable[[Guard], bool]) -> None:
        """Remove the guards ``which`` selects. Only for guards that assign no name later ones read."""
        self.guards = [g for g in self.guards if not which(g)]

    # -- common kinds ----------------------------------------------------------------------------------
    def type_match(self, src: Source, t: type) -> None:
        self.cg.hoist(src)        # what a type is checked of is read further (attributes, items): once per call
        self.add(f"type({src.expr(self.cg)}) is {self.cg.bind(t, t.__name__)}",
                 f"type of {self.cg.plain(src)} is {t.__qualname__}")

    def id_match(self, src: Source, obj: object) -> None:
        name = object_name(obj)
        self.add(f"{src.expr(self.cg)} is {self.cg.bind(obj, name)}", f"{self.cg.plain(src)} is the same {name}")

    def _same_or(self, e: str, v: object, check: str) -> str:
        """``check``, preceded by an identity test against ``v`` itself: an immutable value read from the same
        object on every call (a conv's stride tuple, a norm's eps) is usually that very object, and ``is``
        costs one comparison where the check compares types and values (a conv's five hyperparameters took
        0.8 us per call, the identity tests 0.2). Another object, even an equal one, takes the full check."""
        if not _immutable(v):
            return check
        return f"({e} is {self.cg.bind(v, 'const')} or ({check}))"

    def equals(self, src: Source, v: object) -> None:
        e, plain = src.expr(self.cg), self.cg.plain(src)
        if v is None or type(v) is bool:
            self.add(f"{e} is {v!r}", f"{plain} is {v!r}")
        elif type(v) is complex or (type(v) is float and (math.isnan(v) or v == 0)):
            # == cannot tell -0.0 from 0.0 and is never true for nan: compare the exact repr instead
            t = type(v)
            self.add(self._same_or(e, v, f"type({e}) is {self.cg.bind(t, t.__name__)} and repr({e}) == {repr(v)!r}"),
                     f"{plain} is {v!r}")
        else:
            t = type(v)
            self.add(self._same_or(e, v, f"type({e}) is {self.cg.bind(t, t.__name__)} and {e} == {literal(v, self.cg)}"),
                     f"{plain} == {v!r}", plain if t in (int, float) else None)

    def tuple_of_constants(self, src: Source, v: tuple) -> None:
        """``src`` is a tuple equal to ``v`` item by item, types included (one check instead of one per item)."""
        self.cg.hoist(src)
        first, e = src.expr(self.cg), src.expr(self.cg)       # the first rendering assigns, the next reuse
        types = tuple(type(x) for x in v)
        if len(v) <= 4:     # item by item: 4x cheaper than building the tuple of types (a conv's stride, padding)
            item_types = " and ".join(f"type({e}[{i}]) is {self.cg.bind(t, t.__name__)}" for i, t in enumerate(types))
        else:
            item_types = f"tuple(map(type, {e})) == {self.cg.bind(types, 'types')}"
        # the first rendering assigns the hoisted name: whatever reads it first must use it (the identity test,
        # where ``_same_or`` adds one)
        head = e if _immutable(v) else first
        check = f"type({head}) is {self.cg.bind(tuple, 'tuple')} and {e} == {literal(v, self.cg)}" + (
            f" and {item_types}" if v else "")
        self.add(self._same_or(first, v, check), f"{self.cg.plain(src)} == {v!r}")

    def length(self, src: Source, n: int, owner: type | None = None) -> None:
        """``len(src) == n``; through ``owner.__len__`` where the class overrides ``__len__``."""
        e = src.expr(self.cg)
        fn = "len" if owner is None else f"{self.cg.bind(owner, owner.__name__)}.__len__"
        self.add(f"{fn}({e}) == {n}", f"len({self.cg.plain(src)}) == {n}")

    def dict_keys(self, src: Source, keys: list) -> None:
        self.cg.hoist(src)        # its items are guarded next
        e = src.expr(self.cg)
        self.add(f"tuple({e}) == {literal(tuple(keys), self.cg)}", f"keys of {self.cg.plain(src)} are {keys!r}")

    def source(self, fn_name: str, params: str) -> str:
        body = "\n        and ".join(g.expr for g in self.guards) or "True"
        return f"def __guard_{fn_name}({params}):\n    try:\n        return ({body})\n    except Exception:\n        return False\n"
