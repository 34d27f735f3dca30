"""Decompositions of pointwise ATen ops: arithmetic with type promotion, activations and their backwards.

Tables map ATen overloads to a prim and a promotion kind; compound ops (gelu, softplus, ...) compute in the
op-math dtype (float32 for half precision) and cast back once, as ATen's kernels do.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from . import prims as P
from .helpers import (ALWAYS_BOOL, COMPLEX_TO_FLOAT, DEFAULT, INT_TO_FLOAT, NO_OPMATH, elementwise,
                      elementwise_dtypes, float_opmath, to, where)
from .meta import is_float, is_tensorlike, kind_of_dtype
from .registry import register_decomposition

aten = torch.ops.aten


def add(a: Any, b: Any) -> Any:
    return elementwise(P.add, a, b)


def sub(a: Any, b: Any) -> Any:
    return elementwise(P.sub, a, b)


def mul(a: Any, b: Any) -> Any:
    return elementwise(P.mul, a, b)


def div(a: Any, b: Any) -> Any:
    return elementwise(P.div, a, b, kind=INT_TO_FLOAT)


def gt(a: Any, b: Any) -> Any:
    return elementwise(P.gt, a, b, kind=ALWAYS_BOOL)


def le(a: Any, b: Any) -> Any:
    return elementwise(P.le, a, b, kind=ALWAYS_BOOL)


def _unary(prim: Any, kind: str) -> Any:
    def fn(x: Any) -> Any:
        return elementwise(prim, x, kind=kind)
    return fn


UNARY_OPS = {
    "neg": DEFAULT, "abs": COMPLEX_TO_FLOAT, "exp": INT_TO_FLOAT, "exp2": INT_TO_FLOAT, "log": INT_TO_FLOAT,
    "log2": INT_TO_FLOAT, "log10": INT_TO_FLOAT, "log1p": INT_TO_FLOAT, "expm1": INT_TO_FLOAT,
    "sqrt": INT_TO_FLOAT, "rsqrt": INT_TO_FLOAT, "sin": INT_TO_FLOAT, "cos": INT_TO_FLOAT,
    "tan": INT_TO_FLOAT, "asin": INT_TO_FLOAT, "acos": INT_TO_FLOAT, "atan": INT_TO_FLOAT,
    "sinh": INT_TO_FLOAT, "cosh": INT_TO_FLOAT, "tanh": INT_TO_FLOAT, "asinh": INT_TO_FLOAT,
    "acosh": INT_TO_FLOAT, "atanh": INT_TO_FLOAT, "sigmoid": INT_TO_FLOAT, "erf": INT_TO_FLOAT,
    "erfc": INT_TO_FLOAT, "erfinv": INT_TO_FLOAT, "lgamma": INT_TO_FLOAT, "digamma": INT_TO_FLOAT,
    "reciprocal": INT_TO_FLOAT, "sign": DEFAULT, "bitwise_not": DEFAULT,
    "logical_not": ALWAYS_BOOL, "isnan": ALWAYS_BOOL, "signbit": ALWAYS_BOOL,
}
for _name, _kind in UNARY_OPS.items():
    register_decomposition(getattr(aten, _name).default)(_unary(P.PRIMS[_name], _kind))


def _rounding_op(name: str) -> Any:
    def fn(x: Any) -> Any:
        if not is_float(x.dtype):
            return P.clone(x)
        return elementwise(P.PRIMS[name], x)
    return fn


for _name in ("floor", "ceil", "trunc", "round"):
    register_decomposition(getattr(aten, _name).default)(_rounding_op(_name))


def _with_alpha(op: Any) -> Any:
    """``a op alpha * b`` (aten.add / aten.sub), alpha applied in the computation dtype."""
    def fn(a: Any, b: Any, alpha: Any = None) -> Any:
        if alpha is None or alpha == 1:
            return op(a, b)
        compute, result = elementwise_dtypes(a, b)
        return to(op(to(a, compute), mul(to(b, compute), alpha)), result)
    return fn


_add = register_decomposition(aten.add.Tensor, aten.add.Scalar)(_with_alpha(add))
_sub = register_decomposition(aten.sub.Tensor, aten.sub.Scalar)(_with_alpha(sub))


@register_decomposition(aten.rsub.Tensor, aten.rsub.Scalar)
def _rsub(a: Any, b: Any, alpha: Any = None) -> Any:
    return _sub(b, a, alpha)


register_decomposition(aten.mul.Tensor, aten.mul.Scalar)(mul)


@register_decomposition(aten.div.Tensor, aten.div.Scalar)
def _div(a: Any, b: Any) -> Any:
    return div(a, b)


@register_decomposition(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(a: Any, b: Any, rounding_mode: str | None = None) -> Any:
    if rounding_mode is None:
        return div(a, b)
    if rounding_mode == "floor":
        return elementwise(P.floordiv, a, b, kind=NO_OPMATH)
    compute, result = elementwise_dtypes(a, b, kind=NO_OPMATH)
    q = elementwise(P.div, to(a, compute), to(b, compute), kind=NO_OPMATH)
    return to(P.trunc(q) if is_float(compute) else q, result)


BINARY_OPS = {
    "maximum": ("maximum", DEFAULT), "minimum": ("minimum", DEFAULT), "atan2": ("atan2", INT_TO_FLOAT),
    "hypot": ("hypot", DEFAULT), "copysign": ("copysign", INT_TO_FLOAT),
    "logical_and": ("logical_and", ALWAYS_BOOL), "logical_or": ("logical_or", ALWAYS_BOOL),
    "logical_xor": ("logical_xor", ALWAYS_BOOL), "fmax": None, "fmin": None,
}


def _binary(prim: Any, kind: str) -> Any:
    def fn(a: Any, b: Any) -> Any:
        return elementwise(prim, a, b, kind=kind)
    return fn


for _name, _spec in BINARY_OPS.items():
    if _spec is not None:
        register_decomposition(getattr(aten, _name).default)(_binary(P.PRIMS[_spec[0]], _spec[1]))

for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    _op = getattr(aten, _name)
    register_decomposition(_op.Tensor, _op.Scalar)(_binary(P.PRIMS[_name], ALWAYS_BOOL))

for _name, _prim in (("bitwise_and", "bitwise_and"), ("bitwise_or", "bitwise_or"),
                     ("bitwise_xor", "bitwise_xor"), ("bitwise_left_shift", "shift_left"),
                     ("bitwise_right_shift", "shift_right")):
    _op = getattr(aten, _name)
    _ovs = [getattr(_op, o) for o in ("Tensor", "Scalar", "Tensor_Scalar") if o in _op.overloads()]
    register_decomposition(*_ovs)(_binary(P.PRIMS[_prim], NO_OPMATH))

for _name in ("remainder", "fmod"):
    _op = getattr(aten, _name)
    register_decomposition(_op.Tensor, _op.Scalar)(_binary(P.PRIMS[_name], NO_OPMATH))


@register_decomposition(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def _pow(a: Any, b: Any) -> Any:
    if is_tensorlike(a) and not is_tensorlike(b) and type(b) in (int, float):
        # eager's own special cases of a tensor to a scalar power (ATen's pow_tensor_scalar_optimized_kernel):
        # multiplications, sqrt and reciprocals instead of powf, with the same inf/nan/-0 results
        k = kind_of_dtype(a.dtype)
        if b == 2 and k >= 1:
            return mul(a, a)
        # float and double take every special case; bfloat16 all but -2; float16 none (std::pow)
        full = a.dtype in (torch.float32, torch.float64) or a.dtype is torch.bfloat16 and b != -2
        if b == 3 and (full or k == 1 and type(b) is int):
            return elementwise(lambda x: P.mul(P.mul(x, x), x), a)
        special = {0.5: lambda x: P.sqrt(x), -0.5: lambda x: P.rsqrt(x), -1: lambda x: P.reciprocal(x),
                   -2: lambda x: P.reciprocal(P.mul(x, x))}.get(b)
        if special is not None and full:
            return elementwise(special, a)
    return elementwise(P.pow, a, b)


# activations --------------------------------------------------------------------------------------------
def _act(fn: Any) -> Any:
    """Wrap fn(x_opmath) -> y so the result is cast back to x's (float) dtype."""
    def wrapped(x: Any, *args: Any, **kwargs: Any) -> Any:
        xf = float_opmath(x)
        out_dtype = x.dtype if is_float(x.dtype) else xf.dtype
        return to(fn(xf, *args, **kwargs), out_dtype)
    return wrapped


