"""C++ op tables for the CPU backend: dtypes, constants, sympy index printing and one rule per pointwise op.

Every value of a kernel body is a C++ scalar of its *compute* type (bf16/fp16 compute in float and are rounded
to their storage type where eager rounds: casts, op results, stores). Rules take the C expressions of the
arguments, the argument dtypes and the result dtype and return a C expression with torch's semantics
(integer division truncates, floordiv/remainder follow Python's sign rules, maximum/minimum propagate NaN,
out-of-range shifts give 0 or the sign fill). Math calls use the C names (``expf``) so GCC can vectorize them
with glibc's vector math library (see ``cpp_prelude``).
"""
from __future__ import annotations

import re
from typing import Any, Callable

import sympy
import torch

from ember.emit import c_float, c_int

def cname(name: str) -> str:
    """A buffer's pointer name in C++ source (``p_<name>``, non-word characters replaced)."""
    return "p_" + re.sub(r"\W", "_", name)


# storage type (pointer element), compute type
CTYPES: dict[torch.dtype, tuple[str, str]] = {
    torch.float32: ("float", "float"), torch.float64: ("double", "double"),
    torch.bfloat16: ("uint16_t", "float"), torch.float16: ("_Float16", "float"),
    torch.int64: ("int64_t", "int64_t"), torch.int32: ("int32_t", "int32_t"),
    torch.int16: ("int16_t", "int16_t"), torch.int8: ("int8_t", "int8_t"),
    torch.uint8: ("uint8_t", "uint8_t"), torch.bool: ("bool", "bool"),
    torch.uint16: ("uint16_t", "uint16_t"), torch.uint32: ("uint32_t", "uint32_t"),
    torch.uint64: ("uint64_t", "uint64_t"),
}
LOW_PRECISION = {torch.bfloat16: "bf16", torch.float16: "f16"}


def _ct(dtype: torch.dtype, i: int) -> str:
    try:
        return CTYPES[dtype][i]
    except KeyError:
        raise NotImplementedError(f"ember.codegen.cpp: dtype {dtype} is not supported by the C++ backend") from None


def storage_type(dtype: torch.dtype) -> str:
    return _ct(dtype, 0)


def compute_type(dtype: torch.dtype) -> str:
    return _ct(dtype, 1)


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def load_expr(dtype: torch.dtype, ptr: str, index: str) -> str:
    if dtype is torch.bfloat16:
        return f"ember_bf16_to_float({ptr}[{index}])"
    if dtype is torch.float16:
        return f"((float){ptr}[{index}])"
    return f"{ptr}[{index}]"


def store_value(dtype: torch.dtype, v: str) -> str:
    if dtype is torch.bfloat16:
        return f"ember_float_to_bf16({v})"
    if dtype is torch.float16:
        return f"((_Float16){v})"
    return v


def round_low(dtype: torch.dtype, v: str) -> str:
    """``v`` (a float) rounded to the precision of ``dtype`` when it is bf16/fp16 (eager rounds every op)."""
    lp = LOW_PRECISION.get(dtype)
    return f"ember_round_{lp}({v})" if lp else v


# -- constants --------------------------------------------------------------------------------------------------
def const(value: Any, dtype: torch.dtype) -> str:
    """A constant of the program (a user's nan, inf, -0.0 included) as C++, through ``ember.emit``."""
    if dtype is torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        return c_float(value, compute_type(dtype))
    if dtype.is_complex:
        raise NotImplementedError("ember.codegen.cpp: complex constants")
    return c_int(value, compute_type(dtype))


# -- index expressions ------------------------------------------------------------------------------------------
def _ceiling_as_floor(e: Any) -> Any:
    """``ceiling(n/d)`` as ``floor((n + d - 1)/d)`` (equal for integer ``n`` and positive integer ``d``)."""
    num, den = sympy.fraction(sympy.together(e.args[0]))
    if not (den.is_positive or (den.is_Integer and int(den) > 0)):
        raise NotImplementedError(f"ember.codegen: index expression {e!r}")
    return sympy.floor((num + den - 1) / den) if den != 1 else num


