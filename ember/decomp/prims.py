"""ember's closed set of primitives (part 1: pointwise, reductions, casts, constants).

Pointwise prims take tensors of ONE shape and ONE dtype (broadcasting is ``broadcast_in_dim``, casts are
``convert_element_type``); Python scalars may stand in for tensors when their kind (bool < int < float <
complex) does not exceed the tensor's. Reductions take canonical dims, ``keepdim`` and an explicit output
dtype. Views, indexing, RNG and extern prims live in ``prims_shape``; both register into ``core.PRIMS``.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from .core import PRIMS, Prim, register_prim
from .meta import (TensorMeta, canonical_dims, is_complex, is_float, is_int, is_tensorlike, kind_of_dtype,
                   kind_of_scalar, same_shape)

__all__ = ["PRIMS", "Prim"]


# pointwise -----------------------------------------------------------------------------------------
def _common(args: tuple, name: str) -> TensorMeta:
    tensors = [a for a in args if is_tensorlike(a)]
    if not tensors:
        raise TypeError(f"ember.decomp: prim {name} needs at least one tensor argument")
    t0 = tensors[0]
    for t in tensors[1:]:
        if t.dtype != t0.dtype:
            raise TypeError(f"ember.decomp: prim {name} got dtypes {t0.dtype} and {t.dtype}; insert "
                            "convert_element_type first")
        if not same_shape(t.shape, t0.shape):
            raise ValueError(f"ember.decomp: prim {name} got shapes {list(t0.shape)} and {list(t.shape)}; "
                             "insert broadcast_in_dim first")
    for a in args:
        if not is_tensorlike(a) and a is not None and kind_of_scalar(a) > kind_of_dtype(t0.dtype):
            raise TypeError(f"ember.decomp: prim {name}: scalar {a!r} has a higher kind than {t0.dtype}")
    return TensorMeta(t0.shape, t0.dtype, t0.device)


_DOMAINS: dict[str, Callable[[torch.dtype], bool]] = {
    "any": lambda dt: True,
    "float": lambda dt: is_float(dt) or is_complex(dt),
    "real_float": is_float,
    "int": lambda dt: is_int(dt) or dt is torch.bool,
    "real": lambda dt: not is_complex(dt),
    "numeric": lambda dt: dt is not torch.bool,
}


def _pointwise_meta(name: str, domain: str, result: str) -> Callable:
    def meta(*args: Any) -> TensorMeta:
        m = _common(args, name)
        if not _DOMAINS[domain](m.dtype):
            raise TypeError(f"ember.decomp: prim {name} does not accept {m.dtype} (domain {domain})")
        if result == "bool":
            m.dtype = torch.bool
        return m
    return meta


def _as_tensors(args: tuple) -> list:
    t0 = next(a for a in args if isinstance(a, torch.Tensor))
    return [a if isinstance(a, torch.Tensor) else torch.tensor(a, dtype=t0.dtype, device=t0.device)
            for a in args]


def _pointwise_impl(fn: Callable) -> Callable:
    def impl(*args: Any) -> torch.Tensor:
        return fn(*_as_tensors(args))
    return impl


def _int_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if is_float(a.dtype) or is_complex(a.dtype):
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode="trunc")


def _floordiv(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.div(a, b, rounding_mode="floor")


# name: (torch function, input domain, result: same|bool)
UNARY: dict[str, tuple[Callable, str, str]] = {
    "neg": (torch.neg, "numeric", "same"), "abs": (torch.abs, "numeric", "same"),
    "exp": (torch.exp, "float", "same"), "exp2": (torch.exp2, "float", "same"),
    "log": (torch.log, "float", "same"), "log2": (torch.log2, "float", "same"),
    "log10": (torch.log10, "float", "same"), "log1p": (torch.log1p, "float", "same"),
    "expm1": (torch.expm1, "float", "same"), "sqrt": (torch.sqrt, "float", "same"),
    "rsqrt": (torch.rsqrt, "float", "same"), "sin": (torch.sin, "float", "same"),
    "cos": (torch.cos, "float", "same"), "tan": (torch.tan, "float", "same"),
    "asin": (torch.asin, "float", "same"), "acos": (torch.acos, "float", "same"),
    "atan": (torch.atan, "float", "same"), "sinh": (torch.sinh, "float", "same"),
    "cosh": (torch.cosh, "float", "same"), "tanh": (torch.tanh, "float", "same"),
    "asinh": (torch.asinh, "float", "same"), "acosh": (torch.acosh, "float", "same"),
    "atanh": (torch.atanh, "float", "same"),
    "sigmoid": (torch.sigmoid, "float", "same"), "erf": (torch.erf, "real_float", "same"),
    "erfc": (torch.erfc, "real_float", "same"), "erfinv": (torch.erfinv, "real_float", "same"),
    "lgamma": (torch.lgamma, "real_float", "same"), "digamma": (torch.digamma, "real_float", "same"),
    "floor": (torch.floor, "real_float", "same"), "ceil": (torch.ceil, "real_float", "same"),
    "round": (torch.round, "real_float", "same"), "trunc": (torch.trunc, "real_float", "same"),
    "sign": (torch.sign, "real", "same"), "reciprocal": (torch.reciprocal, "float", "same"),
    "logical_not": (torch.logical_not, "any", "bool"), "bitwise_not": (torch.bitwise_not, "int", "same"),
    "isnan": (torch.isnan, "any", "bool"), "isinf": (torch.isinf, "any", "bool"),
    "isfinite": (torch.isfinite, "any", "bool"), "signbit": (torch.signbit, "real", "bool"),
}

BINARY: dict[str, tuple[Callable, str, str]] = {
    "add": (torch.add, "any", "same"), "sub": (torch.sub, "numeric", "same"),
    "mul": (torch.mul, "any", "same"), "div": (_int_div, "numeric", "same"),
    "floordiv": (_floordiv, "real", "same"), "remainder": (torch.remainder, "real", "same"),
    "fmod": (torch.fmod, "real", "same"),
    "pow": (torch.pow, "numeric", "same"), "maximum": (torch.maximum, "real", "same"),
    "minimum": (torch.minimum, "real", "same"), "atan2": (torch.atan2, "real_float", "same"),
    "hypot": (torch.hypot, "real_float", "same"), "copysign": (torch.copysign, "real_float", "same"),
    "nextafter": (torch.nextafter, "real_float", "same"),
    "eq": (torch.eq, "any", "bool"), "ne": (torch.ne, "any", "bool"), "lt": (torch.lt, "real", "bool"),
    "le": (torch.le, "real", "bool"), "gt": (torch.gt, "real", "bool"), "ge": (torch.ge, "real", "bool"),
    "logical_and": (torch.logical_and, "any", "bool"), "logical_or": (torch.logical_or, "any", "bool"),
    "logical_xor": (torch.logical_xor, "any", "bool"),
    "bitwise_and": (torch.bitwise_and, "int", "same"), "bitwise_or": (torch.bitwise_or, "int", "same"),
    "bitwise_xor": (torch.bitwise_xor, "int", "same"),
    "shift_left": (torch.bitwise_left_shift, "int", "same"),
    "shift_right": (torch.bitwise_right_shift, "int", "same"),
}

for _name, (_fn, _dom, _res) in {**UNARY, **BINARY}.items():
    register_prim(_name, _pointwise_impl(_fn), _pointwise_meta(_name, _dom, _res), "pointwise")


def _where_meta(cond: Any, a: Any, b: Any) -> TensorMeta:
    if not is_tensorlike(cond) or cond.dtype is not torch.bool:
        raise TypeError("ember.decomp: prim where needs a bool tensor condition")
    vals = [x for x in (a, b) if is_tensorlike(x)]
    m = _common((cond, *vals), "where") if not vals else _common(tuple(vals) + (a, b), "where")
    if not same_shape(cond.shape, m.shape):
        raise ValueError("ember.decomp: prim where needs the condition and values of one shape")
    return TensorMeta(cond.shape, m.dtype if vals else cond.dtype, cond.device)


def _where_impl(cond: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
    if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
        raise TypeError("ember.decomp: prim where needs a tensor value")
    a, b = _as_tensors((a, b))
    return torch.where(cond, a, b)


register_prim("where", _where_impl, _where_meta, "pointwise")


# casts ------------------------------------------------------------------------------------------------
def _convert_meta(x: Any, dtype: torch.dtype) -> TensorMeta:
    return TensorMeta(x.shape, dtype, x.device)


register_prim("convert_element_type", lambda x, dtype: x.to(dtype), _convert_meta, "cast")


# reductions --------------------------------------------------------------------------------------------
def _reduced_shape(shape: tuple, dims: tuple, keepdim: bool) -> tuple:
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def _reduction_meta(name: str, result: str) -> Callable:
    def meta(x: Any, dims: Any, keepdim: bool = False, dtype: torch.dtype | None = None) -> TensorMeta:
        d = canonical_dims(dims, x.ndim)
        out = {"same": dtype or x.dtype, "bool": torch.bool, "long": torch.int64}[result]
        return TensorMeta(_reduced_shape(tuple(x.shape), d, keepdim), out, x.device)
    return meta


def _reduce_impl(fn: Callable, result: str) -> Callable:
    def impl(x: torch.Tensor, dims: Any, keepdim: bool = False, dtype: torch.dtype | None = None):
        d = canonical_dims(dims, x.ndim)
        out_dtype = dtype or x.dtype
        x = x.to(out_dtype)
        if x.ndim == 0 or not d:
            return x.clone() if result == "same" else fn(x.unsqueeze(0), (0,), False)
        out = fn(x, d, keepdim)
        return out.to(out_dtype) if result == "same" else out
    return impl


def _over_dims(f: Callable) -> Callable:
    def fn(x: torch.Tensor, dims: tuple, keepdim: bool) -> torch.Tensor:
        for d in sorted(dims, reverse=True):
            x = f(x, d, keepdim)
        return x
    return fn


REDUCTIONS: dict[str, tuple[Callable, str]] = {
    "sum": (lambda x, d, k: torch.sum(x, d, keepdim=k), "same"),
    "prod": (_over_dims(lambda x, d, k: torch.prod(x, d, keepdim=k)), "same"),
    "amax": (lambda x, d, k: torch.amax(x, d, keepdim=k), "same"),
    "amin": (lambda x, d, k: torch.amin(x, d, keepdim=k), "same"),
    "any": (_over_dims(lambda x, d, k: torch.any(x, d, keepdim=k)), "bool"),
    "all": (_over_dims(lambda x, d, k: torch.all(x, d, keepdim=k)), "bool"),
}

for _name, (_fn, _res) in REDUCTIONS.items():
    register_prim(_name, _reduce_impl(_fn, _res), _reduction_meta(_name, _res), "reduction")


def _arg_meta(x: Any, dim: int, keepdim: bool = False) -> TensorMeta:
    return _reduction_meta("argmax", "long")(x, (dim,), keepdim)


def _arg_impl(fn: Callable) -> Callable:
    def impl(x: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
        return fn(x, dim, keepdim=keepdim)
    return impl


register_prim("argmax", _arg_impl(torch.argmax), _arg_meta, "reduction")
register_prim("argmin", _arg_impl(torch.argmin), _arg_meta, "reduction")


def _var_mean_meta(x: Any, dims: Any, correction: float = 1, keepdim: bool = False) -> tuple:
    if not is_float(x.dtype):
        raise TypeError(f"ember.decomp: prim var_mean needs a floating dtype, got {x.dtype}")
    m = _reduction_meta("var_mean", "same")(x, dims, keepdim)
    return m, TensorMeta(m.shape, m.dtype, m.device)


def _var_mean_impl(x: torch.Tensor, dims: Any, correction: float = 1, keepdim: bool = False) -> tuple:
    d = canonical_dims(dims, x.ndim)
    if not d:  # nothing reduced: each element is its own sample
        return torch.var_mean(x.unsqueeze(-1), -1, correction=correction)
    return torch.var_mean(x, d, correction=correction, keepdim=keepdim)


register_prim("var_mean", _var_mean_impl, _var_mean_meta, "reduction", tags=("multi_output", "welford"))


# constants ---------------------------------------------------------------------------------------------
def _full_meta(shape: Any, value: Any, dtype: torch.dtype, device: Any = "cpu") -> TensorMeta:
    return TensorMeta(tuple(shape), dtype, device)


def _full_impl(shape: Any, value: Any, dtype: torch.dtype, device: Any = "cpu") -> torch.Tensor:
    return torch.full(tuple(shape), value, dtype=dtype, device=device)


def _iota_meta(length: Any, start: Any, step: Any, dtype: torch.dtype, device: Any = "cpu") -> TensorMeta:
    return TensorMeta((length,), dtype, device)


def _iota_impl(length: int, start: Any, step: Any, dtype: torch.dtype, device: Any = "cpu") -> torch.Tensor:
    idx = torch.arange(length, dtype=torch.int64 if not is_float(dtype) else torch.float64, device=device)
    return (idx * step + start).to(dtype)


def _empty_impl(shape: Any, dtype: torch.dtype, device: Any = "cpu") -> torch.Tensor:
    return torch.empty(tuple(shape), dtype=dtype, device=device)


def _empty_meta(shape: Any, dtype: torch.dtype, device: Any = "cpu") -> TensorMeta:
    return TensorMeta(tuple(shape), dtype, device)


register_prim("full", _full_impl, _full_meta, "constant")
register_prim("iota", _iota_impl, _iota_meta, "constant")
register_prim("empty", _empty_impl, _empty_meta, "constant")

from . import prims_shape  # noqa: E402,F401  (registers the rest of the set)


def __getattr__(name: str) -> Prim:
    try:
        return PRIMS[name]
    except KeyError:
        raise AttributeError(f"ember.decomp.prims has no prim {name!r}") from None
