"""Triton code generation tables: dtypes, sympy index expressions printed as Triton, pointwise ops.

Values are computed in a *compute dtype*: float16/bfloat16 values live in float32 inside a kernel (loads
upcast, stores and explicit casts round), everything else in its own dtype. Every op template below receives
its arguments as Triton expressions already in their compute dtypes and returns an expression of the result's
compute dtype; ``op_expr`` adds the final ``.to(...)`` where Triton's own promotion could disagree.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import sympy
import torch

from ember.emit import py_float
from ember.loopir.indexing import RINDEX, XINDEX

TL_DTYPE: dict[torch.dtype, str] = {
    torch.float32: "tl.float32", torch.float64: "tl.float64", torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16", torch.int8: "tl.int8", torch.int16: "tl.int16", torch.int32: "tl.int32",
    torch.int64: "tl.int64", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}
LOW_FLOAT = (torch.float16, torch.bfloat16)


def compute_dtype(dt: torch.dtype) -> torch.dtype:
    return torch.float32 if dt in LOW_FLOAT else dt


def tl_dtype(dt: torch.dtype) -> str:
    if dt not in TL_DTYPE:
        raise NotImplementedError(f"ember.codegen.triton: dtype {dt} has no Triton type")
    return TL_DTYPE[dt]


def ctl(dt: torch.dtype) -> str:
    """The Triton type a value of torch dtype ``dt`` is computed in."""
    return tl_dtype(compute_dtype(dt))


def literal(v: Any, dt: torch.dtype) -> str:
    if dt is torch.bool:
        return "1" if v else "0"
    if dt.is_floating_point:
        return py_float(v)          # exact repr, or float("nan") / float("inf") (ember.emit)
    return str(int(v))


# -- index expressions -------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1 << 16)
def _frac(e: sympy.Expr) -> tuple[sympy.Expr, Any]:
    """(numerator, denominator) of a division in an index: the denominator an int, or a positive product of
    size symbols (a view split over a symbolic dim: ``xindex // s1``)."""
    num, den = sympy.fraction(sympy.together(e))
    if den.is_Integer:
        return num, int(den)
    # a symbolic denominator is a product of a tensor's dims (a view split over them: ``xindex // (s1 - 2)``):
    # where it is 0 the tensor has no elements and nothing is indexed
    if not den.free_symbols or not all(s.name[:1] == "s" for s in den.free_symbols):
        raise NotImplementedError(f"ember.codegen.triton: index division by {den}")
    return num, den


def _floor_div_bounds(lo: Any, hi: Any, dl: Any, dh: Any) -> tuple:
    """Interval of ``floor(n / d)`` for ``n`` in [lo, hi] and ``d`` in [dl, dh] (``dl >= 1``; bounds may be inf)."""
    def fdiv(a: Any, b: Any) -> Any:
        if abs(a) == _INF:
            return a
        return (0 if a >= 0 else -1) if b == _INF else a // b
    return min(fdiv(lo, dl), fdiv(lo, dh)), max(fdiv(hi, dl), fdiv(hi, dh))


def bounds(e: Any, numel: dict, memo: dict | None = None) -> tuple[int, int]:
    """Integer interval (lo, hi) of index expression ``e``; ``numel`` maps xindex/rindex to their sizes.
    ``memo`` (for one ``numel``) keeps the intervals of subexpressions already seen."""
    if memo is None:
        return _bounds(e, numel, {})
    got = memo.get(e)
    if got is None:
        got = memo[e] = _bounds(e, numel, memo)
    return got


_INF = float("inf")


def _symbol_bounds(e: sympy.Symbol, numel: dict, memo: dict) -> tuple:
    if e not in numel:      # a loaded index value (gather, embedding): unknown, assume it needs 64 bits
        return -(2 ** 31), 2 ** 31
    n = numel[e]
    if isinstance(n, tuple):        # a size symbol's range (symbolic kernels): (lo, hi), None unbounded
        return (-_INF if n[0] is None else n[0]), (_INF if n[1] is None else n[1])
    if isinstance(n, sympy.Basic) and not n.is_Integer:     # a symbolic extent: [0, its largest value)
        return 0, max(bounds(n, numel, memo)[1] - 1, 0)
    return 0, max(int(n) - 1, 0)


def _times(a: Any, b: Any) -> Any:
    return 0 if a == 0 or b == 0 else a * b     # 0 * inf is 0 here: a zero factor bounds the product


def _bounds(e: Any, numel: dict, memo: dict) -> tuple[int, int]:
    """Intervals are of ints; a symbolic kernel's (size symbols in ``numel`` as ranges) may reach +-inf."""
    if isinstance(e, (int, bool)):
        return int(e), int(e)
    if e is sympy.true or e is sympy.false:
        return 0, 1
    if isinstance(e, sympy.Symbol):
        return _symbol_bounds(e, numel, memo)
    if e.is_Integer:
        return int(e), int(e)
    if isinstance(e, sympy.Add):
        lo = hi = 0
        for a in e.args:
            al, ah = bounds(a, numel, memo)
            lo, hi = lo + al, hi + ah
        return lo, hi
    if isinstance(e, sympy.Mul):
        lo = hi = 1
        for a in e.args:
            al, ah = bounds(a, numel, memo)
            c = [_times(lo, al), _times(lo, ah), _times(hi, al), _times(hi, ah)]
            lo, hi = min(c), max(c)
        return lo, hi
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
        return bounds(sympy.Mul(*([e.base] * int(e.exp)), evaluate=False), numel, memo)
    if isinstance(e, sympy.floor):
        num, den = _frac(e.args[0])
        lo, hi = bounds(num, numel, memo)
        dl, dh = (den, den) if isinstance(den, int) else bounds(den, numel, memo)
        return _floor_div_bounds(lo, hi, max(dl, 1), max(dh, 1))
    if isinstance(e, sympy.Mod):
        n = bounds(e.args[1], numel, memo)[1]
        lo, hi = bounds(e.args[0], numel, memo)
        return (lo, hi) if 0 <= lo and hi < n else (0, n - 1)
    if isinstance(e, (sympy.Min, sympy.Max)):
        bs = [bounds(a, numel, memo) for a in e.args]
        f = min if isinstance(e, sympy.Min) else max
        return f(b[0] for b in bs), f(b[1] for b in bs)
    return 0, 1   # booleans / relationals


def needs_int64(exprs: list, numel: dict) -> bool:
    lim = 2 ** 31 - 1
    if any(int(v) * 2 > lim for v in numel.values()):
        return True
    memo: dict = {}
    for e in exprs:
        for sub in sympy.preorder_traversal(e) if isinstance(e, sympy.Basic) else ():
            lo, hi = bounds(sub, numel, memo)
            if max(abs(lo), abs(hi)) > lim:
                return True
    return False


_REL = {sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">", sympy.Ge: ">=", sympy.Eq: "==", sympy.Ne: "!="}


class IndexPrinter:
    """sympy index / mask expressions -> Triton source. floor and Mod take the cheap C operators where
    the dividend is provably nonnegative and the Python-semantics helpers otherwise."""

    def __init__(self, numel: dict) -> None:
        self.numel = numel

    def __call__(self, e: Any) -> str:
        if isinstance(e, bool) or e is sympy.true or e is sympy.false:
            return "1" if e in (True, sympy.true) else "0"
        if isinstance(e, int):
            return str(e)
        if isinstance(e, sympy.Symbol):
            # a size symbol is a kernel parameter of a symbolic kernel (its range is in ``numel``)
            if e not in (XINDEX, RINDEX) and not e.name.startswith("tmp") and not isinstance(
                    self.numel.get(e), tuple):
                raise NotImplementedError(f"ember.codegen.triton: symbolic size {e} in an index")
            return str(e)
        if e.is_Integer:
            return str(int(e))
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(self(a) for a in e.args) + ")"
        if isinstance(e, sympy.Mul):
            if any(a.is_Rational and not a.is_Integer for a in e.args):
                raise NotImplementedError(f"ember.codegen.triton: fractional index {e}")
            return "(" + " * ".join(self(a) for a in e.args) + ")"
        if isinstance(e, sympy.floor):
            num, den = _frac(e.args[0])
            den_s = str(den) if isinstance(den, int) else self(den)
            if bounds(num, self.numel)[0] >= 0:
                return f"({self(num)} // {den_s})"
            return f"_h.floordiv_int({self(num)}, {den_s})"
        if isinstance(e, sympy.ceiling):
            from .cpp_ops import _ceiling_as_floor
            return self(_ceiling_as_floor(e))
        if isinstance(e, sympy.Mod):
            a, n = e.args
            if bounds(a, self.numel)[0] >= 0 and bounds(n, self.numel)[0] > 0:
                return f"({self(a)} % {self(n)})"
            return f"_h.remainder_int({self(a)}, {self(n)})"
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:      # s0**2 (a square's numel)
            return "(" + " * ".join([self(e.base)] * int(e.exp)) + ")"
        if isinstance(e, sympy.Min):
            return self._fold("tl.minimum", e.args)
        if isinstance(e, sympy.Max):
            return self._fold("tl.maximum", e.args)
        for cls, op in _REL.items():
            if isinstance(e, cls):
                return f"({self(e.args[0])} {op} {self(e.args[1])})"
        if isinstance(e, sympy.And):
            return "(" + " & ".join(self(a) for a in e.args) + ")"
        if isinstance(e, sympy.Or):
            return "(" + " | ".join(self(a) for a in e.args) + ")"
        if isinstance(e, sympy.Not):
            return f"({self(e.args[0])} == 0)"
        raise NotImplementedError(f"ember.codegen.triton: index expression {e!r}")

    def _fold(self, fn: str, args: tuple) -> str:
        out = self(args[0])
        for a in args[1:]:
            out = f"{fn}({out}, {self(a)})"
        return out


# -- pointwise ops -----------------------------------------------------------------------------------------------
# Each entry: (arg compute dtypes, result dtype, *arg expressions) -> expression. ``f`` = float result/arg.
Template = Callable[..., str]


def _is_f(dt: torch.dtype) -> bool:
    return dt.is_floating_point


def _bool(a: str, dt: torch.dtype) -> str:
    return a if dt is torch.bool else f"({a} != 0)"


def _fi(ffmt: str, ifmt: str) -> Template:
    """Float template vs integer template, picked by the first argument's dtype."""
    def t(dts: list, out: torch.dtype, *a: str) -> str:
        return (ffmt if _is_f(dts[0]) else ifmt).format(*a)
    return t


def _f(fmt: str) -> Template:
    return lambda dts, out, *a: fmt.format(*a)


def _ld(name: str) -> Template:
    return lambda dts, out, *a: f"libdevice.{name}({', '.join(a)})"


def _logical(op: str) -> Template:
    return lambda dts, out, a, b: f"({_bool(a, dts[0])} {op} {_bool(b, dts[1])})"


OPS: dict[str, Template] = {
    "add": _f("({} + {})"), "sub": _f("({} - {})"), "mul": _f("({} * {})"),
    "div": lambda dts, out, a, b: (f"tl.math.div_rn({a}, {b})" if _is_f(out) and out != torch.float64 else
                                   f"({a} / {b})" if _is_f(out) else f"({a} // {b})"),  # IEEE-rounded as eager
    "floordiv": _fi("_h.floordiv_float({}, {})", "_h.floordiv_int({}, {})"),
    "remainder": _fi("_h.remainder_float({}, {})", "_h.remainder_int({}, {})"),
    "fmod": _f("({} % {})"),
    "pow": lambda dts, out, a, b: (f"libdevice.pow({a}, {b})" if _is_f(out) else
                                   f"libdevice.pow({a}.to(tl.float64), {b}.to(tl.float64))"),
    "maximum": _fi("_h.maximum({}, {})", "tl.maximum({}, {})"),
    "minimum": _fi("_h.minimum({}, {})", "tl.minimum({}, {})"),
    "atan2": _ld("atan2"), "hypot": _ld("hypot"), "copysign": _ld("copysign"), "nextafter": _ld("nextafter"),
    "bitwise_and": _f("({} & {})"), "bitwise_or": _f("({} | {})"), "bitwise_xor": _f("({} ^ {})"),
    "shift_left": _f("({} << {})"), "shift_right": _f("({} >> {})"),
    "eq": _f("({} == {})"), "ne": _f("({} != {})"), "lt": _f("({} < {})"), "le": _f("({} <= {})"),
    "gt": _f("({} > {})"), "ge": _f("({} >= {})"),
    "logical_and": _logical("&"), "logical_or": _logical("|"), "logical_xor": _logical("^"),
    "logical_not": lambda dts, out, a: f"({a} == 0)",
    "isnan": _f("({0} != {0})"),
    "isinf": _fi('(tl.abs({0}) == float("inf"))', "({0} != {0})"),
    "isfinite": _fi('(tl.abs({0}) < float("inf"))', "({0} == {0})"),
    "signbit": _fi("(libdevice.signbit({}) != 0)", "({} < 0)"),
    "where": lambda dts, out, c, a, b: f"tl.where({_bool(c, dts[0])}, {a}, {b})",
    "bitwise_not": lambda dts, out, a: f"({a} == 0)" if dts[0] is torch.bool else f"(~{a})",
    "neg": _f("(-{})"), "abs": _f("tl.abs({})"),
    "exp": _f("tl.exp({})"), "exp2": _f("tl.exp2({})"), "log": _f("tl.log({})"), "log2": _f("tl.log2({})"),
    "log10": _ld("log10"), "log1p": _ld("log1p"), "expm1": _ld("expm1"),
    "sqrt": _f("libdevice.sqrt({})"), "rsqrt": _f("libdevice.rsqrt({})"),
    "sin": _f("tl.sin({})"), "cos": _f("tl.cos({})"), "tan": _ld("tan"), "asin": _ld("asin"),
    "acos": _ld("acos"), "atan": _ld("atan"), "sinh": _ld("sinh"), "cosh": _ld("cosh"), "tanh": _ld("tanh"),
    "asinh": _ld("asinh"), "acosh": _ld("acosh"), "atanh": _ld("atanh"),
    "sigmoid": _f("(1.0 / (1.0 + tl.exp(-{})))"),
    "erf": _f("tl.erf({})"), "erfc": _ld("erfc"), "erfinv": _ld("erfinv"), "lgamma": _ld("lgamma"),
    "digamma": _f("_h.digamma({})"),
    "floor": _fi("tl.floor({})", "{}"), "ceil": _fi("tl.ceil({})", "{}"),
    "round": _fi("libdevice.nearbyint({})", "{}"), "trunc": _fi("libdevice.trunc({})", "{}"),
    "sign": lambda dts, out, a: (a if dts[0] is torch.bool else
                                 f"_h.sign_float({a})" if _is_f(dts[0]) else
                                 f"(({a} > 0).to({ctl(out)}) - ({a} < 0).to({ctl(out)}))"),
    "reciprocal": _f("(1.0 / {})"),
}

# ops computed in float64/float32 only (libdevice has no integer or low-precision overloads)
_FLOAT_ONLY = {"atan2", "hypot", "copysign", "nextafter", "log10", "log1p", "expm1", "sqrt", "rsqrt", "tan",
               "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "erf",
               "erfc", "erfinv", "lgamma", "digamma", "exp", "exp2", "log", "log2", "sin", "cos", "reciprocal"}


def op_expr(name: str, args: list[str], dts: list[torch.dtype], out: torch.dtype) -> str:
    """Triton expression for op ``name`` on arguments of (torch) dtypes ``dts`` giving dtype ``out``."""
    if name not in OPS:
        raise NotImplementedError(f"ember.codegen.triton: no Triton rule for pointwise op {name!r}")
    cdts = [compute_dtype(d) for d in dts]
    cout = compute_dtype(out)
    if name in _FLOAT_ONLY and cout.is_floating_point or name in ("add", "sub", "mul", "div", "floordiv", "remainder", "fmod", "maximum", "minimum",
                  "bitwise_and", "bitwise_or", "bitwise_xor") and len(set(cdts)) > 1 and cout != torch.bool:
        args = [a if d == cout else f"{a}.to({tl_dtype(cout)})" for a, d in zip(args, cdts)]
        cdts = [cout] * len(args)
    expr = OPS[name](cdts, out, *args)
    if cout is torch.bool and name in _PREDICATES:
        return expr
    if name in _SAME_TYPE and all(d == cout for d in (cdts[1:] if name == "where" else cdts)):
        return expr
    return f"{expr}.to({tl_dtype(cout)})"   # every template is atomic (parenthesized or a call)


_PREDICATES = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not",
               "isnan", "isinf", "isfinite", "signbit"}
# ops whose Triton result has the arguments' (common) type
_SAME_TYPE = {"add", "sub", "mul", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor", "neg",
              "abs", "where", "fmod", "floordiv", "remainder", "exp", "exp2", "log", "log2", "sin", "cos", "sqrt",
              "rsqrt", "floor", "ceil", "shift_left", "shift_right", "bitwise_not"}


def cast_expr(a: str, src: torch.dtype, dst: torch.dtype) -> str:
    """torch ``.to(dst)`` semantics: floats truncate to ints, anything nonzero is True, low-precision floats
    round (then live on in float32)."""
    if dst is torch.bool:
        return a if src is torch.bool else f"({a} != 0)"
    if dst in LOW_FLOAT:
        return f"{a}.to({tl_dtype(dst)}).to(tl.float32)"
    if compute_dtype(src) == dst:
        return a
    return f"{a}.to({tl_dtype(dst)})"