def index(e: Any) -> str:
    """A sympy integer or boolean index expression as C (int64_t arithmetic)."""
    if isinstance(e, bool) or e is sympy.true or e is sympy.false:
        return "true" if e in (True, sympy.true) else "false"
    if isinstance(e, int):
        return f"{e}LL" if abs(e) >= 2**31 else str(e)
    if isinstance(e, sympy.Integer):
        return index(int(e))
    if isinstance(e, sympy.Symbol):
        if e.name not in ("xindex", "rindex", "findex") and not e.name.startswith("tmp") and \
                not (e.name[:1] in "siu" and e.name[1:].isdigit()):     # a size symbol: a kernel argument
            raise NotImplementedError(f"ember.codegen.cpp: symbol {e} in an index")
        return e.name
    if isinstance(e, sympy.Add):
        terms = sorted(e.args, key=lambda a: (a.is_Number, str(a)))
        return "(" + " + ".join(index(a) for a in terms) + ")"
    if isinstance(e, sympy.Mul):
        return "(" + " * ".join(index(a) for a in e.args) + ")"
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) > 0:
        return "(" + " * ".join([index(e.base)] * int(e.exp)) + ")"
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if den == 1:
            return index(num)
        if num.is_nonnegative and den.is_positive:
            return f"({index(num)} / {index(den)})"
        return f"ember_floordiv_int({index(num)}, (int64_t){index(den)})"
    if isinstance(e, sympy.ceiling):     # a stepped slice's length: ceil(n/d) = floor((n + d - 1)/d), d > 0
        return index(_ceiling_as_floor(e))
    if isinstance(e, sympy.Mod):
        a, b = e.args
        if a.is_nonnegative and b.is_positive:
            return f"({index(a)} % {index(b)})"
        return f"ember_remainder_int({index(a)}, (int64_t){index(b)})"
    rel = {sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">", sympy.Ge: ">=", sympy.Eq: "==", sympy.Ne: "!="}
    for cls, opr in rel.items():
        if isinstance(e, cls):
            return f"({index(e.args[0])} {opr} {index(e.args[1])})"
    if isinstance(e, sympy.And):
        return "(" + " && ".join(index(a) for a in e.args) + ")"
    if isinstance(e, sympy.Or):
        return "(" + " || ".join(index(a) for a in e.args) + ")"
    if isinstance(e, sympy.Not):
        return f"(!{index(e.args[0])})"
    if isinstance(e, (sympy.Min, sympy.Max)):
        fn = "std::min" if isinstance(e, sympy.Min) else "std::max"
        out = index(e.args[0])
        for a in e.args[1:]:
            out = f"{fn}<int64_t>({out}, {index(a)})"
        return out
    raise NotImplementedError(f"ember.codegen.cpp: index expression {e!r}")


# -- pointwise ops ----------------------------------------------------------------------------------------------
Rule = Callable[[list, list, torch.dtype], str]


# float functions the preludes define inline (ember.codegen.cpp_vec: the vector loops' algorithms, so a value has
# the same bits in a vector loop, its scalar tail and a scalar kernel)
_INLINE_FLOAT = {"exp": "ember_expf", "tanh": "ember_tanhf", "erf": "ember_erff"}


def _f(name: str, dtype: torch.dtype) -> str:
    """C math function for a float compute type: ``expf`` for float (vectorizable via libmvec), ``exp``."""
    if compute_type(dtype) == "float":
        return _INLINE_FLOAT.get(name, name + "f")
    return name


def _math(name: str) -> Rule:
    def rule(a: list, dts: list, out: torch.dtype) -> str:
        ct = compute_type(out)
        return f"{_f(name, out)}(({ct}){a[0]})"
    return rule


def _math2(name: str) -> Rule:
    def rule(a: list, dts: list, out: torch.dtype) -> str:
        ct = compute_type(out)
        return f"{_f(name, out)}(({ct}){a[0]}, ({ct}){a[1]})"
    return rule


def _binop(op: str) -> Rule:
    return lambda a, dts, out: f"({a[0]} {op} {a[1]})"


def _by_kind(float_rule: Rule, int_rule: Rule, bool_rule: Rule | None = None) -> Rule:
    def rule(a: list, dts: list, out: torch.dtype) -> str:
        dt = dts[0]
        if dt is torch.bool and bool_rule is not None:
            return bool_rule(a, dts, out)
        return (float_rule if dt.is_floating_point else int_rule)(a, dts, out)
    return rule


def _helper(name: str) -> Rule:
    return lambda a, dts, out: f"{name}({', '.join(a)})"


def _typed_helper(name: str) -> Rule:
    return lambda a, dts, out: f"{name}<{compute_type(out)}>({', '.join(f'({compute_type(out)}){x}' for x in a)})"


def _ident(a: list, dts: list, out: torch.dtype) -> str:
    return a[0]


def _cmp(op: str) -> Rule:
    return lambda a, dts, out: f"({a[0]} {op} {a[1]})"


def _bool_of(x: str) -> str:
    return f"({x} != 0)"


