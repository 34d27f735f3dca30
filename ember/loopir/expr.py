"""Scalar expressions of the loop IR: what one loop iteration computes.

An expression is a tree of frozen nodes evaluated at one point of a node's iteration space:
- ``Load(buf, index, dtype, mask)``: element ``index`` (a sympy integer expression over the loop variables,
  in elements of the buffer's storage) of buffer ``buf``; ``mask`` (a sympy boolean or None) says where the
  load is valid (padding, concatenation); elsewhere it reads 0 and the enclosing ``where`` picks another value.
- ``Const(value, dtype)``, ``IndexValue(index, dtype)`` (a value computed from the loop variables: iota).
- ``Op(name, args, dtype)``: a pointwise operation named as ember's pointwise prims (``exp``, ``add``,
  ``where``...) plus ``to_dtype`` (a cast to ``dtype``).

Loop variables are sympy symbols ``x0, x1, ...`` (output dims) and ``r0, r1, ...`` (reduced dims), integer and
nonnegative. Expressions print as Python (``ops.exp(ops.load('buf0', 8*x0 + x1))``).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterator, Union

import sympy
import torch


@lru_cache(maxsize=None)
def var(prefix: str, i: int) -> sympy.Symbol:
    return sympy.Symbol(f"{prefix}{i}", integer=True, nonnegative=True)


def xvars(n: int) -> list[sympy.Symbol]:
    return [var("x", i) for i in range(n)]


def rvars(n: int) -> list[sympy.Symbol]:
    return [var("r", i) for i in range(n)]


@dataclass(frozen=True)
class Load:
    buf: str
    index: sympy.Expr
    dtype: torch.dtype
    mask: Any = None

    def __repr__(self) -> str:
        m = f", mask={self.mask}" if self.mask is not None else ""
        return f"ops.load({self.buf!r}, {self.index}{m})"


@dataclass(frozen=True)
class Const:
    value: Any
    dtype: torch.dtype

    def __repr__(self) -> str:
        return f"ops.constant({self.value!r}, {self.dtype})"


@dataclass(frozen=True)
class IndexValue:
    index: sympy.Expr
    dtype: torch.dtype

    def __repr__(self) -> str:
        return f"ops.index_value({self.index}, {self.dtype})"


@dataclass(frozen=True)
class Op:
    name: str
    args: tuple
    dtype: torch.dtype

    def __hash__(self) -> int:     # cached: trees are hashed often (walks, memos) and deep
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.name, self.args, self.dtype))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict:         # the cached hash is per process (string hashing is salted)
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def __repr__(self) -> str:
        extra = f", {self.dtype}" if self.name == "to_dtype" else ""
        return f"ops.{self.name}({', '.join(map(repr, self.args))}{extra})"


@dataclass(frozen=True)
class Bind:
    """``body`` with the index symbol ``symbol`` standing for the integer value of ``value`` (gather,
    index_select, advanced indexing: a load whose address depends on a loaded value)."""
    symbol: sympy.Symbol
    value: Any
    body: Any
    extent: Any = None     # the indexed dimension's size: a valid value lies in [0, extent)

    @property
    def dtype(self) -> torch.dtype:
        return self.body.dtype

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.symbol, self.value, self.body, self.extent))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def __repr__(self) -> str:
        return f"ops.bind({self.symbol}={self.value!r}, {self.body!r})"


Expr = Union[Load, Const, IndexValue, Op, Bind]
_INDIRECT = iter(range(1 << 62))


def indirect_symbol() -> sympy.Symbol:
    return sympy.Symbol(f"ind{next(_INDIRECT)}", integer=True)


def bound_symbol(var: str) -> sympy.Symbol:
    """The index symbol code generators print as the (integer) kernel variable ``var``."""
    return sympy.Symbol(var, integer=True)


def walk(e: Expr) -> Iterator[Expr]:
    """Every node of ``e``, children before parents (each distinct node once)."""
    seen: set = set()

    def go(n: Expr) -> Iterator[Expr]:
        if n in seen:
            return
        seen.add(n)
        if isinstance(n, Op):
            for a in n.args:
                yield from go(a)
        elif isinstance(n, Bind):
            yield from go(n.value)
            yield from go(n.body)
        yield n
    yield from go(e)


def loads(e: Expr) -> list[Load]:
    return [n for n in walk(e) if isinstance(n, Load)]


def substitute(e: Expr, fn: Callable[[sympy.Expr], sympy.Expr], load: Callable[[Load], Expr] | None = None
               ) -> Expr:
    """Rewrite every index (and mask) in ``e`` with ``fn``; ``load`` may replace a (rewritten) load. Plain
    Python numbers (a constant index such as the 0 of a one-element dimension) are left as they are."""
    memo: dict = {}

    def sub(x: Any) -> Any:
        return fn(x) if isinstance(x, sympy.Basic) else x

    def go(n: Expr) -> Expr:
        if n in memo:
            return memo[n]
        if isinstance(n, Load):
            mask = sub(n.mask) if n.mask is not None else None
            out: Expr = Load(n.buf, sub(n.index), n.dtype, mask)
            if load is not None:
                out = load(out)
        elif isinstance(n, IndexValue):
            out = IndexValue(sub(n.index), n.dtype)
        elif isinstance(n, Op):
            out = Op(n.name, tuple(go(a) for a in n.args), n.dtype)
        elif isinstance(n, Bind):
            out = Bind(n.symbol, go(n.value), go(n.body), n.extent)
        else:
            out = n
        memo[n] = out
        return out
    return go(e)


# ops that cost many instructions per point without being EXPENSIVE_OPS (an IEEE-rounded division, a square
# root); a small value computing one is stored rather than recomputed at each point of a user hoist_fraction
# times larger (lower._hoist; remat leaves such values stored)
COSTLY_OPS = frozenset({"div", "rsqrt", "sqrt", "reciprocal"})
# ops costing far more than a load or an add: a value holding one is stored rather than recomputed per user
EXPENSIVE_OPS = frozenset("exp exp2 expm1 log log2 log10 log1p sin cos tan asin acos atan sinh cosh tanh asinh "
                          "acosh atanh sigmoid erf erfc erfinv lgamma digamma pow atan2 hypot".split())


def size(e: Expr) -> int:
    return sum(1 for n in walk(e) if isinstance(n, Op))


def cast(e: Expr, dtype: torch.dtype) -> Expr:
    if e.dtype == dtype:
        return e
    if isinstance(e, Const):
        return Const(_py_cast(e.value, dtype), dtype)
    return Op("to_dtype", (e,), dtype)


def _py_cast(v: Any, dtype: torch.dtype) -> Any:
    if dtype is torch.bool:
        return bool(v)
    if dtype.is_floating_point:
        return float(v)
    if dtype.is_complex:
        return complex(v)
    return int(v)