@register_decomposition(aten.relu.default)
def _relu(x: Any) -> Any:
    return P.maximum(x, 0) if x.dtype is not torch.bool else P.clone(x)


@register_decomposition(aten.gelu.default)
@_act
def _gelu(x: Any, approximate: str = "none") -> Any:
    if approximate == "tanh":
        inner = P.mul(P.add(x, P.mul(P.mul(P.mul(x, x), x), 0.044715)), math.sqrt(2 / math.pi))
        return P.mul(P.mul(x, 0.5), P.add(P.tanh(inner), 1.0))
    return P.mul(P.mul(x, 0.5), P.add(P.erf(P.mul(x, 1 / math.sqrt(2))), 1.0))


@register_decomposition(aten.silu.default)
@_act
def _silu(x: Any) -> Any:
    return P.mul(x, P.sigmoid(x))


def _softplus_f(x: Any, beta: Any = 1, threshold: Any = 20) -> Any:
    bx = P.mul(x, float(beta))
    soft = P.div(P.log1p(P.exp(bx)), float(beta))
    return P.where(P.gt(bx, float(threshold)), x, soft)


register_decomposition(aten.softplus.default)(_act(_softplus_f))


@register_decomposition(aten.mish.default)
@_act
def _mish(x: Any) -> Any:
    return P.mul(x, P.tanh(_softplus_f(x)))