OPS: dict[str, Rule] = {
    "add": _binop("+"), "sub": _binop("-"), "mul": _binop("*"),
    "div": _by_kind(_binop("/"), _typed_helper("ember_div_trunc")),
    "floordiv": _by_kind(_typed_helper("ember_floordiv_float"), _typed_helper("ember_floordiv_int")),
    "remainder": _by_kind(_typed_helper("ember_remainder_float"), _typed_helper("ember_remainder_int")),
    "fmod": _by_kind(_math2("fmod"), _typed_helper("ember_fmod_int")),
    "pow": _by_kind(_math2("pow"), _typed_helper("ember_pow_int")),
    "maximum": _by_kind(_typed_helper("ember_maximum"), lambda a, d, o: f"std::max<{compute_type(o)}>({a[0]}, {a[1]})"),
    "minimum": _by_kind(_typed_helper("ember_minimum"), lambda a, d, o: f"std::min<{compute_type(o)}>({a[0]}, {a[1]})"),
    "atan2": _math2("atan2"), "hypot": _math2("hypot"), "copysign": _math2("copysign"),
    "nextafter": _math2("nextafter"),
    "bitwise_and": _binop("&"), "bitwise_or": _binop("|"), "bitwise_xor": _binop("^"),
    "shift_left": _typed_helper("ember_shl"), "shift_right": _typed_helper("ember_shr"),
    "eq": _cmp("=="), "ne": _cmp("!="), "lt": _cmp("<"), "le": _cmp("<="), "gt": _cmp(">"), "ge": _cmp(">="),
    "logical_and": lambda a, d, o: f"({_bool_of(a[0])} && {_bool_of(a[1])})",
    "logical_or": lambda a, d, o: f"({_bool_of(a[0])} || {_bool_of(a[1])})",
    "logical_xor": lambda a, d, o: f"({_bool_of(a[0])} != {_bool_of(a[1])})",
    "logical_not": lambda a, d, o: f"(!{_bool_of(a[0])})",
    "isnan": _by_kind(lambda a, d, o: f"({a[0]} != {a[0]})", lambda a, d, o: "false"),
    "isinf": _by_kind(lambda a, d, o: f"std::isinf({a[0]})", lambda a, d, o: "false"),
    "isfinite": _by_kind(lambda a, d, o: f"std::isfinite({a[0]})", lambda a, d, o: "true"),
    "signbit": _by_kind(lambda a, d, o: f"std::signbit({a[0]})", lambda a, d, o: f"({a[0]} < 0)",
                        lambda a, d, o: "false"),
    "where": lambda a, d, o: f"({a[0]} ? ({compute_type(o)}){a[1]} : ({compute_type(o)}){a[2]})",
    "bitwise_not": _by_kind(_ident, lambda a, d, o: f"(~{a[0]})", lambda a, d, o: f"(!{a[0]})"),
    "neg": lambda a, d, o: f"(-{a[0]})",
    "abs": _by_kind(_math("fabs"), lambda a, d, o: f"({a[0]} < 0 ? -{a[0]} : {a[0]})", _ident),
    "rsqrt": lambda a, d, o: f"(({compute_type(o)})1 / {_f('sqrt', o)}({a[0]}))",
    "reciprocal": lambda a, d, o: f"(({compute_type(o)})1 / ({compute_type(o)}){a[0]})",
    "sigmoid": lambda a, d, o: f"(({compute_type(o)})1 / (({compute_type(o)})1 + {_f('exp', o)}(-{a[0]})))",
    "sign": lambda a, d, o: f"(({compute_type(o)})((0 < {a[0]}) - ({a[0]} < 0)))",
    "erfinv": _typed_helper("ember_erfinv"), "digamma": _typed_helper("ember_digamma"),
    "round": _by_kind(_math("nearbyint"), _ident),
    "floor": _by_kind(_math("floor"), _ident), "ceil": _by_kind(_math("ceil"), _ident),
    "trunc": _by_kind(_math("trunc"), _ident),
}
for _n in ("exp exp2 log log2 log10 log1p expm1 sqrt sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh "
           "erf erfc lgamma").split():
    OPS[_n] = _math(_n)


def op(name: str, args: list[str], dts: list[torch.dtype], out: torch.dtype) -> str:
    rule = OPS.get(name)
    if rule is None:
        raise NotImplementedError(f"ember.codegen.cpp: no C++ rule for pointwise op {name!r}")
    return rule(args, dts, out)


def cast(v: str, src: torch.dtype, dst: torch.dtype) -> str:
    """torch's conversion semantics: float->int truncates (via int64 for uint8, as eager), x->bool is x != 0."""
    if src == dst:
        return v
    ct = compute_type(dst)
    if dst is torch.bool:
        return f"({v} != 0)"
    if src.is_floating_point and not dst.is_floating_point:
        via = "int64_t" if dst in (torch.uint8, torch.uint16, torch.uint32) else (
            "int32_t" if dst in (torch.int8, torch.int16) else None)
        return f"(({ct})({via}){v})" if via else f"(({ct}){v})"
    return round_low(dst, f"(({ct}){v})")
