"""Triton kernels over symbolic sizes (dynamic shapes, docs/dynamic-contract.md).

A kernel whose ranges or index expressions contain size symbols (``s<k>``: sizes, ``i<k>``: Python ints; sympy
``Symbol``s of the graph's ``ember.shapes.SymbolTable``) is generated once for every size the table's relations
admit. Its symbols, ``kernel_symbols`` (sorted by name), are plain ``int`` parameters after the buffer pointers,
so the source holds no size and no hint; masks always cover the symbolic tails (``xindex < s0*s1``), and the
grid is computed from the symbol values at each launch (``grid_function``).

Choices that tune the kernel (XBLOCK, RBLOCK, num_warps, looped vs persistent reduction) are made at the hints
(``table.hint``): they are fast for the sizes seen first and correct for every size. Two choices are only
*correct* for a class of sizes, and each is recorded in the table with ``table.decide`` so the compiled entry
is guarded on that class (not on the size):
- a persistent reduction holds a whole row in registers: ``rnumel <= RBLOCK`` (``persistent_for``);
- 32-bit indexing: every index and intermediate index value, bounded above by ``magnitude``, is
  ``<= 2**31 - 1`` (``needs_int64``). Where the hints already need 64 bits, 64-bit indexing is used and
  nothing is recorded (it is correct for every size).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import sympy

from ember.loopir.indexing import RINDEX, XINDEX
from ember.shapes import SymbolicUnsupported, to_python

INT32_MAX = 2 ** 31 - 1
_SIZE_NAME = re.compile(r"[siu]\d+$")     # u<k>: an unbacked (data-dependent) size
_UNBOUNDED = sympy.Integer(2 ** 63)     # the magnitude of a value nothing bounds (a loaded index)


def is_size_symbol(s: Any) -> bool:
    """A size (``s<k>``, unbacked ``u<k>``) or Python-int (``i<k>``) symbol of a ``SymbolTable``: a kernel
    parameter."""
    return isinstance(s, sympy.Symbol) and _SIZE_NAME.match(s.name) is not None


def is_symbolic(e: Any) -> bool:
    return isinstance(e, sympy.Basic) and any(is_size_symbol(s) for s in e.free_symbols)


def kernel_symbols(exprs: Iterable[Any]) -> tuple[sympy.Symbol, ...]:
    """The size symbols in ``exprs``, sorted by name: the kernel's int parameters, in order (the contract)."""
    syms = {s for e in exprs if isinstance(e, sympy.Basic) for s in e.free_symbols if is_size_symbol(s)}
    return tuple(sorted(syms, key=lambda s: s.name))


def require_table(table: Any, what: str) -> Any:
    if table is None:
        raise SymbolicUnsupported(f"ember.codegen.triton: {what} has symbolic sizes but the code generator was "
                                  "given no SymbolTable (pass symbols=gm.meta['ember_symbols'])")
    return table


def hint(table: Any, e: Any) -> int:
    """``e`` (an int or a sympy expression over the table's symbols) at the hints."""
    return int(table.hint(e)) if isinstance(e, sympy.Basic) else int(e)


def symbol_ranges(table: Any, syms: Iterable[sympy.Symbol]) -> dict:
    """Each symbol's value range as ``(lo, hi)`` (``None``: unbounded), for ``triton_ops.bounds``."""
    out = {}
    for s in syms:
        lo, hi = table.ranges.get(s, (None, None)) if table is not None else (None, None)
        out[s] = (lo if lo is not None else (1 if s.name[0] == "s" else None), hi)
    return out


def persistent_for(table: Any, rnumel: Any, inner: bool, fits: Callable[[int, bool], bool],
                   rblock: Callable[[int], int]) -> bool:
    """Whether a reduction over ``rnumel`` points (symbolic) is persistent: only when the symbols' ranges bound
    the row by a size that fits (``mark_dynamic(..., max=)``); otherwise a looped reduction, valid for every row
    length, so no relation splits the sizes into RBLOCK classes (one graph per doubling of the row)."""
    hi = row_bound(table, rnumel)
    return hi is not None and fits(hi, inner)


def row_bound(table: Any, rnumel: Any) -> int | None:
    """The largest row length the ranges allow (None: unbounded)."""
    hi = table.bounds(rnumel)[1]
    return None if hi is None else int(hi)


def magnitude(e: Any, numel: dict) -> sympy.Expr:
    """An upper bound (a sympy expression over the size symbols) of ``|v|`` for ``e`` and for every value
    computed on the way to it, over every point of the kernel; ``numel`` maps ``xindex``/``rindex`` to their
    extents and a loaded index's symbol to its extent (absent: unbounded)."""
    seen: list = []
    _value_bound(e, numel, seen)
    return sympy.Max(*seen) if len(seen) > 1 else seen[0]


