"""The symbol table of one compiled graph: symbols, hints, ranges, sources and the relations relied on."""
from __future__ import annotations

import contextlib
import contextvars
import threading
from dataclasses import dataclass
from typing import Iterator

import sympy

from ..errors import DataDependent, EmberError
from .printer import to_python

_LOCATION: contextvars.ContextVar[str] = contextvars.ContextVar("ember_shapes_location", default="")


class SymbolicUnsupported(EmberError):
    """A stage cannot compile this graph with symbolic sizes; the caller compiles it with static sizes."""


@contextlib.contextmanager
def located(where: str) -> Iterator[None]:
    """Relations recorded inside this block say they were added at ``where`` (a user ``file:line``)."""
    token = _LOCATION.set(where)
    try:
        yield
    finally:
        _LOCATION.reset(token)


def current_location() -> str:
    return _LOCATION.get()


_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("ember_shapes_table", default=None)


@contextlib.contextmanager
def using(table: "SymbolTable | None") -> Iterator[None]:
    """Inside this block ``guard``/``size_hint`` answer from ``table`` (a backend compiling one graph)."""
    token = _ACTIVE.set(table)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_table() -> "SymbolTable | None":
    return _ACTIVE.get()


def size_hint(e):
    """``e`` (an int or a sympy size) at the active table's hints: for performance decisions and orderings
    whose result the caller then checks structurally (never a correctness decision by itself)."""
    if not isinstance(e, sympy.Basic) or not e.free_symbols:
        return int(e) if isinstance(e, sympy.Basic) else e
    table = _ACTIVE.get()
    if table is None:
        raise SymbolicUnsupported(f"ember.shapes: {e} has no hint outside a symbolic compile")
    return table.hint(e)


def guard(cond) -> bool:
    """A Python ``bool`` for a condition on sizes (``n > 1``, ``Eq(a, b)``): constant conditions as they are,
    symbolic ones decided by the active table from the hints and recorded as a relation unless the ranges
    imply them. Without an active table a symbolic condition raises ``SymbolicUnsupported``."""
    if isinstance(cond, (bool, sympy.logic.boolalg.BooleanAtom)):
        return bool(cond)
    table = _ACTIVE.get()
    if table is None:
        raise SymbolicUnsupported(f"ember.shapes: cannot decide {cond} outside a symbolic compile")
    return table.decide(cond)


@dataclass(frozen=True)
class Relation:
    """A fact about sizes the compiled code relies on (``s0 >= 3``, ``Eq(s1, s0)``), and who relied on it."""

    expr: sympy.Basic
    where: str

    def __str__(self) -> str:
        return f"{to_python(self.expr)}" + (f"  # {self.where}" if self.where else "")


def _negate(cond: sympy.Basic) -> sympy.Basic:
    flip = {sympy.Eq: sympy.Ne, sympy.Ne: sympy.Eq, sympy.Lt: sympy.Ge, sympy.Le: sympy.Gt,
            sympy.Gt: sympy.Le, sympy.Ge: sympy.Lt}
    for a, b in flip.items():
        if isinstance(cond, a):
            return b(cond.lhs, cond.rhs)
    return sympy.Not(cond)


