"""Index arithmetic for kernels: place a node's loop variables on a kernel's flat ``xindex``/``rindex``.

A node with ranges ``S`` placed on a flat index ``f`` has ``v_i = (f // prod(S[i+1:])) % S[i]``. Index
expressions linear in the ``v_i`` are rewritten run by run: consecutive variables whose coefficients follow the
contiguous pattern (``c_i == c_{i+1} * S[i+1]``) merge into one ``(f // P) % N`` term, so a contiguous load of
a node placed on ``f`` is just ``f`` — no division left for the code generators to strength-reduce.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

import sympy

from .ir import prod, same_size  # noqa: F401  (same_size: used here and re-exported)
from ember.shapes import active_table, size_hint


@lru_cache(maxsize=None)
def flat_symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, nonnegative=True)


XINDEX, RINDEX = flat_symbol("xindex"), flat_symbol("rindex")


def _term(flat: sympy.Expr, inner: Any, n: Any, first: bool) -> sympy.Expr:
    v = flat if inner == 1 else sympy.floor(flat / inner)
    return v if first else sympy.Mod(v, n)


_PLACED: dict = {}      # memo: the scheduler and code generators place the same loads many times over
_PLACED_MAX = 200_000


def place(expr: Any, groups: Sequence[tuple[sympy.Expr, Sequence[sympy.Symbol], Sequence[Any]]]) -> Any:
    """Rewrite ``expr`` (over loop variables) given, per group, a flat index and the variables/sizes it
    decomposes into (outermost first)."""
    if expr is None or isinstance(expr, (bool, int)) or expr in (sympy.true, sympy.false):
        return expr
    key = (expr, tuple((flat, tuple(vs), tuple(sizes)) for flat, vs, sizes in groups))
    out = _PLACED.get(key)
    if out is None:
        if len(_PLACED) >= _PLACED_MAX:
            _PLACED.clear()
        out = _PLACED[key] = _place(expr, groups)
    return out


def _place(expr: Any, groups: Sequence[tuple[sympy.Expr, Sequence[sympy.Symbol], Sequence[Any]]]) -> Any:
    if isinstance(expr, (sympy.logic.boolalg.BooleanFunction, sympy.core.relational.Relational)):
        out = expr.func(*(place(a, groups) for a in expr.args))
        return _undivided(out) if isinstance(out, (sympy.StrictLessThan, sympy.GreaterThan)) else out
    expr = fold_divmod(sympy.expand(expr))
    syms = [s for _, vs, _ in groups for s in vs]
    coeffs = _linear(expr, syms)
    if coeffs is None:
        return _substitute(expr, groups)
    out = coeffs.pop(None, sympy.Integer(0))
    for flat, vs, sizes in groups:
        out += _merge_runs(flat, [coeffs.get(v, 0) for v in vs], list(sizes))
    return out


def _undivided(rel: Any) -> Any:
    """``a // k < n`` as ``a < k*n`` (and ``>=``) for a positive integer ``k`` and a symbolic size ``n``: the
    bound of a concatenation's part along a flattened index, which a compiler can split the loop at (a
    division compared with a variable it cannot). Relations with a constant bound are left as they are."""
    lhs, rhs = rel.args
    if not isinstance(lhs, sympy.floor) or not any(_is_size_symbol(s) for s in rhs.free_symbols) or \
            not rhs.is_integer:
        return rel
    num, den = lhs.args[0].as_numer_denom()
    if not (den.is_Integer and den > 0):
        return rel
    return rel.func(num, den * rhs)


def _divmod_parts(term: sympy.Expr) -> tuple[str, Any, Any, Any] | None:
    """``c*Mod(a, m)`` -> ("mod", a, m, c); ``c*floor(a/m)`` -> ("floor", a, m, c); else None. With symbolic
    sizes, ``m`` and ``c`` may be size expressions (``8*s1*floor(a/s1)``)."""
    c, f = term.as_coeff_Mul()
    if isinstance(f, sympy.Mod) and f.args[1].is_Integer:
        return "mod", f.args[0], f.args[1], c
    if isinstance(f, sympy.floor):
        num, den = f.args[0].as_numer_denom()
        if den.is_Integer and den != 1:
            return "floor", num, den, c
    return _symbolic_divmod_parts(c, f) if any(_is_size_symbol(s) for s in term.free_symbols) else None


def _is_size_symbol(s: sympy.Symbol) -> bool:
    return s.name[:1] in "siu" and s.name[1:].isdigit()


def _symbolic_divmod_parts(c: Any, f: sympy.Expr) -> tuple[str, Any, Any, Any] | None:
    """``_divmod_parts`` of a term whose modulus or coefficient holds size symbols (never a static term): the
    identity ``a = m*(a//m) + a%m`` holds for every positive ``m``."""
    factors = sympy.Mul.make_args(f)
    dm = [x for x in factors if isinstance(x, (sympy.Mod, sympy.floor))]
    if len(dm) != 1:
        return None
    g = dm[0]
    rest = c * sympy.Mul(*[x for x in factors if x is not g])
    if not all(_is_size_symbol(s) for s in rest.free_symbols):
        return None
    if isinstance(g, sympy.Mod):
        a, m = g.args
    else:
        a, m = g.args[0].as_numer_denom()
        if m == 1:
            return None
    if not m.is_positive or (m.is_Integer and rest.is_Number) or \
            not all(_is_size_symbol(s) for s in m.free_symbols):
        return None
    return ("mod" if isinstance(g, sympy.Mod) else "floor"), a, m, rest


def fold_divmod(expr: sympy.Expr) -> sympy.Expr:
    """Fold ``c*Mod(a, m) + c*m*floor(a/m)`` into ``c*a`` (the identity a = m*(a//m) + a%m), repeatedly:
    reshapes that split and merge the same dims leave such pairs behind."""
    while True:
        terms = list(sympy.Add.make_args(expr))
        parts = [_divmod_parts(t) for t in terms]
        mods = {(p[1], p[2]): i for i, p in enumerate(parts) if p and p[0] == "mod"}
        # Mod(a // k, m) pairs with a // (k*m) too, which is (a // k) // m: the nested split of a flat index into
        # three dims or more (n, h, w of an NHWC row) folds back to the flat index
        for (a, m), i in list(mods.items()):
            inner = _divmod_parts(a) if isinstance(a, sympy.floor) else None
            if inner is not None and inner[3] == 1:
                mods.setdefault((inner[1], inner[2] * m), i)
        hit = None
        for i, p in enumerate(parts):
            if p and p[0] == "floor" and (p[1], p[2]) in mods:
                j = mods[(p[1], p[2])]
                if p[3] == parts[j][3] * parts[j][2]:  # type: ignore[index]
                    hit = (i, j, parts[j][3] * parts[j][1])  # type: ignore[index]
                    break
        if hit is None:
            return expr
        i, j, new = hit
        expr = sympy.expand(sympy.Add(*[t for k, t in enumerate(terms) if k not in (i, j)]) + new)


def _linear(expr: sympy.Expr, syms: Sequence[sympy.Symbol]) -> dict | None:
    """{symbol: coefficient, None: rest} when expr is linear in syms with integer coefficients."""
    out: dict = {}
    for term in sympy.Add.make_args(expr):
        free = [s for s in term.free_symbols if s in syms]
        if not free:
            out[None] = out.get(None, 0) + term
            continue
        if len(free) > 1:
            return None
        s = free[0]
        c, rest = term.as_independent(s, as_Add=False)
        if rest != s:          # not a plain multiple of s (e.g. s**2, Mod(s, m)): let sympy decide
            c = sympy.simplify(term / s)
        if c.free_symbols & set(syms) or not (c.is_integer or c.free_symbols):
            return None
        out[s] = out.get(s, 0) + c
    return out


def _merge_runs(flat: sympy.Expr, coefs: list, sizes: list) -> sympy.Expr:
    out = sympy.Integer(0)
    n = len(sizes)
    i = n - 1
    while i >= 0:
        if coefs[i] == 0 or sizes[i] == 1:
            i -= 1
            continue
        j = i  # the run is [k..i], innermost var i
        k = i
        while k - 1 >= 0 and sizes[k - 1] != 1 and same_size(coefs[k - 1], coefs[k] * sizes[k]):
            k -= 1
        inner = prod(sizes[j + 1:])
        span = prod(sizes[k:j + 1])
        out += coefs[j] * _term(flat, inner, span, first=all(s == 1 for s in sizes[:k]))
        i = k - 1
    return out


def _substitute(expr: sympy.Expr, groups: Sequence) -> sympy.Expr:
    sub = {}
    for flat, vs, sizes in groups:
        for i, v in enumerate(vs):
            sub[v] = 0 if sizes[i] == 1 else _term(flat, prod(sizes[i + 1:]), sizes[i],
                                                   all(s == 1 for s in sizes[:i]))
    return expr.xreplace(sub)


def split_point(sizes: Sequence[Any], outer: Any) -> int | None:
    """Index k with prod(sizes[:k]) == outer (the dims that iterate over x), or None."""
    acc: Any = 1
    for k in range(len(sizes) + 1):
        if same_size(acc, outer):
            return k
        if k < len(sizes):
            acc = acc * sizes[k]
    return None


def steps_by_one(index: Any, sym: sympy.Symbol, min_run: int = 16) -> bool:
    """Whether ``index`` moves by 1 as ``sym`` moves by 1, over runs of at least ``min_run`` points: a term
    ``sym`` of coefficient 1, or ``Mod(sym + c, m)`` with ``m >= min_run`` (the innermost dim of a value seen
    through a split or a concatenation, such as the H*W plane of an NCHW image or one head of a fused qkv).
    A symbolic run length (``Mod(r0, s2*s3)``) counts at the hints: this only ever tunes."""
    if not isinstance(index, sympy.Basic) or sym not in index.free_symbols:
        return False
    index = sympy.expand(index)
    if index.coeff(sym) == 1:
        return True
    for term in sympy.Add.make_args(index):
        c, f = term.as_coeff_Mul()
        if c == 1 and isinstance(f, sympy.Mod) and _run_length(f.args[1]) >= min_run \
                and sympy.expand(f.args[0]).coeff(sym) == 1:
            return True
    return False


def _run_length(m: Any) -> int:
    """A modulus as a run length: its value, or for a symbolic one its hint (0 outside a symbolic compile)."""
    if m.is_Integer:
        return int(m)
    if not m.free_symbols or active_table() is None:
        return 0
    return int(size_hint(m))