def _value_bound(e: Any, numel: dict, seen: list) -> sympy.Expr:
    """A bound of ``|e|`` alone; the bound of ``e`` and of each of its sub-expressions go to ``seen``. A parent
    combines its operands' own bounds (``100352 * (x // 2048)`` is bounded by ``100352 * xnumel / 2048``, not by
    ``100352 * xnumel``: the latter, ResNet-50's pooling index, split the batch sizes at 10 into two graphs),
    while ``x`` itself, computed on the way, is still checked through ``seen``."""
    b = _bound(e, numel, seen)
    seen.append(b)
    return b


def _positive_size(e: Any) -> bool:
    """A product of positive integers and (powers of) size symbols: at least 1 wherever a kernel divides by it."""
    def factor(f: Any) -> bool:
        if isinstance(f, sympy.Pow):
            return f.exp.is_Integer and f.exp > 0 and factor(f.base)
        return (f.is_Integer and f > 0) or (isinstance(f, sympy.Symbol) and is_size_symbol(f) and f.name[0] == "s")
    return all(factor(f) for f in sympy.Mul.make_args(e))


def _bound(e: Any, numel: dict, seen: list) -> sympy.Expr:
    if isinstance(e, (bool, int)):
        return sympy.Integer(abs(int(e)))
    if e is sympy.true or e is sympy.false:
        return sympy.Integer(1)
    if isinstance(e, sympy.Symbol):
        if e in (XINDEX, RINDEX) or e in numel:
            n = numel.get(e)
            return _UNBOUNDED if n is None else sympy.Max(sympy.sympify(n) - 1, 0)
        if is_size_symbol(e):
            return e if e.name[0] == "s" else sympy.Abs(e)
        return _UNBOUNDED
    if e.is_Number:
        return sympy.Integer(abs(int(e))) if e.is_Integer else _UNBOUNDED
    if isinstance(e, sympy.Add):
        return sympy.Add(*[_value_bound(a, numel, seen) for a in e.args])
    if isinstance(e, sympy.Mul):
        return sympy.Mul(*[_value_bound(a, numel, seen) for a in e.args])
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        top = _value_bound(num, numel, seen)
        if den.is_Integer and den != 0:
            return sympy.floor(top / abs(den))       # |floor(n / d)| <= |n| // |d| for integers n, d
        _value_bound(den, numel, seen)
        if _positive_size(den):
            return sympy.floor(top / den)
        return top                                   # a nonzero integer divisor: |floor(n / d)| <= |n|
    if isinstance(e, sympy.Mod):
        a, b = e.args
        _value_bound(a, numel, seen)
        if b.is_Integer and b != 0:
            return sympy.Integer(abs(int(b)) - 1)    # |a mod b| < |b|
        return _value_bound(b, numel, seen)
    if isinstance(e, (sympy.Min, sympy.Max)) or isinstance(e, sympy.core.relational.Relational) \
            or isinstance(e, sympy.logic.boolalg.BooleanFunction):
        return sympy.Max(*[_value_bound(a, numel, seen) for a in e.args], 1)
    return _UNBOUNDED


def needs_int64(exprs: list, numel: dict, table: Any) -> bool:
    """Whether a symbolic kernel indexes in 64 bits: where some index may pass ``2**31 - 1`` at the hints.
    Otherwise it indexes in 32 bits, and the relation that keeps every index below ``2**31`` is recorded (so
    the entry is guarded on that size class). As the static rule, ``xnumel`` and ``rnumel`` have room for a
    block past their end (``2 * numel``)."""
    ms = {2 * magnitude(XINDEX, numel) + 2, 2 * magnitude(RINDEX, numel) + 2}
    for e in exprs:
        if isinstance(e, sympy.Basic):
            ms.add(magnitude(e, numel))
    if _UNBOUNDED in ms or any(m.has(_UNBOUNDED) for m in ms):
        return True
    big = sympy.Max(*ms)
    if not is_symbolic(big):
        return int(big) > INT32_MAX
    if hint(table, big) > INT32_MAX:
        return True             # 64-bit indexing is right for every size: nothing to guard
    fits = sympy.Le(big, INT32_MAX)
    if getattr(table, "unbacked", None) and big.free_symbols & table.unbacked:
        return table.maybe(fits) is not True    # a data-dependent size: 64 bits unless its range settles it
    return not table.decide(fits)


def grid_expr(xnumel: Any, xblock: int) -> Any:
    """The number of programs of a 1-D grid over ``xnumel`` points, ``XBLOCK`` each (a sympy expression)."""
    return sympy.floor((xnumel + xblock - 1) / sympy.Integer(xblock))


def grid_function(expr: Any, symbols: tuple[str, ...]) -> Callable[..., tuple[int, int, int]]:
    """``grid(*symbol_values)`` -> the launch grid: ``expr`` (the program count over the symbols) printed as
    Python once, at build time."""
    return eval(f"lambda {', '.join(symbols)}: ({to_python(expr)}, 1, 1)", {"max": max, "min": min, "abs": abs})


__all__ = ["is_size_symbol", "is_symbolic", "kernel_symbols", "persistent_for", "magnitude", "needs_int64",
           "grid_expr", "grid_function", "hint", "symbol_ranges", "require_table", "INT32_MAX"]
