"""Tensor metadata for ember's prims: shapes, strides and dtypes that may be symbolic.

A ``TensorMeta`` describes a tensor without data: ``shape`` and ``stride`` are tuples whose entries are
Python ints or ``sympy`` expressions (DESIGN decision 7), ``dtype`` and ``device`` are torch objects.
Meta rules of prims take and return ``TensorMeta`` (or real tensors, which have the same attributes).
Helpers here never branch on the value of a symbolic size except through ``same`` (structural equality).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence, Union

import sympy
import torch

from ember.shapes import active_table, expr_of

Size = Union[int, sympy.Expr]
Shape = tuple  # tuple[Size, ...]


@dataclass
class TensorMeta:
    """Shape/dtype/stride/device of a tensor without data; sizes are ints or sympy expressions."""

    shape: tuple
    dtype: torch.dtype
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    stride: tuple | None = None

    def __post_init__(self) -> None:
        self.shape = tuple(self.shape)
        if self.stride is None:
            self.stride = contiguous_strides(self.shape)
        self.stride = tuple(self.stride)
        self.device = torch.device(self.device)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def size(self, d: int | None = None):
        return self.shape if d is None else self.shape[d]

    def numel(self) -> Size:
        return prod(self.shape)

    def __repr__(self) -> str:
        return f"TensorMeta({list(self.shape)}, {self.dtype}, stride={list(self.stride)})"


def meta_of(x: Any) -> TensorMeta:
    """The TensorMeta of a real tensor (or a TensorMeta itself)."""
    if isinstance(x, TensorMeta):
        return x
    shape, stride = tuple(x.shape), tuple(x.stride())
    if any(type(v) is not int for v in shape + stride):      # a fake tensor with symbolic sizes (ember.shapes)
        shape, stride = tuple(map(expr_of, shape)), tuple(map(expr_of, stride))
    return TensorMeta(shape, x.dtype, x.device, stride)


def is_tensorlike(x: Any) -> bool:
    return isinstance(x, (torch.Tensor, TensorMeta))


def strides_of(x: Any) -> tuple:
    return tuple(x.stride) if isinstance(x, TensorMeta) else tuple(x.stride())


def prod(xs: Sequence[Size]) -> Size:
    out: Size = 1
    for x in xs:
        out = out * x
    return out


def contiguous_strides(shape: Sequence[Size]) -> tuple:
    strides: list[Size] = []
    acc: Size = 1
    for s in reversed(tuple(shape)):
        strides.append(acc)
        acc = acc * _max1(s)
    return tuple(reversed(strides))


def _max1(s: Size) -> Size:
    if isinstance(s, int):
        return max(s, 1)
    return sympy.Max(s, 1)


def same(a: Size, b: Size) -> bool:
    """Structural equality of two sizes (ints or sympy expressions), after the equalities and divisibility
    facts the active symbol table has recorded (``s1 -> 4*s0``, ``s0 % 2 == 0``: ``ember.shapes``)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    d = sympy.sympify(a) - sympy.sympify(b)
    table = active_table()
    if table is not None:
        d = table.exact(d)
    return sympy.simplify(d) == 0


def same_shape(a: Sequence[Size], b: Sequence[Size]) -> bool:
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def is_one(s: Size) -> bool:
    return same(s, 1)


def cdiv(a: Size, b: Size) -> Size:
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return sympy.ceiling(sympy.sympify(a) / b)


def fdiv(a: Size, b: Size) -> Size:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return sympy.floor(sympy.sympify(a) / b)


def canonical_dim(d: int, ndim: int) -> int:
    n = max(ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"ember.decomp: dim {d} out of range for a tensor of {ndim} dims")
    return d % n


def canonical_dims(dims: Any, ndim: int) -> tuple[int, ...]:
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    return tuple(sorted({canonical_dim(d, ndim) for d in dims}))


def broadcast_shapes(*shapes: Sequence[Size]) -> tuple:
    """NumPy broadcasting of shapes; a symbolic size only broadcasts against a literal 1."""
    ndim = max((len(s) for s in shapes), default=0)
    out: list[Size] = [1] * ndim
    for s in shapes:
        for i, size in enumerate(s, start=ndim - len(s)):
            if is_one(out[i]):
                out[i] = size
            elif not is_one(size) and not same(size, out[i]) and not _equal_sizes(size, out[i]):
                raise RuntimeError(f"ember.decomp: shapes {[list(x) for x in shapes]} do not broadcast")
    return tuple(out)


def _equal_sizes(a: Size, b: Size) -> bool:
    """Whether two sizes that are not the same expression are equal for this size class (recorded: ``s1 ==
    4*s0``); a symbolic size is never 1 (sizes 0 and 1 are specialized)."""
    if isinstance(a, int) and isinstance(b, int):
        return False
    from ember.shapes import guard
    return guard(sympy.Eq(a, b))


# dtype categories -------------------------------------------------------------------------------------
def is_float(dt: torch.dtype) -> bool:
    return dt.is_floating_point


def is_complex(dt: torch.dtype) -> bool:
    return dt.is_complex


def is_int(dt: torch.dtype) -> bool:
    return not dt.is_floating_point and not dt.is_complex and dt is not torch.bool


def kind_of_dtype(dt: torch.dtype) -> int:
    """0 bool, 1 integer, 2 floating, 3 complex."""
    if dt is torch.bool:
        return 0
    if dt.is_complex:
        return 3
    return 2 if dt.is_floating_point else 1


def kind_of_scalar(x: Any) -> int:
    if isinstance(x, bool):
        return 0
    if isinstance(x, complex):
        return 3
    if isinstance(x, float):
        return 2
    if isinstance(x, (int, sympy.Integer)):
        return 1
    if isinstance(x, sympy.Expr):
        return 1 if x.is_integer else 2
    raise TypeError(f"ember.decomp: {type(x).__name__} is not a scalar")


def scalar_for(dtype: torch.dtype, x: Any) -> Any:
    """The Python scalar x as the Python type of dtype's kind."""
    kind = kind_of_dtype(dtype)
    if isinstance(x, sympy.Expr):
        return x
    return [bool, int, float, complex][kind](x)


def opmath_dtype(dt: torch.dtype) -> torch.dtype:
    """The dtype ATen computes in for dt (half precision computes in float32)."""
    return torch.float32 if dt in (torch.float16, torch.bfloat16) else dt


def to_complex_dtype(dt: torch.dtype) -> torch.dtype:
    return {torch.float64: torch.complex128, torch.float16: torch.complex32}.get(dt, torch.complex64)


def to_real_dtype(dt: torch.dtype) -> torch.dtype:
    return {torch.complex128: torch.float64, torch.complex32: torch.float16}.get(dt, torch.float32) \
        if dt.is_complex else dt