class SymbolTable:
    """Symbols ``s0, s1, ...`` (positive integer sizes) and ``i0, i1, ...`` (Python ints) with hints and ranges.

    ``decide`` answers a question about symbolic values with the hints and records the answer as a ``Relation``
    unless the ranges already imply it. ``check`` tells whether a call's values satisfy every relation.
    """

    def __init__(self) -> None:
        self.symbols: list[sympy.Symbol] = []
        self.hints: dict[sympy.Symbol, int] = {}
        self.sources: dict[sympy.Symbol, str] = {}
        self.ranges: dict[sympy.Symbol, tuple[int | None, int | None]] = {}
        self.relations: list[Relation] = []
        self.replacements: dict[sympy.Symbol, sympy.Expr] = {}
        # divisibility facts ``Mod(e, k) == 0`` (``k`` an integer): ``floor(e/k) -> e/k`` and ``Mod(e, k) -> 0``,
        # for comparisons only (``exact``): sizes keep their floors, which the kernel printers write as integer
        # division, while ``2*floor(s0/2)`` and ``s0`` compare equal once ``s0`` is known even
        self.divisible: dict[sympy.Expr, sympy.Expr] = {}
        self.unbacked: set[sympy.Symbol] = set()   # u0, u1...: sizes/ints read from tensor data in the graph
        self.asserts: list[Relation] = []           # facts on unbacked symbols checked where they are computed
        self._lock = threading.RLock()

    # symbols ------------------------------------------------------------------------------------------------
    def new_symbol(self, hint: int, source: str, *, lo: int | None = 2, hi: int | None = None,
                   size: bool = True) -> sympy.Symbol:
        """A fresh symbol for a size (``s``, positive, default range ``[2, inf)``) or an int (``i``)."""
        with self._lock:
            prefix = "s" if size else "i"
            n = sum(1 for s in self.symbols if s.name[0] == prefix)
            sym = (sympy.Symbol(f"s{n}", integer=True, positive=True) if size
                   else sympy.Symbol(f"i{n}", integer=True))
            self.symbols.append(sym)
            self.hints[sym] = int(hint)
            self.sources[sym] = source
            self.ranges[sym] = (lo, hi)
            return sym

    def new_unbacked(self, source: str, *, lo: int | None = 0, hi: int | None = None) -> sympy.Symbol:
        """A fresh unbacked symbol ``u<k>`` (a size or int computed from tensor data inside the graph).

        It has no hint: its entry in ``hints`` is only a stand-in for performance decisions and for the meta
        runs at the hints (``UNBACKED_HINT``, never a value any decision relies on: ``decide`` answers a
        question on it from the ranges or raises ``DataDependent``)."""
        with self._lock:
            n = sum(1 for s in self.symbols if s.name[0] == "u")
            sym = sympy.Symbol(f"u{n}", integer=True, nonnegative=True) if lo is not None and lo >= 0 \
                else sympy.Symbol(f"u{n}", integer=True)
            self.symbols.append(sym)
            self.unbacked.add(sym)
            # distinct stand-ins (two unbacked sizes never meet); an int of any sign (.item()) stands at 0, a
            # valid index of any non-empty dim
            self.hints[sym] = UNBACKED_HINT + 2 * n if lo is not None and lo >= 0 else 0
            self.sources[sym] = source
            self.ranges[sym] = (lo, hi)
            return sym

    def symint(self, expr: sympy.Expr | int):
        """``expr`` as PyTorch sees a size: an ``int`` when constant, else a ``torch.SymInt`` over this table."""
        from .node import symint
        return symint(self, expr)

    def simplify(self, expr):
        if not isinstance(expr, sympy.Basic):
            return expr
        if self.replacements:
            expr = expr.xreplace(self.replacements)
        return expr

    def exact(self, expr):
        """``simplify`` and the divisibility facts: for deciding whether two sizes are equal, never for a size
        itself (``s0/2`` is no integer expression to a printer)."""
        expr = self.simplify(expr)
        if self.divisible and isinstance(expr, sympy.Basic):
            expr = expr.xreplace(self.divisible)
        return expr

    def hint(self, expr):
        """The value of ``expr`` at the hints (an int, or a bool for a relation)."""
        if not isinstance(expr, sympy.Basic):
            return expr
        v = expr.xreplace({k: sympy.Integer(v) for k, v in self.hints.items()})
        if v is sympy.true or v is sympy.false or isinstance(v, sympy.logic.boolalg.BooleanAtom):
            return bool(v)
        if isinstance(v, sympy.Integer):
            return int(v)
        if v.is_Boolean:
            return bool(v)
        if v.is_Number:
            return int(v) if v.is_integer else float(v)
        raise ValueError(f"ember.shapes: {expr} has no value at the hints")

    # decisions ----------------------------------------------------------------------------------------------
    def bounds(self, expr) -> tuple:
        """(lowest, highest) value of ``expr`` over the symbols' ranges; ``None`` = unbounded (or unknown).

        Sums, products (of factors whose lower bound is >= 0), ``floor``, ``Mod``, ``Max``/``Min`` are bounded
        by interval arithmetic; a bound is always implied by the ranges (possibly loose, never too tight)."""
        return _interval(sympy.expand(expr), self.ranges)

    def _bounds_floor_free(self, expr) -> tuple:
        """Bounds of ``expr`` where each ``floor(e)`` is ``e - t`` with ``0 <= t <= 1`` (``Mod(a, b)`` is
        ``a - b*floor(a/b)``; each ``ceiling(e)`` is ``e + t``): keeps the link between ``s0 // 2`` and ``s0`` that intervals lose.

        Where ``e`` is ``p/k`` (``p`` an integer, ``k`` a positive integer) ``t`` is at most ``(k-1)/k``; and an
        integer ``expr`` has integer bounds. Together they prove the rounding identities of integer division:
        ``ceil(u/2) == (u + 1) // 2`` (``-((-u) // 2)``, a stepped slice's length in two forms) for any integer
        ``u``, where the differences ``t1 - t0 - 1/2`` and ``t0 + t1 - 1/2`` lie in ``[-1/2, 1/2]``."""
        ranges = dict(self.ranges)
        subs = {}
        for i, fl in enumerate(sorted(expr.atoms(sympy.floor, sympy.ceiling), key=str)):
            t = sympy.Dummy(f"t{i}")
            ranges[t] = (0, _floor_slack(fl.args[0]))
            subs[fl] = fl.args[0] - t if isinstance(fl, sympy.floor) else fl.args[0] + t
        if not subs:
            return None, None
        lo, hi = _interval(sympy.expand(expr.xreplace(subs)), ranges)
        if expr.is_integer:
            lo, hi = (None if lo is None else sympy.ceiling(lo)), (None if hi is None else sympy.floor(hi))
        return lo, hi

    def known(self, cond) -> bool | None:
        """True/False when the ranges (and the divisibility facts) alone decide ``cond``, else None."""
        cond = self.exact(cond)
        if cond in (sympy.true, sympy.false):
            return bool(cond)
        if not isinstance(cond, (sympy.Eq, sympy.Ne, sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge)):
            return None
        diff = cond.lhs - cond.rhs
        lo, hi = self.bounds(diff)
        if diff.has(sympy.floor, sympy.ceiling):
            lo2, hi2 = self._bounds_floor_free(diff)
            lo = lo2 if lo is None or (lo2 is not None and lo2 > lo) else lo
            hi = hi2 if hi is None or (hi2 is not None and hi2 < hi) else hi
        if isinstance(cond, (sympy.Eq, sympy.Ne)):
            if (lo is not None and lo > 0) or (hi is not None and hi < 0):
                return isinstance(cond, sympy.Ne)
            if lo == hi == 0:
                return isinstance(cond, sympy.Eq)
            return None
        if isinstance(cond, (sympy.Gt, sympy.Ge)):       # lhs - rhs > 0 (or >= 0)
            strict = isinstance(cond, sympy.Gt)
            if lo is not None and (lo > 0 if strict else lo >= 0):
                return True
            if hi is not None and (hi <= 0 if strict else hi < 0):
                return False
            return None
        strict = isinstance(cond, sympy.Lt)
        if hi is not None and (hi < 0 if strict else hi <= 0):
            return True
        if lo is not None and (lo >= 0 if strict else lo > 0):
            return False
        return None

    def decide(self, cond, *, record: bool = True) -> bool:
        """Answer ``cond`` (a sympy boolean over the symbols) at the hints; record the answer as a relation.
        A condition on unbacked symbols is answered from the ranges only (else ``DataDependent``)."""
        cond = self.simplify(cond)
        if isinstance(cond, (bool, sympy.logic.boolalg.BooleanAtom)):
            return bool(cond)
        if self.unbacked and cond.free_symbols & self.unbacked:
            return self._decide_unbacked(cond)
        value = bool(self.hint(cond))
        if self.known(cond) is not None or not record:
            return value
        fact = cond if value else _negate(cond)
        with self._lock:
            if all(r.expr != fact for r in self.relations):
                self.relations.append(Relation(fact, current_location()))
                self._learn(fact)
        return value

    def _decide_unbacked(self, cond) -> bool:
        known = self.known(cond)
        if known is not None:
            return known
        raise DataDependent(self._undecidable(cond))

    def _undecidable(self, cond) -> str:
        syms = sorted(cond.free_symbols & self.unbacked, key=str)
        srcs = "; ".join(f"{s} = {self.sources[s]}" for s in syms)
        return (f"the condition {to_python(cond)} depends on a data-dependent size ({srcs}), whose value is "
                f"only known when the graph runs; add torch._check(...) (or torch._check_is_size) to state "
                f"what the program relies on, or move the decision outside the compiled function")

    def maybe(self, cond) -> bool | None:
        """``decide`` where the caller has a safe default (PyTorch's ``guard_or_false``): None when an unbacked
        condition cannot be settled from the ranges (nothing recorded)."""
        cond = self.simplify(cond)
        if isinstance(cond, (bool, sympy.logic.boolalg.BooleanAtom)):
            return bool(cond)
        if self.unbacked and cond.free_symbols & self.unbacked:
            return self.known(cond)
        return self.decide(cond)

    def size_oblivious(self, cond) -> bool:
        """``decide`` treating unbacked sizes as >= 2 (PyTorch's size-oblivious reasoning: a broadcast or a
        contiguity question answered as for a general size, never as for 0 or 1)."""
        cond = self.simplify(cond)
        if isinstance(cond, (bool, sympy.logic.boolalg.BooleanAtom)):
            return bool(cond)
        if not (self.unbacked and cond.free_symbols & self.unbacked):
            return self.decide(cond)
        saved = dict(self.ranges)
        try:
            for u in cond.free_symbols & self.unbacked:
                lo, hi = self.ranges[u]
                if lo is not None and lo >= 0:
                    self.ranges[u] = (max(lo, 2), hi)
            known = self.known(cond)
        finally:
            self.ranges = saved
        if known is None:
            raise DataDependent(self._undecidable(cond))
        return known

    def expect(self, cond) -> bool:
        """A property the program relies on (``torch._check``, a meta kernel's check): a condition on unbacked
        symbols that the ranges do not settle becomes a runtime assertion (``asserts``, checked where the
        symbols are computed) and narrows the ranges; others are ``decide``d."""
        cond = self.simplify(cond)
        if isinstance(cond, (bool, sympy.logic.boolalg.BooleanAtom)):
            return bool(cond)
        if not (self.unbacked and cond.free_symbols & self.unbacked):
            return self.decide(cond)
        known = self.known(cond)
        if known is not None:
            return known
        with self._lock:
            if all(r.expr != cond for r in self.asserts):
                self.asserts.append(Relation(cond, current_location()))
            self._narrow(cond)
        return True

    def _narrow(self, cond) -> None:
        """``u >= c`` / ``u > c`` / ``u <= c`` / ``u < c`` (either side) tightens ``u``'s range."""
        if not isinstance(cond, (sympy.Ge, sympy.Gt, sympy.Le, sympy.Lt)):
            return
        diff = sympy.expand(cond.lhs - cond.rhs)       # relation: diff (>, >=, <, <=) 0
        syms = diff.free_symbols
        if len(syms) != 1:
            return
        u = next(iter(syms))
        coeff = diff.coeff(u)
        rest = diff - coeff * u
        if coeff not in (1, -1) or rest.free_symbols or u not in self.ranges:
            return
        lower = isinstance(cond, (sympy.Ge, sympy.Gt)) == (coeff == 1)     # the fact bounds u from below
        strict = isinstance(cond, (sympy.Gt, sympy.Lt))
        bound = -rest * coeff
        lo, hi = self.ranges[u]
        if lower:
            b = int(sympy.floor(bound)) + 1 if strict else int(sympy.ceiling(bound))
            lo = b if lo is None else max(lo, b)
        else:
            b = int(sympy.ceiling(bound)) - 1 if strict else int(sympy.floor(bound))
            hi = b if hi is None else min(hi, b)
        self.ranges[u] = (lo, hi)
        if u in self.unbacked:      # the stand-in stays inside the range (meta runs of later ops use it)
            h = self.hints[u]
            self.hints[u] = max(lo, min(h, hi)) if lo is not None and hi is not None else \
                (max(lo, h) if lo is not None else min(h, hi) if hi is not None else h)

    def _learn(self, fact) -> None:
        """Equalities between a symbol and another expression become replacements (``s1 -> s0``); a
        divisibility ``Mod(e, k) == 0`` (``c*Mod(e, k)`` as sympy writes ``Mod(2*e, 2*k)``) a ``divisible`` fact."""
        if not isinstance(fact, sympy.Eq):
            return
        lhs, rhs = fact.lhs, fact.rhs
        if rhs == 0 and lhs.as_coeff_Mul()[0] != 0 and isinstance(lhs.as_coeff_Mul()[1], sympy.Mod):
            e, k = lhs.as_coeff_Mul()[1].args
            if k.is_Integer and k > 1:
                self._divides(e, k)
            return
        for f in (lhs - rhs).atoms(sympy.floor):    # 15*s0 == 30*floor(s0/2): floor(s0/2) is s0/2
            e, k = sympy.fraction(sympy.together(f.args[0]))
            if k.is_Integer and k > 1 and _solves_to(lhs - rhs, f, e / k):
                self._divides(e, k)
        for a, b in ((lhs, rhs), (rhs, lhs)):
            if isinstance(a, sympy.Symbol) and a in self.hints and a not in b.free_symbols:
                if isinstance(b, sympy.Symbol) and self.symbols.index(b) > self.symbols.index(a):
                    continue   # keep the older symbol
                self.replacements = {k: v.xreplace({a: b}) for k, v in self.replacements.items()}
                self.replacements[a] = b
                return

    def _divides(self, e, k) -> None:
        self.divisible[sympy.floor(e / k)] = e / k
        self.divisible[sympy.Mod(e, k)] = sympy.Integer(0)

    def check(self, values: dict) -> bool:
        """Do the symbols' values for a call (``{symbol: int}``) satisfy the ranges and every relation?"""
        for s, (lo, hi) in self.ranges.items():
            v = values.get(s)
            if v is None:
                continue
            if (lo is not None and v < lo) or (hi is not None and v > hi):
                return False
        subs = {k: sympy.Integer(v) for k, v in values.items()}
        return all(bool(r.expr.xreplace(subs)) for r in self.relations)

    def describe(self) -> str:
        """What ``EMBER_LOGS=dynamic`` prints: each symbol and each relation with the line that added it."""
        lines = []
        for s in self.symbols:
            lo, hi = self.ranges[s]
            rng = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
            lines.append(f"symbol {s} = {self.sources[s]} (hint {self.hints[s]}, range {rng})")
        for r in self.relations:
            lines.append(f"relation {r}")
        for r in self.asserts:
            lines.append(f"runtime assert {r}")
        return "\n".join(lines)


