"""Decompositions of view, movement, creation and copy ops (view/expand/permute/cat/split/arange/full/...).

Views become view prims (strides tracked by meta rules); in this functional IR ``clone``/``_to_copy``/``copy``
are value copies and ``detach``/``alias``/``lift_fresh_copy`` become the ``view_of`` prim.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import sympy
import torch

from ember.shapes import active_table, guard

from . import prims as P
from .helpers import broadcast_to, result_type, to
from .meta import canonical_dim, cdiv, is_one, prod, same
from .registry import register_decomposition

aten = torch.ops.aten


def infer_shape(x: Any, shape: Sequence) -> tuple:
    shape = list(shape)
    if -1 in shape:
        i = shape.index(-1)
        known = prod([s for j, s in enumerate(shape) if j != i])
        n = x.numel()
        shape[i] = exact_quotient(n, known)
    return tuple(shape)


def exact_quotient(n: Any, d: Any) -> Any:
    """``n / d`` for a ``d`` that divides ``n`` (the ``-1`` of a view), as an integer expression: the quotient
    where sympy sees it is whole, else ``floor(n / d)`` (the same value). A plain ``n / d`` of symbolic sizes
    such as ``3*s0 / (2*floor(s0/2))`` (``x.view(B // 2, 2, -1)``) is a rational to sympy, so every size, stride
    and index computed from it is one, and the kernel printers (integer arithmetic) cannot write it; with the
    trace's divisibility facts (``s0 % 2 == 0``) it is the ``3`` the trace inferred."""
    if isinstance(n, int) and isinstance(d, int):
        return n // d
    q = sympy.sympify(n) / d
    if q.is_integer:
        return q
    table = active_table()
    exact = sympy.simplify(table.exact(q)) if table is not None else q
    if exact.is_integer and not exact.atoms(sympy.Rational) - exact.atoms(sympy.Integer):
        return exact            # the divisibility facts the trace recorded make it whole: 3*s0/(2*floor(s0/2)) = 3
    return sympy.floor(q)


@register_decomposition(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(x: Any, shape: Sequence) -> Any:
    return P.reshape(x, infer_shape(x, shape))


@register_decomposition(aten.permute.default)
def _permute(x: Any, dims: Sequence[int]) -> Any:
    return P.permute(x, tuple(canonical_dim(d, x.ndim) for d in dims))


@register_decomposition(aten.transpose.int)
def _transpose(x: Any, d0: int, d1: int) -> Any:
    if x.ndim == 0:
        return P.clone(x)
    perm = list(range(x.ndim))
    a, b = canonical_dim(d0, x.ndim), canonical_dim(d1, x.ndim)
    perm[a], perm[b] = perm[b], perm[a]
    return P.permute(x, tuple(perm))


@register_decomposition(aten.t.default)
def _t(x: Any) -> Any:
    return _transpose(x, 0, 1) if x.ndim == 2 else P.clone(x)


@register_decomposition(aten.expand.default)
def _expand(x: Any, shape: Sequence, *, implicit: bool = False) -> Any:
    lead = len(shape) - x.ndim
    full = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape))
    return P.broadcast_in_dim(x, full, tuple(range(lead, len(shape))))


@register_decomposition(aten.expand_as.default)
def _expand_as(x: Any, other: Any) -> Any:
    return _expand(x, tuple(other.shape))


@register_decomposition(aten.unsqueeze.default)
def _unsqueeze(x: Any, dim: int) -> Any:
    return P.unsqueeze(x, canonical_dim(dim, x.ndim + 1))


@register_decomposition(aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims)
def _squeeze(x: Any, dim: Any = None) -> Any:
    if x.ndim == 0:
        return P.squeeze(x, ())
    dims = range(x.ndim) if dim is None else [dim] if isinstance(dim, int) else dim
    dims = tuple(sorted({canonical_dim(d, x.ndim) for d in dims}))
    return P.squeeze(x, tuple(d for d in dims if is_one(x.shape[d])))


def _clamp_index(i: Any, size: Any) -> Any:
    if isinstance(i, int) and isinstance(size, int):
        if i < 0:
            i += size
        return min(max(i, 0), size)
    # symbolic: each comparison is decided for the size class (ember.shapes.guard records it)
    if guard(sympy.Lt(i, 0)):
        i = i + size
    if guard(sympy.Lt(i, 0)):
        return 0
    return size if guard(sympy.Gt(i, size)) else i


@register_decomposition(aten.slice.Tensor)
def _slice(x: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Any:
    d = canonical_dim(dim, x.ndim)
    size = x.shape[d]
    s = _clamp_index(0 if start is None else start, size)
    e = _clamp_index(size if end is None or (isinstance(end, int) and end >= 2 ** 62) else end, size)
    if isinstance(s, int) and isinstance(e, int):
        e = max(e, s)
    elif guard(sympy.Lt(e, s)):
        e = s
    return P.slice(x, d, s, e, step)


@register_decomposition(aten.select.int)
def _select(x: Any, dim: int, index: Any) -> Any:
    d = canonical_dim(dim, x.ndim)
    i = index + x.shape[d] if isinstance(index, int) and index < 0 else index
    return P.squeeze(P.slice(x, d, i, i + 1, 1), (d,))


@register_decomposition(aten.narrow.default)
def _narrow(x: Any, dim: int, start: Any, length: Any) -> Any:
    d = canonical_dim(dim, x.ndim)
    s = start + x.shape[d] if isinstance(start, int) and start < 0 else start
    return P.slice(x, d, s, s + length, 1)


@register_decomposition(aten.clone.default)
def _clone(x: Any, *, memory_format: Any = None) -> Any:
    return P.clone(x)


@register_decomposition(aten.alias.default, aten.detach.default, aten.lift_fresh_copy.default)
def _alias(x: Any) -> Any:
    return P.view_of(x)


@register_decomposition(aten._to_copy.default)
def _to_copy(x: Any, *, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None,
             non_blocking: bool = False, memory_format: Any = None) -> Any:
    if isinstance(x, (bool, int, float)):
        # a Python number where eager had a wrapped scalar tensor (dispatch modes receive those as numbers:
        # torch.func's batching rule for ``batched + 1`` converts one): a 0-dim tensor of it
        dt = dtype or _dtype_of_value(x, None)
        return P.full((), to(x, dt), dt, _dev(device))
    if device is not None and torch.device(device) != x.device:
        return P.aten_extern(aten._to_copy.default, (x,), {"dtype": dtype, "device": device})
    return P.clone(x) if dtype is None or dtype == x.dtype else P.convert_element_type(x, dtype)


@register_decomposition(aten.copy.default)
def _copy(x: Any, src: Any, non_blocking: bool = False) -> Any:
    return P.clone(broadcast_to(to(src, x.dtype), tuple(x.shape)))


@register_decomposition(aten.cat.default)
def _cat(tensors: Sequence[Any], dim: int = 0) -> Any:
    ts = [t for t in tensors if not (t.ndim == 1 and same(t.shape[0], 0))]
    if not ts:
        return P.clone(tensors[0])
    dt = result_type(*ts)
    return P.cat([to(t, dt) for t in ts], canonical_dim(dim, ts[0].ndim))


@register_decomposition(aten.stack.default)
def _stack(tensors: Sequence[Any], dim: int = 0) -> Any:
    d = canonical_dim(dim, tensors[0].ndim + 1)
    return _cat([P.unsqueeze(t, d) for t in tensors], d)


@register_decomposition(aten.split_with_sizes.default)
def _split_with_sizes(x: Any, sizes: Sequence, dim: int = 0) -> list:
    d, start, out = canonical_dim(dim, x.ndim), 0, []
    for s in sizes:
        out.append(P.slice(x, d, start, start + s, 1))
        start = start + s
    return out


@register_decomposition(aten.split.Tensor)
def _split(x: Any, split_size: Any, dim: int = 0) -> list:
    d = canonical_dim(dim, x.ndim)
    n = x.shape[d]
    k = max(cdiv(n, split_size), 1) if isinstance(n, int) else cdiv(n, split_size)
    sizes = [split_size] * (k - 1) + [n - split_size * (k - 1)]
    return _split_with_sizes(x, sizes, d)


@register_decomposition(aten.chunk.default)
def _chunk(x: Any, chunks: int, dim: int = 0) -> list:
    n = x.shape[canonical_dim(dim, x.ndim)]
    return _split(x, cdiv(n, chunks), dim)


@register_decomposition(aten.unbind.int)
def _unbind(x: Any, dim: int = 0) -> list:
    d = canonical_dim(dim, x.ndim)
    return [_select(x, d, i) for i in range(x.shape[d])]


@register_decomposition(aten.flip.default)
def _flip(x: Any, dims: Sequence[int]) -> Any:
    return P.flip(x, tuple(canonical_dim(d, x.ndim) for d in dims))


@register_decomposition(aten.roll.default)
def _roll(x: Any, shifts: Sequence[int], dims: Sequence[int] = ()) -> Any:
    if not dims:
        flat = P.reshape(x, (x.numel(),))
        return P.reshape(_roll(flat, shifts, (0,)), tuple(x.shape))
    for s, d in zip(shifts, dims):
        d = canonical_dim(d, x.ndim)
        n = x.shape[d]
        if n == 0:
            continue
        s = s % n
        x = P.cat([P.slice(x, d, n - s, n, 1), P.slice(x, d, 0, n - s, 1)], d)
    return x


@register_decomposition(aten.repeat.default)
def _repeat(x: Any, repeats: Sequence[int]) -> Any:
    lead = len(repeats) - x.ndim
    shape = (1,) * lead + tuple(x.shape)
    x = P.reshape(x, shape)
    big = []
    for r, s in zip(repeats, shape):
        big += [r, s]
    ex = P.broadcast_in_dim(x, tuple(big), tuple(range(1, 2 * len(shape), 2)))
    return P.reshape(ex, tuple(r * s for r, s in zip(repeats, shape)))


@register_decomposition(aten.constant_pad_nd.default)
def _constant_pad_nd(x: Any, pad: Sequence[int], value: Any = 0) -> Any:
    pads = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        pads[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return P.pad(x, pads, to(value, x.dtype))


def _pad_back(grad: Any, input_sizes: Sequence[int], dim: int, before: int) -> Any:
    """``grad`` placed at ``[before, before + grad.shape[dim])`` along ``dim`` of zeros of ``input_sizes``."""
    pads = [(0, 0)] * len(input_sizes)
    pads[dim] = (before, input_sizes[dim] - before - grad.shape[dim])
    return P.pad(grad, pads, to(0, grad.dtype))


@register_decomposition(aten.select_backward.default)
def _select_backward(grad: Any, input_sizes: Sequence[int], dim: int, index: int) -> Any:
    """A pad of the gradient with zeros (index arithmetic in the loop IR, so it fuses with its consumers)."""
    dim = canonical_dim(dim, len(input_sizes))
    index = index + input_sizes[dim] if index < 0 else index
    shape = list(input_sizes)
    shape[dim] = 1
    return _pad_back(P.reshape(grad, tuple(shape)), input_sizes, dim, index)


@register_decomposition(aten.slice_backward.default)
def _slice_backward(grad: Any, input_sizes: Sequence[int], dim: int, start: int, end: int, step: int) -> Any:
    dim = canonical_dim(dim, len(input_sizes))
    size = input_sizes[dim]
    start = min(max(start + size if start < 0 else start, 0), size)
    if step != 1 or grad.shape[dim] == 0:
        return P.aten_extern(aten.slice_backward.default, (grad, input_sizes, dim, start, end, step))
    return _pad_back(grad, input_sizes, dim, start)


# creation ------------------------------------------------------------------------------------------------
def _dtype_of_value(value: Any, dtype: Any) -> torch.dtype:
    if dtype is not None:
        return dtype
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    return torch.get_default_dtype()


def _dev(device: Any) -> torch.device:
    return torch.device("cpu") if device is None else torch.device(device)


@register_decomposition(aten.full.default)
def _full(size: Sequence, fill_value: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
          pin_memory: Any = None) -> Any:
    dt = _dtype_of_value(fill_value, dtype)
    return P.full(tuple(size), to(fill_value, dt), dt, _dev(device))


def _creation(value: Any) -> Any:
    def fn(size: Sequence, *, dtype: Any = None, layout: Any = None, device: Any = None,
           pin_memory: Any = None, **_: Any) -> Any:
        dt = dtype or torch.get_default_dtype()
        return P.full(tuple(size), to(value, dt), dt, _dev(device))
    return fn


register_decomposition(aten.zeros.default)(_creation(0))
register_decomposition(aten.ones.default)(_creation(1))
# torch.func's forward-mode AD (jacfwd, hessian, jvp) makes "efficient zero" tensors: ATen's result has no
# storage (a null data pointer that only ATen's own ops know to skip), so it must never reach a compiled kernel
# as an extern's result; its value is plain zeros
register_decomposition(aten._efficientzerotensor.default)(_creation(0))


@register_decomposition(aten.empty.memory_format)
def _empty(size: Sequence, *, dtype: Any = None, layout: Any = None, device: Any = None,
           pin_memory: Any = None, memory_format: Any = None) -> Any:
    return P.empty(tuple(size), dtype or torch.get_default_dtype(), _dev(device))


def _like(value: Any) -> Any:
    def fn(x: Any, *, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None,
           memory_format: Any = None) -> Any:
        dt = dtype or x.dtype
        return P.full(tuple(x.shape), to(value, dt), dt, _dev(device) if device else x.device)
    return fn


register_decomposition(aten.zeros_like.default)(_like(0))
register_decomposition(aten.ones_like.default)(_like(1))


@register_decomposition(aten.full_like.default)
def _full_like(x: Any, fill_value: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
               pin_memory: Any = None, memory_format: Any = None) -> Any:
    return _like(fill_value)(x, dtype=dtype, device=device)


@register_decomposition(aten.empty_like.default)
def _empty_like(x: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
                pin_memory: Any = None, memory_format: Any = None) -> Any:
    return P.empty(tuple(x.shape), dtype or x.dtype, _dev(device) if device else x.device)


def _new(value: Any) -> Any:
    def fn(x: Any, size: Sequence, *, dtype: Any = None, layout: Any = None, device: Any = None,
           pin_memory: Any = None) -> Any:
        dt = dtype or x.dtype
        return P.full(tuple(size), to(value, dt), dt, _dev(device) if device else x.device)
    return fn


register_decomposition(aten.new_zeros.default)(_new(0))
register_decomposition(aten.new_ones.default)(_new(1))


@register_decomposition(aten.new_full.default)
def _new_full(x: Any, size: Sequence, fill_value: Any, *, dtype: Any = None, layout: Any = None,
              device: Any = None, pin_memory: Any = None) -> Any:
    return _new(fill_value)(x, size, dtype=dtype, device=device)


@register_decomposition(aten.new_empty.default)
def _new_empty(x: Any, size: Sequence, *, dtype: Any = None, layout: Any = None, device: Any = None,
               pin_memory: Any = None) -> Any:
    return P.empty(tuple(size), dtype or x.dtype, _dev(device) if device else x.device)


@register_decomposition(aten.scalar_tensor.default)
def _scalar_tensor(s: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
                   pin_memory: Any = None) -> Any:
    dt = dtype or torch.get_default_dtype()
    return P.full((), to(s, dt), dt, _dev(device))


def _int_arange_bounds(start: Any, end: Any, step: Any, dt: torch.dtype) -> tuple[Any, Any, Any, Any]:
    """An integer ``arange`` given float bounds (XLNet: ``arange(beg, end, -1.0, dtype=torch.int64)``): eager
    truncates start and step to integers (the values are ``int(start) + i * int(step)``); the length comes from
    the truncated bounds for int64 and from the float ones for the other integer dtypes. Integer values keep the
    kernel's index expressions integral (a float step there cannot be generated)."""
    if any(isinstance(v, sympy.Expr) and not v.is_number for v in (start, end, step)):
        raise NotImplementedError("arange: an integer dtype with symbolic float bounds")
    fs, fe, fst = float(start), float(end), float(step)
    i_start, i_end, i_step = int(fs), int(fe), int(fst)
    if i_step == 0:
        raise RuntimeError("arange: step must be nonzero (an integer dtype truncates the step to 0)")
    n = cdiv(i_end - i_start, i_step) if dt == torch.int64 else math.ceil((fe - fs) / fst)
    return i_start, i_end, i_step, n


@register_decomposition(aten.arange.start_step)
def _arange(start: Any, end: Any, step: Any = 1, *, dtype: Any = None, layout: Any = None,
            device: Any = None, pin_memory: Any = None) -> Any:
    is_int = all(isinstance(v, int) or isinstance(v, sympy.Expr) and v.is_integer for v in (start, end, step))
    dt = dtype or (torch.int64 if is_int else torch.get_default_dtype())
    if not is_int and not dt.is_floating_point and not dt.is_complex:
        start, end, step, n = _int_arange_bounds(start, end, step, dt)
    else:
        n = cdiv(end - start, step) if is_int else math.ceil((end - start) / step)
    if isinstance(n, sympy.Expr):       # a symbolic length (``arange(s0)``): empty where it is negative
        return P.iota(n if guard(sympy.Ge(n, 0)) else 0, start, step, dt, _dev(device))
    return P.iota(max(n, 0), start, step, dt, _dev(device))


@register_decomposition(aten.arange.default)
def _arange_end(end: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
                pin_memory: Any = None) -> Any:
    return _arange(0, end, 1, dtype=dtype, device=device)


@register_decomposition(aten.arange.start)
def _arange_start(start: Any, end: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
                  pin_memory: Any = None) -> Any:
    return _arange(start, end, 1, dtype=dtype, device=device)


def _tri_op(lower: bool) -> Any:
    def fn(x: Any, diagonal: int = 0) -> Any:
        rows, cols = x.shape[-2], x.shape[-1]
        r = P.broadcast_in_dim(P.iota(rows, 0, 1, torch.int64, x.device), (rows, cols), (0,))
        c = P.broadcast_in_dim(P.iota(cols, 0, 1, torch.int64, x.device), (rows, cols), (1,))
        d = P.sub(c, r)
        keep = P.le(d, diagonal) if lower else P.ge(d, diagonal)
        keep = P.broadcast_in_dim(keep, tuple(x.shape), (x.ndim - 2, x.ndim - 1))
        return P.where(keep, x, P.full(tuple(x.shape), to(0, x.dtype), x.dtype, x.device))
    return fn


register_decomposition(aten.tril.default)(_tri_op(True))
register_decomposition(aten.triu.default)(_tri_op(False))
