"""Hook handle ids: ``RemovableHandle.next_id`` read in a trace as a fresh counter value, not a constant.

Every hook registration (``module.register_forward_hook(fn)``, a tensor's, a global one) makes a
``torch.utils.hooks.RemovableHandle`` whose ``__init__`` takes ``id = RemovableHandle.next_id`` and increments
the class counter; the id is then the hook's key in the module's hook dict, and ``handle.remove()`` deletes
that key. A trace that read the counter as a constant guarded its value, so a forward that registers (and
removes) a hook on every call recompiled on every call, and the replay wrote a stale counter back.

What such a program relies on is only that the id is fresh: torch's counter only grows, so an id drawn in the
trace equals no key of an existing hook dict, and ids drawn in one trace differ by their order. Here a read
of the counter is a ``FreshIdVar``: the counter's value at entry (read once per call, no guard on its value)
plus the number of increments the trace made before it. As a dict key it is its own key (``hashkeys``),
equal only to itself; ``+ n`` moves it; the glue writes it back as ``entry value + n``. Any other use (a
comparison, printing it) reads the value: guarded then, as a plain class attribute is.
"""
from __future__ import annotations

from typing import Any

from torch.utils.hooks import RemovableHandle

from .. import rules as R
from ..sources import AttrSource, ConstSource, Source
from ..values import Const, NotConst, Value

# (class, attribute) pairs that are fresh-id counters: only ever incremented, their values used as keys
COUNTERS = {(RemovableHandle, "next_id")}


class FreshKey:
    """The dict key of a fresh id (distinct from every existing key, equal to the same id)."""
    __slots__ = ("offset",)

    def __init__(self, offset: int):
        self.offset = offset

    def __hash__(self):
        return hash((FreshKey, self.offset))

    def __eq__(self, other):
        return type(other) is FreshKey and other.offset == self.offset


class FreshIdVar(Value):
    """The counter ``owner.<base.name>``, read at ``base`` (its value at entry), plus ``offset``."""
    __slots__ = ("owner", "base", "offset")
    op_priority = 6         # above symbolic ints: ``1 + id`` is this value's rule

    def __init__(self, owner: type, base: AttrSource, offset: int):
        super().__init__(None)
        self.owner = owner
        self.base = base
        self.offset = offset

    def python_type(self):
        return int

    def as_python(self):
        raise NotConst(self)

    def own_hash_key(self) -> Any:
        return FreshKey(self.offset)

    def describe(self):
        return f"fresh hook id (counter at entry + {self.offset})"


def read_counter(d: Any, cls: type, name: str, source: Source | None) -> Value | None:
    """``cls.name`` as a ``FreshIdVar`` when it is a fresh-id counter; None otherwise."""
    if (cls, name) not in COUNTERS:
        return None
    src = AttrSource(source or ConstSource(id(cls), cls), name)
    d.guards.type_match(src, int)          # read once at entry (hoisted); its value is not guarded
    return FreshIdVar(cls, src, 0)


def settle(d: Any, f, v: FreshIdVar) -> Value:
    """The value itself, for a use that depends on it: the counter's value is guarded (a constant)."""
    base = d.wrap(getattr(v.owner, v.base.name), v.base)
    return d.binary(f, "+", base, Const(v.offset))


def _binary(d, f, op: str, a: Value, b: Value):
    fresh, other = (a, b) if type(a) is FreshIdVar else (b, a)
    if op in ("+", "+=") and type(other) is Const and type(other.value) is int:
        return FreshIdVar(fresh.owner, fresh.base, fresh.offset + other.value)
    if op in ("-", "-=") and fresh is a and type(b) is Const and type(b.value) is int:
        return FreshIdVar(fresh.owner, fresh.base, fresh.offset - b.value)
    sa = settle(d, f, a) if type(a) is FreshIdVar else a
    sb = settle(d, f, b) if type(b) is FreshIdVar else b
    return d.binary(f, op, sa, sb)


def _compare(d, f, op: str, a: Value, b: Value):
    if type(a) is FreshIdVar and type(b) is FreshIdVar and a.base == b.base and op in ("==", "!="):
        return Const((a.offset == b.offset) == (op == "=="))
    sa = settle(d, f, a) if type(a) is FreshIdVar else a
    sb = settle(d, f, b) if type(b) is FreshIdVar else b
    return d.compare(f, op, sa, sb)


def _reconstruct(glue, v: FreshIdVar) -> str:
    base = v.base.expr(glue.cg)
    return f"({base} + {v.offset})" if v.offset else base


R.BINARY.register(FreshIdVar)(_binary)
R.COMPARE.register(FreshIdVar)(_compare)
R.UNARY.register(FreshIdVar)(lambda d, f, op, v: d.unary(f, op, settle(d, f, v)))
R.TRUTH.register(FreshIdVar)(lambda d, f, v: d.truth(f, settle(d, f, v)))
R.RECONSTRUCT.register(FreshIdVar)(_reconstruct)