UNBACKED_HINT = 8191     # the meta runs' stand-in size of an unbacked symbol (odd and large: never 0 or 1)


def _solves_to(diff, atom, value) -> bool:
    """``diff == 0`` is linear in ``atom`` and holds exactly when ``atom == value``."""
    d = sympy.Dummy("d")
    lin = sympy.expand(diff.xreplace({atom: d}))
    a, b = lin.coeff(d, 1), lin.coeff(d, 0)
    if a == 0 or d in a.free_symbols or d in b.free_symbols or sympy.expand(lin - a * d - b) != 0:
        return False
    return sympy.simplify(-b / a - value) == 0


def _floor_slack(e) -> sympy.Expr:
    """The most ``e - floor(e)`` (and ``ceiling(e) - e``) can be: ``(k-1)/k`` for ``p/k`` with ``p`` an integer and ``k`` a positive
    integer (``p`` is ``k*floor(p/k)`` plus a remainder of at most ``k - 1``), else 1."""
    num, den = sympy.fraction(sympy.together(e))
    if den.is_Integer and den > 0 and num.is_integer:
        return sympy.Rational(den - 1, den)
    return sympy.Integer(1)


def _add(a, b):
    return None if a is None or b is None else a + b


def _interval(e, ranges) -> tuple:
    """Interval of ``e`` (``None``: unbounded on that side)."""
    if e.is_Number:
        return e, e
    if isinstance(e, sympy.Symbol):
        return ranges.get(e, (None, None))
    if isinstance(e, sympy.Add):
        lo = hi = sympy.Integer(0)
        for t in e.args:
            a, b = _interval(t, ranges)
            lo, hi = _add(lo, a), _add(hi, b)
        return lo, hi
    if isinstance(e, sympy.Mul):
        c, rest = e.as_coeff_Mul()
        lo = hi = sympy.Integer(1)
        for t in sympy.Mul.make_args(rest):
            a, b = _interval(t, ranges)
            if a is None or a < 0:
                return None, None       # products only of non-negative factors
            lo, hi = lo * a, (None if hi is None or b is None else hi * b)
        if c >= 0:
            return lo * c, (None if hi is None else hi * c)
        return (None if hi is None else hi * c), lo * c
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
        a, b = _interval(e.base, ranges)
        if a is None or a < 0:
            return None, None
        return a ** e.exp, (None if b is None else b ** e.exp)
    if isinstance(e, sympy.floor):
        a, b = _interval(e.args[0], ranges)
        return (None if a is None else sympy.floor(a)), (None if b is None else sympy.floor(b))
    if isinstance(e, sympy.Mod):
        a, b = _interval(e.args[0], ranges)
        m, n = _interval(e.args[1], ranges)
        if a is None or a < 0 or m is None or m <= 0:
            return None, None
        top = None if n is None else n - 1
        return sympy.Integer(0), (b if top is None else (top if b is None else sympy.Min(b, top)))
    if isinstance(e, (sympy.Max, sympy.Min)):
        ivs = [_interval(a, ranges) for a in e.args]
        los, his = [i[0] for i in ivs], [i[1] for i in ivs]
        if isinstance(e, sympy.Max):
            lo = max((x for x in los if x is not None), default=None)
            hi = None if None in his else max(his)
        else:
            lo = None if None in los else min(los)
            hi = min((x for x in his if x is not None), default=None)
        return lo, hi
    return None, None