@register_decomposition(aten.leaky_relu.default)
@_act
def _leaky_relu(x: Any, negative_slope: Any = 0.01) -> Any:
    return P.where(P.gt(x, 0.0), x, P.mul(x, float(negative_slope)))


@register_decomposition(aten.elu.default)
@_act
def _elu(x: Any, alpha: Any = 1, scale: Any = 1, input_scale: Any = 1) -> Any:
    neg = P.mul(P.expm1(P.mul(x, float(input_scale))), float(alpha) * float(scale))
    return P.where(P.gt(x, 0.0), P.mul(x, float(scale)), neg)


@register_decomposition(aten.hardsigmoid.default)
@_act
def _hardsigmoid(x: Any) -> Any:
    return P.div(P.minimum(P.maximum(P.add(x, 3.0), 0.0), 6.0), 6.0)


@register_decomposition(aten.hardswish.default)
@_act
def _hardswish(x: Any) -> Any:
    return P.div(P.mul(x, P.minimum(P.maximum(P.add(x, 3.0), 0.0), 6.0)), 6.0)


@register_decomposition(aten.logit.default)
@_act
def _logit(x: Any, eps: Any = None) -> Any:
    if eps is not None:
        x = P.minimum(P.maximum(x, float(eps)), 1.0 - float(eps))
    return P.log(P.div(x, P.sub(P.full(tuple(x.shape), 1.0, x.dtype, x.device), x)))


@register_decomposition(aten.clamp.default, aten.clamp.Tensor)
def _clamp(x: Any, min: Any = None, max: Any = None) -> Any:
    compute, result = elementwise_dtypes(x, min, max, kind=NO_OPMATH)
    out = to(x, compute)
    if min is not None:
        out = elementwise(P.maximum, out, to(min, compute), kind=NO_OPMATH)
    if max is not None:
        out = elementwise(P.minimum, out, to(max, compute), kind=NO_OPMATH)
    return to(out, result)


@register_decomposition(aten.clamp_min.default, aten.clamp_min.Tensor)
def _clamp_min(x: Any, min: Any) -> Any:
    return _clamp(x, min, None)


@register_decomposition(aten.clamp_max.default, aten.clamp_max.Tensor)
def _clamp_max(x: Any, max: Any) -> Any:
    return _clamp(x, None, max)


@register_decomposition(aten.hardtanh.default)
def _hardtanh(x: Any, min_val: Any = -1, max_val: Any = 1) -> Any:
    return _clamp(x, min_val, max_val)


@register_decomposition(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(cond: Any, a: Any, b: Any) -> Any:
    return where(to(cond, torch.bool), a, b)


@register_decomposition(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(x: Any, mask: Any, value: Any) -> Any:
    return where(mask, to(value, x.dtype), x)


@register_decomposition(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(a: Any, b: Any, w: Any) -> Any:
    return add(a, mul(w, sub(b, a)))


@register_decomposition(aten.addcmul.default)
def _addcmul(x: Any, t1: Any, t2: Any, value: Any = 1) -> Any:
    return add(x, mul(mul(t1, t2), value))


@register_decomposition(aten.addcdiv.default)
def _addcdiv(x: Any, t1: Any, t2: Any, value: Any = 1) -> Any:
    return add(x, mul(div(t1, t2), value))


@register_decomposition(aten.nan_to_num.default)
def _nan_to_num(x: Any, nan: Any = None, posinf: Any = None, neginf: Any = None) -> Any:
    if not is_float(x.dtype):
        return P.clone(x)
    info = torch.finfo(x.dtype)
    x = P.where(P.isnan(x), P.full(tuple(x.shape), float(nan or 0.0), x.dtype, x.device), x)
    hi = float(posinf) if posinf is not None else info.max
    lo = float(neginf) if neginf is not None else info.min
    x = P.where(P.logical_and(P.isinf(x), P.gt(x, 0.0)), P.full(tuple(x.shape), hi, x.dtype, x.device), x)
    return P.where(P.logical_and(P.isinf(x), P.lt(x, 0.0)), P.full(tuple(x.shape), lo, x.dtype, x.device), x)
