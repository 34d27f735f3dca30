"""Decompositions of reductions: sum/mean/prod/var/std/amax/max/argmax/any/all, logsumexp, softmax family.

Reductions accumulate in the op-math dtype (float32 for half precision; int64 for integer sums) and cast to
the result dtype once; softmax and log_softmax subtract the max first (numerically stable).
"""
from __future__ import annotations

from typing import Any

import torch

from . import prims as P
from .helpers import keep_shape, numel_of, opmath, reduced_dims, to, where
from .meta import canonical_dim, canonical_dims, is_float, kind_of_dtype, opmath_dtype
from .registry import register_decomposition

aten = torch.ops.aten


def _sum_dtype(x: Any, dtype: torch.dtype | None) -> torch.dtype:
    if dtype is not None:
        return dtype
    return torch.int64 if kind_of_dtype(x.dtype) < 2 else x.dtype


def reduce_sum(x: Any, dims: Any, keepdim: bool = False, dtype: torch.dtype | None = None) -> Any:
    out = _sum_dtype(x, dtype)
    return to(P.sum(to(x, opmath_dtype(out)), reduced_dims(x, dims), keepdim), out)


@register_decomposition(aten.sum.default)
def _sum(x: Any, dtype: torch.dtype | None = None) -> Any:
    return reduce_sum(x, None, False, dtype)


@register_decomposition(aten.sum.dim_IntList)
def _sum_dim(x: Any, dim: Any, keepdim: bool = False, dtype: torch.dtype | None = None) -> Any:
    return reduce_sum(x, dim, keepdim, dtype)


def mean(x: Any, dim: Any, keepdim: bool = False, dtype: torch.dtype | None = None) -> Any:
    out = dtype or x.dtype
    dims = reduced_dims(x, dim)
    s = P.sum(to(x, opmath_dtype(out)), dims, keepdim)
    n = numel_of(x, dims)
    return to(P.div(s, float(n) if isinstance(n, int) else n), out)


@register_decomposition(aten.mean.default)
def _mean(x: Any, dtype: torch.dtype | None = None) -> Any:
    return mean(x, None, False, dtype)


@register_decomposition(aten.mean.dim)
def _mean_dim(x: Any, dim: Any, keepdim: bool = False, dtype: torch.dtype | None = None) -> Any:
    return mean(x, dim, keepdim, dtype)


def _correction(correction: Any, unbiased: Any = None) -> float:
    if correction is not None:
        return float(correction)
    return 1.0 if unbiased is None or unbiased else 0.0


def var_mean(x: Any, dim: Any, correction: float, keepdim: bool) -> tuple[Any, Any]:
    var, m = P.var_mean(opmath(x), reduced_dims(x, dim), correction, keepdim)
    return to(var, x.dtype), to(m, x.dtype)


