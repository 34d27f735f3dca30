"""Values during lowering: a tensor as a function from an index to a scalar expression.

A ``TV`` has a shape, dtype, device and ``loader(idx) -> Expr``. Pointwise ops compose loaders (so chains fuse
by construction); views rewrite the index; ``view`` is set when the value is exactly a strided view of a
realized buffer (then reshapes of contiguous views, externs and outputs need no copy).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import sympy
import torch

from .expr import Const, Expr, IndexValue, Load, Op, _py_cast, cast, substitute
from .ir import Layout, contiguous_stride

Loader = Callable[[Sequence[sympy.Expr]], Expr]


@dataclass
class TV:
    shape: tuple
    dtype: torch.dtype
    device: torch.device
    loader: Loader
    view: tuple[str, Layout] | None = None   # (buffer, layout) when this value is a view of a buffer

    @property
    def ndim(self) -> int:
        return len(self.shape)


def buffer_view(name: str, layout: Layout) -> TV:
    def load(idx: Sequence[sympy.Expr]) -> Expr:
        return Load(name, layout.index(idx), layout.dtype)
    return TV(layout.shape, layout.dtype, layout.device, load, (name, layout))


def restride(x: TV, shape: tuple, index_map: Callable[[Sequence[sympy.Expr]], list],
             layout_fn: Callable[[Layout], Layout | None] | None = None) -> TV:
    """A view of ``x``: out[idx] = x[index_map(idx)]; ``layout_fn`` gives the view's layout on x's buffer."""
    def load(idx: Sequence[sympy.Expr]) -> Expr:
        return x.loader(index_map(idx))
    view = None
    if x.view is not None and layout_fn is not None:
        lay = layout_fn(x.view[1])
        if lay is not None:
            view = (x.view[0], lay)
    return TV(tuple(shape), x.dtype, x.device, load, view)


def constant(shape: tuple, value: Any, dtype: torch.dtype, device: torch.device) -> TV:
    c = _scalar(value, dtype)       # a number, or a size expression (``full(..., s1 / s0)``)
    return TV(tuple(shape), dtype, device, lambda idx: c)


def index_value(shape: tuple, fn: Callable[[Sequence[sympy.Expr]], sympy.Expr], dtype: torch.dtype,
                device: torch.device) -> TV:
    return TV(tuple(shape), dtype, device, lambda idx: IndexValue(fn(idx), dtype))


def _exact_reciprocal(c: Any, dtype: torch.dtype) -> float | None:
    """1/c when c is a constant power of two whose reciprocal is a normal number of ``dtype``: then x / c and
    x * (1/c) round the same exact value, so they are equal bit for bit (a multiply is much cheaper than an
    IEEE-rounded division on GPUs)."""
    if isinstance(c, TV):
        if c.ndim:
            return None
        e = c.loader([])
        c = e.value if isinstance(e, Const) and e.dtype == dtype else None
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not c or not math.isfinite(c):
        return None
    m, k = math.frexp(abs(c))          # |c| = m * 2**k, 0.5 <= m < 1
    limit = 14 if dtype == torch.float16 else 126
    return 1.0 / c if m == 0.5 and abs(k - 1) <= limit else None


def pointwise(name: str, args: Sequence[Any], dtype: torch.dtype, out_dtype: torch.dtype | None = None) -> TV:
    t0 = next(a for a in args if isinstance(a, TV))
    out = out_dtype or dtype
    if name == "div" and dtype.is_floating_point and out == dtype and len(args) == 2:
        r = _exact_reciprocal(args[1], dtype)
        if r is not None:
            name, args = "mul", [args[0], r]

    def load(idx: Sequence[sympy.Expr]) -> Expr:
        ops = [a.loader(idx) if isinstance(a, TV) else _scalar(a, dtype) for a in args]
        return Op(name, tuple(ops), out)
    return TV(t0.shape, out, t0.device, load)


def _scalar(a: Any, dtype: torch.dtype) -> Expr:
    """A scalar operand: a constant, or a size expression (``x / s0`` of a mean) the kernel computes from its
    size arguments and converts to ``dtype``."""
    if isinstance(a, sympy.Basic) and a.free_symbols:
        if not a.is_integer:
            return _float_size(a, dtype)
        return IndexValue(a, dtype)
    return Const(_py_cast(a, dtype), dtype)


def _float_size(e: sympy.Expr, dtype: torch.dtype) -> Expr:
    """A float expression of the sizes (``std``'s ``2.0/(s0 - 1.0)`` in its backward): its integer parts as
    index values, combined with float ``add``/``mul``/``div`` in ``dtype`` (float32 for half types)."""
    if not dtype.is_floating_point:
        raise NotImplementedError(f"ember.loopir: non-integer size expression {e} as a {dtype} operand")
    ct = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    e = e.xreplace({f: sympy.Integer(int(f)) for f in e.atoms(sympy.Float) if f == int(f)})
    return cast(_float_tree(sympy.sympify(e), ct), dtype)


def _float_tree(e: sympy.Expr, dt: torch.dtype) -> Expr:
    if not e.free_symbols:
        return Const(float(e), dt)
    if e.is_integer:
        return IndexValue(e, dt)
    if isinstance(e, sympy.Pow) and e.exp.is_Number and not e.exp.is_Integer:     # sqrt(n), n ** -0.5
        if e.exp == sympy.Rational(1, 2):
            return Op("sqrt", (_float_tree(e.base, dt),), dt)
        return Op("pow", (_float_tree(e.base, dt), Const(float(e.exp), dt)), dt)
    num, den = e.as_numer_denom()
    if den != 1:
        return Op("div", (_float_tree(num, dt), _float_tree(den, dt)), dt)
    if isinstance(e, (sympy.Add, sympy.Mul)):
        parts = [_float_tree(t, dt) for t in e.args]
        out = parts[0]
        for p in parts[1:]:
            out = Op("add" if isinstance(e, sympy.Add) else "mul", (out, p), dt)
        return out
    raise NotImplementedError(f"ember.loopir: non-integer size expression {e} as an operand")


def masked(x: TV, cond: Callable[[Sequence[sympy.Expr]], Any], idx_map: Callable, other: Any) -> Loader:
    """Loader reading x at idx_map(idx) where cond(idx) holds, ``other`` elsewhere (loads are masked)."""
    def load(idx: Sequence[sympy.Expr]) -> Expr:
        c = cond(idx)
        if c is sympy.true:
            return x.loader(idx_map(idx))
        inner = substitute(x.loader(idx_map(idx)), lambda e: e,
                           load=lambda ld: Load(ld.buf, ld.index, ld.dtype,
                                                c if ld.mask is None else sympy.And(ld.mask, c)))
        o = other.loader(idx) if isinstance(other, TV) else cast(Const(other, x.dtype), x.dtype)
        return Op("where", (IndexValue(c, torch.bool), inner, o), x.dtype)
    return load


def contiguous_layout(x: TV) -> Layout:
    return Layout(x.shape, contiguous_stride(x.shape), x.dtype, x.device)
