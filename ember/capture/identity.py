"""Identity of existing objects, and the guards that keep an answer about it true.

A trace that asks whether two values are one object (``is``, ``is not``, object's default ``==``, ``in`` on
a list, ``id()``, a dict or set keyed by identity) learns a fact about the objects passed in, not only about
their types. The same object reached through two sources is one value already (``SymbolicDomain.wrap``
guards ``a is b``); what these helpers add is the other half: two distinct objects hold only while they stay
distinct (``a is not b``), and ``id(x)`` holds only for an object at that address (``id(x) == N``, an int: no
reference is kept, and any object found there later has that id, so the number the trace returned is still
right).
"""
from __future__ import annotations

from typing import Any

from .interpreter import NULL
from .values import TupleVar, Value, is_immutable


def existing_object(d, v: Value) -> Any:
    """The object that existed before the call that ``v`` stands for (a tensor input too), or NULL."""
    ro = v.real_object()
    if ro is NULL:
        ro = d.real_of.get(id(v), NULL)
    return ro


def identical(d, a: Value, b: Value) -> bool:
    """``a is b``; where both are distinct existing objects found at sources, guards that they stay
    distinct."""
    if a is b:
        return True
    ra, rb = existing_object(d, a), existing_object(d, b)
    if ra is NULL or rb is NULL or isinstance(a, TupleVar) or isinstance(b, TupleVar):
        return False
    if ra is rb:
        return True
    if a.source is not None and b.source is not None and not is_immutable(ra) and not is_immutable(rb):
        ea, eb = a.source.expr(d.cg), b.source.expr(d.cg)
        d.guards.add(f"{ea} is not {eb}",
                     f"{d.cg.plain(a.source)} is not the same object as {d.cg.plain(b.source)}")
    return False


def guard_address(d, v: Value, obj: Any) -> None:
    """The trace relied on ``obj``'s identity (its id, its place in a dict keyed by identity): hold only while
    ``v``'s source is an object at that address."""
    if v.source is not None and not is_immutable(obj):
        d.guards.add(f"id({v.source.expr(d.cg)}) == {id(obj)}",
                     f"{d.cg.plain(v.source)} is the same object (id {id(obj)})")