@register_decomposition(aten.var.correction)
def _var(x: Any, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    return var_mean(x, dim, _correction(correction), keepdim)[0]


@register_decomposition(aten.var.dim)
def _var_dim(x: Any, dim: Any = None, unbiased: bool = True, keepdim: bool = False) -> Any:
    return var_mean(x, dim, _correction(None, unbiased), keepdim)[0]


@register_decomposition(aten.var.default)
def _var_default(x: Any, unbiased: bool = True) -> Any:
    return var_mean(x, None, _correction(None, unbiased), False)[0]


@register_decomposition(aten.std.correction)
def _std(x: Any, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    var, _ = P.var_mean(opmath(x), reduced_dims(x, dim), _correction(correction), keepdim)
    return to(P.sqrt(var), x.dtype)


@register_decomposition(aten.std.dim)
def _std_dim(x: Any, dim: Any = None, unbiased: bool = True, keepdim: bool = False) -> Any:
    return _std(x, dim, correction=_correction(None, unbiased), keepdim=keepdim)


@register_decomposition(aten.std.default)
def _std_default(x: Any, unbiased: bool = True) -> Any:
    return _std(x, None, correction=_correction(None, unbiased))


@register_decomposition(aten.var_mean.correction)
def _var_mean(x: Any, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> tuple:
    return var_mean(x, dim, _correction(correction), keepdim)


@register_decomposition(aten.std_mean.correction)
def _std_mean(x: Any, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> tuple:
    var, m = P.var_mean(opmath(x), reduced_dims(x, dim), _correction(correction), keepdim)
    return to(P.sqrt(var), x.dtype), to(m, x.dtype)


@register_decomposition(aten.prod.default)
def _prod(x: Any, dtype: torch.dtype | None = None) -> Any:
    out = _sum_dtype(x, dtype)
    return to(P.prod(to(x, opmath_dtype(out)), reduced_dims(x, None)), out)


@register_decomposition(aten.prod.dim_int)
def _prod_dim(x: Any, dim: int, keepdim: bool = False, dtype: torch.dtype | None = None) -> Any:
    out = _sum_dtype(x, dtype)
    return to(P.prod(to(x, opmath_dtype(out)), reduced_dims(x, [dim]), keepdim), out)


@register_decomposition(aten.amax.default)
def _amax(x: Any, dim: Any = (), keepdim: bool = False) -> Any:
    return P.amax(x, reduced_dims(x, dim), keepdim)


@register_decomposition(aten.amin.default)
def _amin(x: Any, dim: Any = (), keepdim: bool = False) -> Any:
    return P.amin(x, reduced_dims(x, dim), keepdim)


@register_decomposition(aten.max.default)
def _max_all(x: Any) -> Any:
    return P.amax(x, reduced_dims(x, None))


@register_decomposition(aten.min.default)
def _min_all(x: Any) -> Any:
    return P.amin(x, reduced_dims(x, None))


@register_decomposition(aten.max.dim)
def _max_dim(x: Any, dim: int, keepdim: bool = False) -> tuple:
    d = canonical_dim(dim, x.ndim)
    return P.amax(x, (d,), keepdim), P.argmax(_arg_input(x), d, keepdim)


@register_decomposition(aten.min.dim)
def _min_dim(x: Any, dim: int, keepdim: bool = False) -> tuple:
    d = canonical_dim(dim, x.ndim)
    return P.amin(x, (d,), keepdim), P.argmin(_arg_input(x), d, keepdim)


def _arg_input(x: Any) -> Any:
    """argmax/argmin of bool values (max over a mask, as cumprod's backward does) on their 0/1 bytes:
    ATen's argmax takes no bool input, max.dim does."""
    return P.convert_element_type(x, torch.uint8) if x.dtype is torch.bool else x


def _arg(prim: Any) -> Any:
    def fn(x: Any, dim: Any = None, keepdim: bool = False) -> Any:
        if dim is None:
            flat = P.reshape(x, (x.numel(),))
            out = prim(flat, 0, False)
            return P.reshape(out, (1,) * x.ndim) if keepdim else out
        return prim(x, canonical_dim(dim, x.ndim), keepdim)
    return fn


register_decomposition(aten.argmax.default)(_arg(P.argmax))
register_decomposition(aten.argmin.default)(_arg(P.argmin))


def _logical_reduce(prim: Any) -> Any:
    def fn(x: Any, dim: Any = None, keepdim: bool = False) -> Any:
        dims = reduced_dims(x, [dim] if isinstance(dim, int) else dim)
        return prim(to(x, torch.bool), dims, keepdim)
    return fn


register_decomposition(aten.any.default, aten.any.dim, aten.any.dims)(_logical_reduce(P.any))
register_decomposition(aten.all.default, aten.all.dim, aten.all.dims)(_logical_reduce(P.all))


@register_decomposition(aten.logsumexp.default)
def _logsumexp(x: Any, dim: Any, keepdim: bool = False) -> Any:
    xf = to(x, opmath_dtype(x.dtype)) if is_float(x.dtype) else to(x, torch.get_default_dtype())
    dims = reduced_dims(xf, dim)
    m = P.amax(xf, dims, True)
    m = where(P.isinf(m), 0.0, m)
    s = P.sum(P.exp(P.sub(xf, P.broadcast_in_dim(m, tuple(xf.shape), tuple(range(xf.ndim))))), dims, True)
    out = P.add(P.log(s), m)
    if not keepdim:
        out = P.squeeze(out, dims)
    return to(out, x.dtype if is_float(x.dtype) else xf.dtype)


def _bcast_keep(v: Any, x: Any) -> Any:
    return P.broadcast_in_dim(v, tuple(x.shape), tuple(range(x.ndim)))


def softmax_parts(x: Any, dim: int) -> tuple[Any, Any, int]:
    """(x - max, sum(exp(x - max)) kept, canonical dim) in op-math dtype."""
    xf = opmath(x)
    d = canonical_dim(dim, x.ndim)
    shifted = P.sub(xf, _bcast_keep(P.amax(xf, (d,), True), xf)) if x.ndim else P.sub(xf, xf)
    return shifted, P.sum(P.exp(shifted), (d,) if x.ndim else (), True), d


@register_decomposition(aten._softmax.default)
def _softmax(x: Any, dim: int, half_to_float: bool) -> Any:
    shifted, s, _ = softmax_parts(x, dim)
    out = P.div(P.exp(shifted), _bcast_keep(s, shifted))
    return to(out, torch.float32 if half_to_float else x.dtype)


@register_decomposition(aten._safe_softmax.default)
def _safe_softmax(x: Any, dim: int, dtype: torch.dtype | None = None) -> Any:
    """softmax whose rows of only -inf give 0 instead of NaN (scaled_dot_product_attention's math path with a
    mask): such a row is one whose max is -inf, which softmax computes anyway."""
    x = to(x, dtype) if dtype else x
    if not x.ndim:
        return _softmax(x, dim, False)
    xf = opmath(x)
    d = canonical_dim(dim, x.ndim)
    m = P.amax(xf, (d,), True)
    shifted = P.sub(xf, _bcast_keep(m, xf))
    e = P.exp(shifted)
    out = P.div(e, _bcast_keep(P.sum(e, (d,), True), shifted))
    dead = _bcast_keep(P.eq(m, float("-inf")), xf)
    out = P.where(dead, P.full(tuple(xf.shape), 0.0, xf.dtype, xf.device), out)
    return to(out, x.dtype)


@register_decomposition(aten._log_softmax.default)
def _log_softmax(x: Any, dim: int, half_to_float: bool) -> Any:
    shifted, s, _ = softmax_parts(x, dim)
    out = P.sub(shifted, _bcast_keep(P.log(s), shifted))
    return to(out, torch.float32 if half_to_float else x.dtype)


@register_decomposition(aten.softmax.int)
def _softmax_int(x: Any, dim: int, dtype: torch.dtype | None = None) -> Any:
    return _softmax(to(x, dtype) if dtype else x, dim, False)


@register_decomposition(aten.log_softmax.int)
def _log_softmax_int(x: Any, dim: int, dtype: torch.dtype | None = None) -> Any:
    return _log_softmax(to(x, dtype) if dtype else x, dim, False)


@register_decomposition(aten._softmax_backward_data.default)
def _softmax_bwd(grad: Any, out: Any, dim: int, input_dtype: torch.dtype) -> Any:
    g, o = opmath(grad), opmath(out)
    d = canonical_dims(dim, g.ndim)
    s = P.sum(P.mul(g, o), d, True)
    return to(P.mul(o, P.sub(g, _bcast_keep(s, g))), input_dtype)


@register_decomposition(aten._log_softmax_backward_data.default)
def _log_softmax_bwd(grad: Any, out: Any, dim: int, input_dtype: torch.dtype) -> Any:
    g, o = opmath(grad), opmath(out)
    d = canonical_dims(dim, g.ndim)
    s = P.sum(g, d, True)
    return to(P.sub(g, P.mul(P.exp(o), _bcast_keep(s, g))), input_dtype)


def keep_dims_shape(x: Any, dims: Any) -> tuple:
    return keep_shape(x, canonical_dims(dims, x.ndim))
