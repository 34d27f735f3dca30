"""Builtin iterators that existed before the call (a resumed frame's ``for`` loop over a module list).

After a graph break inside ``for i, l in enumerate(self.layers)`` the continuation finds the live
``enumerate``/``tuple_iterator`` on its stack. It is read without being consumed, through ``__reduce__``
(``(iter, (seq,), index)`` for list, tuple and range iterators, ``(reversed, (list,), index)``,
``(enumerate, (inner, count))``, ``(zip, (inner, ...))``), and traced as a ``LiveIterVar`` over the remaining
items. Guards pin what the trace read: the type, the sequence (wrapped as any value) and the position. The
real iterator is left untouched by the trace; the glue then calls ``next`` on it as many times as the trace
did (the exhausting call included), so code after the compiled part sees exactly eager's state.
Other iterators (generators, map, filter, dict and set iterators) are not read here: they stay graph breaks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .sources import CallSource, ItemSource, Source
from .values import Const, SeqIterVar, TupleVar, Value

_LIST_IT = type(iter([]))
_TUPLE_IT = type(iter(()))
_RANGE_IT = type(iter(range(0)))
_REV_IT = type(reversed([]))
_LEAVES = (_LIST_IT, _TUPLE_IT, _RANGE_IT, _REV_IT)
_END = object()


@dataclass(frozen=True, slots=True)
class ReduceSource(Source):
    """``base.__reduce__()``: the state of a builtin iterator, read without advancing it."""
    base: Source

    def _expr(self, cg):
        return f"{self.base.expr(cg)}.__reduce__()"

    def name_hint(self):
        return f"{self.base.name_hint()}_state"


def advance(it: Any, n: int) -> None:
    """Glue: the ``next`` calls the compiled code made on a live iterator, replayed on the real one."""
    for _ in range(n):
        if next(it, _END) is _END:
            return


class LiveIterVar(SeqIterVar):
    """A live builtin iterator. ``direct`` counts the steps the trace took on it (the glue replays them);
    steps taken by an enclosing live ``enumerate``/``zip`` (``pull``) are replayed through that one."""
    __slots__ = ("direct", "pull_fn", "real_type")

    def __init__(self, source: Source, pull_fn, real_type: type):
        self.direct = 0
        self.pull_fn = pull_fn
        self.real_type = real_type
        super().__init__([], real_type.__name__)
        self.source = source

    def python_type(self):
        return self.real_type

    def _items(self):
        while True:
            self.direct += 1
            x = self.pull_fn()
            if x is _END:
                return
            yield x

    def pull(self):
        return self.pull_fn()


def remaining(it: Any) -> Any:
    """The items a tuple or range iterator has left (a tuple slice or a range), read without advancing it."""
    state = it.__reduce__()
    return state[1][0][state[2]:] if len(state) == 3 else ()




def _relative_leaf(d, it: Any, src: Source, g) -> LiveIterVar:
    """A tuple or range iterator: item ``j`` of the rest is wrapped (and guarded) only when the trace reads it."""
    # guards and item sources relative to the position: one entry serves every position that reads the same
    # items (a resumed loop body over a module list compiles once)
    rsrc = CallSource(remaining, src, "_rest")
    g.cg.hoist(rsrc)
    rest = remaining(it)
    pos = [0]

    def pull():
        j = pos[0]
        if j is None:
            return _END
        e = rsrc.expr(g.cg)
        if j >= len(rest):
            g.add(f"len({e}) == {j}", f"{g.cg.plain(src)} has {j} items left")
            pos[0] = None
            return _END
        g.add(f"len({e}) > {j}", f"{g.cg.plain(src)} has more than {j} items left")
        pos[0] = j + 1
        return d.wrap(rest[j], ItemSource(rsrc, j))
    return LiveIterVar(src, pull, type(it))


def _leaf(d, it: Any, src: Source, g) -> LiveIterVar:
    if type(it) in (_TUPLE_IT, _RANGE_IT):
        return _relative_leaf(d, it, src, g)
    state = it.__reduce__()
    rsrc = ReduceSource(src)
    g.cg.hoist(rsrc)
    e = rsrc.expr(g.cg)
    if len(state) == 2:     # exhausted: CPython dropped the sequence
        g.add(f"len({e}) == 2", f"{g.cg.plain(src)} is exhausted")
        return LiveIterVar(src, lambda: _END, type(it))
    seq, idx = state[1][0], state[2]
    g.add(f"len({e}) == 3 and {e}[2] == {idx}", f"{g.cg.plain(src)} is at index {idx}")
    seqv = d.wrap(seq, ItemSource(ItemSource(rsrc, 1), 0))    # a list's live items: CPython reads by index
    pos = [idx]
    reverse = type(it) is _REV_IT

    def pull():
        items = seqv.items
        i = pos[0]
        if i is None or i < 0 or i >= len(items):
            pos[0] = None       # exhausted for good, as CPython drops the sequence (items appended later unseen)
            return _END
        pos[0] = i - 1 if reverse else i + 1
        return items[i]
    return LiveIterVar(src, pull, type(it))


def wrap(d, it: Any, src: Source | None, g) -> Value | None:
    """The traced value for a live builtin iterator at ``src``, or None (not readable without side effects)."""
    t = type(it)
    if g is None or src is None or not (t in _LEAVES or t is enumerate or t is zip):
        return None
    state = it.__reduce__()
    if t is not zip and t is not enumerate:
        g.type_match(src, t)
        v = _leaf(d, it, src, g)
    else:
        inners = list(state[1]) if t is zip else [state[1][0]]
        if t is zip and len(state) == 3 and state[2]:
            return None         # zip(strict=True): its length check is not modelled
        if not all(type(x) in _LEAVES or type(x) in (enumerate, zip) for x in inners):
            return None
        g.type_match(src, t)
        rsrc = ReduceSource(src)
        g.cg.hoist(rsrc)
        g.add(f"len({rsrc.expr(g.cg)}[1]) == {len(state[1])}", f"{g.cg.plain(src)} has {len(state[1])} parts")
        subs = [d.wrap(x, ItemSource(ItemSource(rsrc, 1), i)) for i, x in enumerate(inners)]
        if not all(isinstance(s, LiveIterVar) for s in subs):
            return None
        v = LiveIterVar(src, _zip_pull(subs) if t is zip else _enum_pull(d, subs[0], state[1][1], rsrc),
                        t)
    d.side_effects.append(v)
    return v


def _zip_pull(subs: list):
    def pull():
        parts = []
        for s in subs:
            x = s.pull()
            if x is _END:
                return _END
            parts.append(x)
        return TupleVar(parts)
    return pull


def _enum_pull(d, sub, count: int, rsrc: Source):
    """``enumerate``'s count is a number of the trace (wrapped as any int): item ``k`` is ``count + k``."""
    csrc = ItemSource(ItemSource(rsrc, 1), 1)
    if type(count) is int and count < 2:    # 0 and 1 are specialized (a resumed frame's changing small int
        d.guards.equals(csrc, count)         # would otherwise stay opaque to the trace)
        count_v = Const(count)
    else:
        count_v = d.wrap(count, csrc)
    n = [0]

    def pull():
        x = sub.pull()
        if x is _END:
            return _END
        k = n[0]
        n[0] += 1
        return TupleVar([count_v if k == 0 else d.binary(None, "+", count_v, Const(k)), x])
    return pull
