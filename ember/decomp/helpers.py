"""Helpers decompositions are written with: torch's type promotion, explicit broadcasting and casts.

``result_type`` reimplements ATen's rule (tensors with dims > zero-dim tensors > Python scalars, each only
winning with a higher kind); ``elementwise`` promotes, broadcasts and computes in the op-math dtype (float32
for half precision) then casts to the result dtype, the way ATen's TensorIterator kernels do.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from . import prims as P
from .meta import (broadcast_shapes, canonical_dim, canonical_dims, is_complex, is_float, is_tensorlike,
                   kind_of_dtype, meta_of, opmath_dtype, same_shape, scalar_for, strides_of, to_complex_dtype,
                   to_real_dtype)

DEFAULT, INT_TO_FLOAT, ALWAYS_BOOL, COMPLEX_TO_FLOAT, BOOL_TO_LONG, NO_OPMATH = (
    "default", "int_to_float", "always_bool", "complex_to_float", "bool_to_long", "no_opmath")


def _promote(a: torch.dtype | None, b: torch.dtype | None) -> torch.dtype | None:
    if a is None:
        return b
    if b is None:
        return a
    return torch.promote_types(a, b)


def _scalar_dtype(x: Any) -> torch.dtype:
    kind = 0 if isinstance(x, bool) else 3 if isinstance(x, complex) else 2 if isinstance(x, float) else 1
    if kind == 2:
        return torch.get_default_dtype()
    if kind == 3:
        return to_complex_dtype(torch.get_default_dtype())
    return torch.bool if kind == 0 else torch.int64


def _combine(higher: torch.dtype | None, lower: torch.dtype | None) -> torch.dtype | None:
    if higher is None:
        return lower
    if lower is None:
        return higher
    if is_complex(higher):
        return higher
    if is_complex(lower):
        return to_complex_dtype(higher) if is_float(higher) else lower
    if is_float(higher):
        return higher
    if higher is torch.bool or is_float(lower):
        return _promote(higher, lower)
    return higher


def result_type(*args: Any) -> torch.dtype:
    """ATen's ``result_type`` over tensors (real or meta) and Python scalars."""
    dim = zero = wrapped = None
    for a in args:
        if a is None:
            continue
        if is_tensorlike(a):
            if a.ndim > 0:
                dim = _promote(dim, a.dtype)
            else:
                zero = _promote(zero, a.dtype)
        else:
            wrapped = _promote(wrapped, _scalar_dtype(a))
    out = _combine(dim, _combine(zero, wrapped))
    if out is None:
        raise TypeError("ember.decomp: result_type of no arguments")
    return out


def elementwise_dtypes(*args: Any, kind: str = DEFAULT) -> tuple[torch.dtype, torch.dtype]:
    """(compute dtype, result dtype) of an elementwise ATen op under the given promotion kind."""
    dt = result_type(*args)
    if kind == INT_TO_FLOAT and kind_of_dtype(dt) < 2:
        dt = torch.get_default_dtype()
    if kind == BOOL_TO_LONG and dt is torch.bool:
        dt = torch.int64
    compute = dt if kind == NO_OPMATH else opmath_dtype(dt)
    if kind == ALWAYS_BOOL:
        return compute, torch.bool
    if kind == COMPLEX_TO_FLOAT:
        return compute, to_real_dtype(dt)
    return compute, dt


def to(x: Any, dtype: torch.dtype) -> Any:
    """x cast to dtype: a convert_element_type prim for tensors, a Python cast for scalars."""
    if is_tensorlike(x):
        return x if x.dtype == dtype else P.convert_element_type(x, dtype)
    return scalar_for(dtype, x)


def broadcast_to(x: Any, shape: Sequence) -> Any:
    """x broadcast (numpy rules) to shape with broadcast_in_dim; scalars pass through."""
    if not is_tensorlike(x) or same_shape(tuple(x.shape), tuple(shape)):
        return x
    lead = len(shape) - x.ndim
    return P.broadcast_in_dim(x, tuple(shape), tuple(range(lead, len(shape))))


def broadcast_all(*args: Any) -> list:
    shape = broadcast_shapes(*[tuple(a.shape) for a in args if is_tensorlike(a)])
    return [broadcast_to(a, shape) for a in args]


def elementwise(prim: Any, *args: Any, kind: str = DEFAULT) -> Any:
    """Promote, broadcast, compute prim in op-math dtype, cast to the result dtype."""
    compute, result = elementwise_dtypes(*args, kind=kind)
    if kind == ALWAYS_BOOL:
        compute = result_type(*args)
    out = prim(*broadcast_all(*[to(a, compute) for a in args]))
    return to(out, result)


def opmath(x: Any) -> Any:
    """x upcast to its op-math dtype (half precision -> float32)."""
    return to(x, opmath_dtype(x.dtype))


def float_opmath(x: Any) -> Any:
    """x as the floating dtype an INT_TO_FLOAT op computes in."""
    dt = x.dtype if kind_of_dtype(x.dtype) >= 2 else torch.get_default_dtype()
    return to(x, opmath_dtype(dt))


def sum_dims(x: Any, dims: Any, keepdim: bool = False, dtype: torch.dtype | None = None) -> Any:
    return P.sum(x, canonical_dims(dims, x.ndim), keepdim, dtype)


def keep_shape(x: Any, dims: Sequence[int]) -> tuple:
    return tuple(1 if i in dims else s for i, s in enumerate(x.shape))


def numel_of(x: Any, dims: Sequence[int]) -> Any:
    n: Any = 1
    for d in dims:
        n = n * x.shape[d]
    return n


def reduced_dims(x: Any, dim: Any) -> tuple[int, ...]:
    """ATen's reading of an optional dim list: None or [] means every dim."""
    if x.ndim == 0 or dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(x.ndim))
    return canonical_dims(dim, x.ndim)


def cdim(d: int, x: Any) -> int:
    return canonical_dim(d, x.ndim)


def where(cond: Any, a: Any, b: Any) -> Any:
    """torch.where with promotion and broadcasting (cond must be bool)."""
    compute, result = elementwise_dtypes(a, b, kind=NO_OPMATH)
    c, a2, b2 = broadcast_all(cond, to(a, compute), to(b, compute))
    if not is_tensorlike(a2) and not is_tensorlike(b2):
        a2 = P.full(tuple(c.shape), a2, compute, c.device)
    return P.where(c, a2, b2)


def full_like(x: Any, value: Any, dtype: torch.dtype | None = None) -> Any:
    dt = dtype or x.dtype
    return P.full(tuple(x.shape), scalar_for(dt, value), dt, x.device)


def memory_order(x: Any) -> tuple[int, ...] | None:
    """The dims of ``x`` from outermost to innermost in memory in the layout ``empty_like(x)`` allocates; None
    when that is row-major, or when a stride is symbolic (the order is then unknown: row-major is assumed).

    PyTorch orders the dims by an insertion sort from the innermost dim out that swaps two dims only when the
    outer one has the smaller stride (equal strides: the larger size goes out) and treats a stride of 0 as
    comparable with nothing, so an expanded dim stays where row-major order puts it: ``empty_like`` of
    ``k[:, :, None].expand(...).reshape(b, h, l, e)`` (strides ``(l*e, 0, e, 1)``) is row-major, not one with
    ``h`` innermost (a plain sort by stride gave that, and an attention kernel then read keys whose last dim
    did not have stride 1)."""
    try:        # sympy strides (int() of a torch.SymInt would pin the size): a symbol raises
        strides = [int(st) for st in meta_of(x).stride]
    except TypeError:
        return None
    sizes = list(x.shape)

    def outer_first(a: int, b: int) -> int:      # > 0: dim a must go inside dim b
        if strides[a] == 0 or strides[b] == 0:
            return 0
        if strides[a] != strides[b]:
            return 1 if strides[a] > strides[b] else -1
        return 1 if sizes[a] > sizes[b] else 0

    perm = list(range(len(strides)))[::-1]       # innermost first
    for i in range(1, len(perm)):
        j = i
        for k in range(i - 1, -1, -1):
            c = outer_first(perm[k], perm[j])
            if c > 0:
                perm[k], perm[j] = perm[j], perm[k]
                j = k
            elif c < 0:
                break
    order = tuple(reversed(perm))
    big = [d for d in order if x.shape[d] != 1]       # size-1 dims do not change where elements lie
    return None if big == sorted(big) else order
