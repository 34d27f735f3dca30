"""The lowering table: one small function per prim (pointwise, casts, constants, views, movement,
reductions). Prims not listed here (matmul, convolution, attention, indexing, RNG) stay externs."""
from __future__ import annotations

import math
from typing import Any, Sequence

import sympy
import torch

from ember.decomp.meta import canonical_dims, cdiv, same
from ember.shapes import active_table, size_hint

from .expr import Bind, Const, IndexValue, Load, Op, cast, indirect_symbol, substitute
from .ir import Layout, Reduction, contiguous_stride, prod
from .split_align import aligned_factor, aligned_split, aligned_substitution
from .lowering_table import UseExtern, register_lowering  # ``Lowerer`` in annotations: lower.py's
from .values import TV, _scalar, buffer_view, constant, index_value, masked, pointwise, restride
from ember.heuristics import heuristics

UNARY = ("neg abs exp exp2 log log2 log10 log1p expm1 sqrt rsqrt sin cos tan asin acos atan sinh cosh tanh "
         "asinh acosh atanh sigmoid erf erfc erfinv lgamma digamma floor ceil round trunc sign reciprocal "
         "bitwise_not").split()
BOOL_UNARY = "logical_not isnan isinf isfinite signbit".split()
BINARY = ("add sub mul div floordiv remainder fmod pow maximum minimum atan2 hypot copysign nextafter "
          "bitwise_and bitwise_or bitwise_xor shift_left shift_right").split()
COMPARE = "eq ne lt le gt ge logical_and logical_or logical_xor".split()


def _dtype_of(args: Sequence[Any]) -> torch.dtype:
    return next(a.dtype for a in args if isinstance(a, TV))


def _pw(name: str, bool_out: bool) -> Any:
    def lowering(L: Lowerer, *args: Any) -> TV:
        dt = _dtype_of(args)
        return pointwise(name, args, dt, torch.bool if bool_out else None)
    return lowering


for _n in UNARY + BINARY:
    register_lowering(_n)(_pw(_n, False))
for _n in BOOL_UNARY + COMPARE:
    register_lowering(_n)(_pw(_n, True))


@register_lowering("where")
def _where(L: Lowerer, cond: Any, a: Any, b: Any) -> TV:
    dt = _dtype_of([a, b]) if isinstance(a, TV) or isinstance(b, TV) else (
        torch.float32 if _float_scalar(a) or _float_scalar(b) else torch.int64)
    t0 = next(x for x in (cond, a, b) if isinstance(x, TV))

    def load(idx: Sequence[sympy.Expr]) -> Any:
        c = cond.loader(idx) if isinstance(cond, TV) else Const(bool(cond), torch.bool)
        ops = [x.loader(idx) if isinstance(x, TV) else _scalar(x, dt) for x in (a, b)]
        return Op("where", (c, *ops), dt)
    return TV(t0.shape, dt, t0.device, load)


def _float_scalar(x: Any) -> bool:
    """A float scalar operand: a Python float or a float expression of the sizes (``s0 / 2``)."""
    return isinstance(x, float) or isinstance(x, sympy.Basic) and bool(x.free_symbols) and not x.is_integer


@register_lowering("convert_element_type")
def _convert(L: Lowerer, x: TV, dtype: torch.dtype) -> TV:
    return TV(x.shape, dtype, x.device, lambda idx: cast(x.loader(idx), dtype))


# constants ---------------------------------------------------------------------------------------------------
@register_lowering("full")
def _full(L: Lowerer, shape: Sequence, value: Any, dtype: torch.dtype, device: Any = "cpu") -> TV:
    return constant(tuple(shape), value, dtype, torch.device(device))


@register_lowering("empty")
def _empty(L: Lowerer, shape: Sequence, dtype: torch.dtype, device: Any = "cpu") -> TV:
    return constant(tuple(shape), 0, dtype, torch.device(device))


@register_lowering("iota")
def _iota(L: Lowerer, length: Any, start: Any, step: Any, dtype: torch.dtype, device: Any = "cpu") -> TV:
    if dtype.is_floating_point:
        base = index_value((length,), lambda idx: idx[0], torch.int64, torch.device(device))
        return pointwise("add", [pointwise("mul", [TV(base.shape, dtype, base.device,
                                                     lambda i: cast(base.loader(i), dtype)), step], dtype),
                                 start], dtype)
    return index_value((length,), lambda idx: start + step * idx[0], dtype, torch.device(device))


# views ------------------------------------------------------------------------------------------------------
@register_lowering("broadcast_in_dim")
def _broadcast(L: Lowerer, x: TV, shape: Sequence, bdims: Sequence[int]) -> TV:
    shape = tuple(shape)

    def imap(idx: Sequence) -> list:
        return [0 if x.shape[i] == 1 and shape[d] != 1 else idx[d] for i, d in enumerate(bdims)]

    def lay(l: Layout) -> Layout:
        st = [0] * len(shape)
        for i, d in enumerate(bdims):
            st[d] = 0 if x.shape[i] == 1 and shape[d] != 1 else l.stride[i]
        return Layout(shape, tuple(st), l.dtype, l.device, l.offset)
    return restride(x, shape, imap, lay)


@register_lowering("permute")
def _permute(L: Lowerer, x: TV, perm: Sequence[int]) -> TV:
    perm = [p % x.ndim for p in perm] if x.ndim else list(perm)

    def imap(idx: Sequence) -> list:
        out: list = [0] * x.ndim
        for j, p in enumerate(perm):
            out[p] = idx[j]
        return out

    def lay(l: Layout) -> Layout:
        return Layout(tuple(l.shape[p] for p in perm), tuple(l.stride[p] for p in perm), l.dtype, l.device,
                      l.offset)
    return restride(x, tuple(x.shape[p] for p in perm), imap, lay)


@register_lowering("squeeze")
def _squeeze(L: Lowerer, x: TV, dims: Sequence[int]) -> TV:
    dims = set(canonical_dims(dims, x.ndim)) if dims else set()
    dims = {d for d in dims if x.shape[d] == 1}
    keep = [i for i in range(x.ndim) if i not in dims]

    def imap(idx: Sequence) -> list:
        it = iter(idx)
        return [0 if i in dims else next(it) for i in range(x.ndim)]

    def lay(l: Layout) -> Layout:
        return Layout(tuple(l.shape[i] for i in keep), tuple(l.stride[i] for i in keep), l.dtype, l.device,
                      l.offset)
    return restride(x, tuple(x.shape[i] for i in keep), imap, lay)


@register_lowering("unsqueeze")
def _unsqueeze(L: Lowerer, x: TV, dim: int) -> TV:
    dim = dim % (x.ndim + 1)

    def imap(idx: Sequence) -> list:
        return list(idx[:dim]) + list(idx[dim + 1:])

    def lay(l: Layout) -> Layout:
        st = l.stride[dim] * l.shape[dim] if dim < x.ndim else 1
        return Layout(l.shape[:dim] + (1,) + l.shape[dim:], l.stride[:dim] + (st,) + l.stride[dim:], l.dtype,
                      l.device, l.offset)
    return restride(x, x.shape[:dim] + (1,) + x.shape[dim:], imap, lay)


@register_lowering("slice")
def _slice(L: Lowerer, x: TV, dim: int, start: Any, end: Any, step: int = 1) -> TV:
    dim = dim % x.ndim
    if all(isinstance(v, int) for v in (start, end, step, x.shape[dim])):
        start, end, step = slice(start, end, step).indices(x.shape[dim])
        n = max(0, (end - start + step - 1) // step)
    else:       # symbolic: the decomposition clamped start <= end within the size (ember.decomp._slice)
        n = cdiv(end - start, step)
    shape = x.shape[:dim] + (n,) + x.shape[dim + 1:]

    def imap(idx: Sequence) -> list:
        out = list(idx)
        out[dim] = start + step * idx[dim]
        return out

    def lay(l: Layout) -> Layout:
        st = list(l.stride)
        st[dim] = st[dim] * step
        return Layout(shape, tuple(st), l.dtype, l.device, l.offset + start * l.stride[dim])
    return restride(x, shape, imap, lay)


@register_lowering("view_of")
def _view_of(L: Lowerer, x: TV) -> TV:
    return x


@register_lowering("as_strided")
def _as_strided(L: Lowerer, x: TV, size: Sequence, stride: Sequence, offset: Any = 0) -> TV:
    ref = L.realize(x)
    base = ref.layout
    return buffer_view(ref.name, Layout(tuple(size), tuple(stride), base.dtype, base.device, offset))


@register_lowering("reshape")
def _reshape(L: Lowerer, x: TV, shape: Sequence) -> TV:
    shape = tuple(shape)
    if -1 in shape:
        known = prod([s for s in shape if s != -1])
        shape = tuple(prod(x.shape) // known if s == -1 else s for s in shape)
    if x.view is not None:
        l = x.view[1]
        st = contiguous_stride(shape) if l.is_contiguous() else _view_stride(tuple(l.shape), tuple(l.stride), shape)
        if st is not None:      # a view of the same memory, as torch's view() would give
            return buffer_view(x.view[0], Layout(shape, tuple(st), l.dtype, l.device, l.offset))
    groups = _reshape_groups(tuple(x.shape), shape)

    def imap(idx: Sequence) -> list:
        out: list = [0] * x.ndim
        for old, new in groups:
            flat = sum((idx[m] * prod(shape[m + 1:new[-1] + 1]) for m in new), sympy.Integer(0))
            for k, d in enumerate(old):
                inner = prod(x.shape[d + 1:old[-1] + 1])
                v = flat if inner == 1 else sympy.floor(flat / inner)
                out[d] = v if k == 0 else sympy.Mod(v, x.shape[d])
        return out
    return restride(x, shape, imap)


def _view_stride(old: tuple, stride: tuple, new: tuple) -> list | None:
    """Strides of ``new`` viewing the memory of a tensor of shape ``old`` and strides ``stride`` (ATen's
    computeStride): None when the reshape needs a copy. Symbolic sizes: two dims merge, and a run of new dims
    ends, only where the expressions are equal for every size (``same``); the hints only choose how far a
    run of new dims grows, so the answer holds for every size the graph runs with (else None: a copy)."""
    if not same(prod(old), prod(new)) or size_hint(prod(old)) == 0:
        return None
    if not old:
        return [1] * len(new)
    out = [0] * len(new)
    view_d = len(new) - 1
    base = stride[-1]
    t_numel = v_numel = 1
    for d in range(len(old) - 1, -1, -1):
        t_numel *= old[d]
        if d == 0 or (not _is_one(old[d - 1]) and not same(stride[d - 1], t_numel * base)):
            while view_d >= 0 and (size_hint(v_numel) < size_hint(t_numel) or _is_one(new[view_d])):
                out[view_d] = v_numel * base
                v_numel *= new[view_d]
                view_d -= 1
            if not same(v_numel, t_numel):
                return None
            if d > 0:
                base = stride[d - 1]
                t_numel = v_numel = 1
    return out if view_d == -1 else None


def _is_one(n: Any) -> bool:
    return isinstance(n, int) and n == 1 or isinstance(n, sympy.Basic) and n == 1


def _reshape_groups(old: tuple, new: tuple) -> list[tuple[list[int], list[int]]]:
    """Pair runs of old and new dims with equal products (size-1 dims join the run before them). Symbolic
    sizes: a run ends where the products are the same expression (equal for every size); the hints only
    choose which side grows."""
    groups, i, j = [], 0, 0
    while i < len(old) or j < len(new):
        go, gn = [i] if i < len(old) else [], [j] if j < len(new) else []
        po = old[i] if i < len(old) else 1
        pn = new[j] if j < len(new) else 1
        i, j = i + (i < len(old)), j + (j < len(new))
        while not same(po, pn):
            if size_hint(po) < size_hint(pn):
                go.append(i)
                po *= old[i]
                i += 1
            else:
                gn.append(j)
                pn *= new[j]
                j += 1
        while i < len(old) and old[i] == 1 and (j >= len(new) or new[j] != 1):
            go.append(i)
            i += 1
        while j < len(new) and new[j] == 1 and (i >= len(old) or old[i] != 1):
            gn.append(j)
            j += 1
        groups.append((go, gn))
    return groups


# movement ---------------------------------------------------------------------------------------------------
@register_lowering("clone")
def _clone(L: Lowerer, x: TV) -> TV:
    return TV(x.shape, x.dtype, x.device, x.loader)


@register_lowering("flip")
def _flip(L: Lowerer, x: TV, dims: Sequence[int]) -> TV:
    dims = set(canonical_dims(dims, x.ndim))
    return restride(x, x.shape, lambda idx: [x.shape[i] - 1 - v if i in dims else v for i, v in enumerate(idx)])


@register_lowering("cat")
def _cat(L: Lowerer, tensors: Sequence[TV], dim: int) -> TV:
    tensors = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or list(tensors[:1])
    dim = dim % tensors[0].ndim
    tensors = [t for t in tensors if t.shape[dim] != 0] or list(tensors[:1])
    shape = list(tensors[0].shape)
    shape[dim] = sum(t.shape[dim] for t in tensors)
    out: Any = None
    offset = 0
    pieces = []
    for t in tensors:
        pieces.append((offset, t))
        offset += t.shape[dim]
    dt = tensors[0].dtype
    for k, (off, t) in enumerate(reversed(pieces)):
        def shifted(idx: Sequence, off: int = off) -> list:
            out_idx = list(idx)
            out_idx[dim] = idx[dim] - off
            return out_idx
        if k == 0:   # the last piece: every load is masked, so no read ever leaves a piece's bounds
            cond = (lambda idx, off=off: sympy.Ge(idx[dim], off)) if off else (lambda idx: sympy.true)
            out = TV(tuple(shape), dt, t.device, masked(t, cond, shifted, 0))
            continue
        end = off + t.shape[dim]
        load = masked(t, lambda idx, off=off, end=end: sympy.And(sympy.Ge(idx[dim], off), sympy.Lt(idx[dim], end))
                      if off else sympy.Lt(idx[dim], end), shifted, out)
        out = TV(tuple(shape), dt, t.device, load)
    return out


def _maybe_positive(v: Any) -> bool:
    """False only where ``v > 0`` is known false (constants; symbolic ones by the active table's ranges)."""
    cond = sympy.Gt(v, 0)
    if isinstance(cond, sympy.logic.boolalg.BooleanAtom):
        return bool(cond)
    table = active_table()
    return table is None or table.known(cond) is not False


@register_lowering("pad")
def _pad(L: Lowerer, x: TV, pads: Sequence[tuple], value: Any) -> TV:
    """Positive pads read ``value`` outside x (masked loads); negative pads crop (index shift only)."""
    shape = tuple(s + lo + hi for s, (lo, hi) in zip(x.shape, pads))

    def cond(idx: Sequence) -> Any:
        c: Any = sympy.true
        for i, (lo, hi) in enumerate(pads):
            # a symbolic pad (a slice's backward) keeps its mask, which holds trivially where the pad is 0: no
            # relation splits the sizes by whether it is
            if _maybe_positive(lo):
                c = sympy.And(c, sympy.Ge(idx[i], lo))
            if _maybe_positive(hi):
                c = sympy.And(c, sympy.Lt(idx[i], lo + x.shape[i]))
        return c

    def imap(idx: Sequence) -> list:
        return [v - lo for v, (lo, hi) in zip(idx, pads)]
    return TV(shape, x.dtype, x.device, masked(x, cond, imap, value))


# reductions -------------------------------------------------------------------------------------------------
def _reduction_body(x: TV, d: Sequence[int], dtype: torch.dtype) -> tuple:
    """(kept ranges, reduced ranges, kept vars, reduced vars, body) of reducing x over dims ``d``."""
    from .expr import rvars, xvars
    kept = [i for i in range(x.ndim) if i not in d]
    ranges = tuple(x.shape[i] for i in kept)
    rranges = tuple(x.shape[i] for i in d)
    xs, rs = xvars(len(kept)), rvars(len(d))
    idx: list = [0] * x.ndim
    for v, i in zip(xs, kept):
        idx[i] = v
    for v, i in zip(rs, d):
        idx[i] = v
    return ranges, rranges, xs, rs, cast(x.loader(idx), dtype)


def _uses(e: Any, v: sympy.Symbol) -> bool:
    from .expr import walk
    for n in walk(e):
        for s in ((n.index, n.mask) if isinstance(n, Load) else (n.index,) if isinstance(n, IndexValue) else ()):
            if isinstance(s, sympy.Basic) and v in s.free_symbols:
                return True
    return False


def _gathered_rows_stored(L: Lowerer, body: Any, ranges: tuple, rranges: tuple, xs: list, rs: list,
                          device: torch.device) -> Any:
    """The body of a reduction to one value (a loss's mean over rows) that gathers one value per reduced point
    and reads per-row results of other reductions (cross-entropy: ``logits[r, target[r]] - max[r] - log(sum[r])``),
    stored first as a per-row buffer, whose pointwise node then joins the kernel computing those row results:
    each row's program makes its one gather, and the final reduction loads a short vector. Gathering every row
    inside the final reduction ran in one program, bound by the latency of scattered loads (~10 us for 4096
    rows of a 32k vocabulary on an H100, 8% of the loss's time)."""
    from .expr import loads, walk
    if prod(ranges) != 1 or not any(isinstance(n, Bind) for n in walk(body)):
        return body
    reduced = {n.name for n in L.nodes if isinstance(n, Reduction)}
    if not any(ld.buf in reduced for ld in loads(body)):
        return body
    # the stored node's own loop variables are x0.., which name the reduction's kept dims in ``body`` too:
    # those (all of size 1 here) are bound to 0 in the same rewrite, or a kept dim's x0 would become the
    # stored node's x0, running over the reduced points (a one-row x[idx] read idx[r] out of bounds)
    at = {x: sympy.Integer(0) for x in xs}
    stored = L.realize(TV(tuple(rranges), body.dtype, device,
                          lambda idx: substitute(body, lambda e: e.xreplace({**at, **dict(zip(rs, idx))}))))
    return Load(stored.name, stored.layout.index(rs), body.dtype)


def _one_hot_sum(body: Any, rs: list, rranges: tuple) -> Any:
    """``sum(where(r == v, a, 0) over r in [0, R))`` with ``v`` and ``a`` not depending on ``r`` (the sum of a
    one-hot row: the gradient of ``nll_loss`` summed by ``log_softmax``'s backward) is ``where(0 <= v < R, a,
    0)``: that body, or None for any other reduction. GPT-2's backward spent 0.45 ms on the H100 summing
    50257 mostly-zero columns per token."""
    if len(rs) != 1 or not isinstance(rranges[0], int):
        return None
    r, chain, e = rs[0], [], body
    while isinstance(e, Op) and e.name == "to_dtype":
        chain.append(e)
        e = e.args[0]
    if not (isinstance(e, Op) and e.name == "where" and isinstance(e.args[2], Const) and e.args[2].value == 0):
        return None
    cond, a, zero = e.args
    if not (isinstance(cond, Op) and cond.name == "eq"):
        return None
    iv, v = cond.args if isinstance(cond.args[0], IndexValue) else cond.args[::-1]
    if not isinstance(iv, IndexValue) or iv.index != r or v.dtype.is_floating_point \
            or v.dtype == torch.bool or _uses(v, r) or _uses(a, r):
        return None
    inside = Op("logical_and", (Op("ge", (v, Const(0, v.dtype)), torch.bool),
                                Op("lt", (v, Const(rranges[0], v.dtype)), torch.bool)), torch.bool)
    out: Any = Op("where", (inside, a, zero), e.dtype)
    for c in reversed(chain):
        out = Op(c.name, (out,) + c.args[1:], c.dtype)
    return out


def _reduce(L: Lowerer, x: TV, dims: Any, keepdim: bool, kind: str, dtype: torch.dtype | None) -> TV:
    d = canonical_dims(dims, x.ndim) if x.ndim else ()
    out_dtype = torch.bool if kind in ("any", "all") else (dtype or x.dtype)
    body_dtype = torch.bool if kind in ("any", "all") else out_dtype
    if not d:  # nothing reduced: a copy (any/all test truth)
        return TV(x.shape, out_dtype, x.device, lambda idx: cast(x.loader(idx), out_dtype))
    ranges, rranges, xs, rs, body = _reduction_body(x, d, body_dtype)
    one_hot = _one_hot_sum(body, rs, rranges) if kind == "sum" else None
    if one_hot is not None:
        out = TV(ranges, out_dtype, x.device,
                 lambda idx: substitute(one_hot, lambda e: e.xreplace(dict(zip(xs, idx)))))
        for i in (d if keepdim else ()):
            out = _unsqueeze(L, out, i)
        return out
    body = _gathered_rows_stored(L, body, ranges, rranges, xs, rs, x.device)
    name = L.new_name()
    lay = Layout.contiguous(ranges, out_dtype, x.device)
    outer = _kept_dim_contiguous(body, xs, rs)
    # welford is split by ``welford.var_mean`` alone: a padded chunk would count its padding
    # the accuracy split's count (CPU) is one whose chunks interleave along the row's dims (``split_align``)
    split = 1 if kind == "welford" else max(
        _split_factor(x.device, prod(ranges), prod(rranges), outer),
        aligned_split(rranges, _accuracy_split(x.device, prod(rranges), kind, out_dtype, outer)))
    if split > 1:
        body, ranges, rranges = _split_reduction(L, body, ranges, rranges, kind, split, out_dtype, x.device, outer)
    L.nodes.append(Reduction(name, lay, ranges, rranges, kind, body))
    out = buffer_view(name, lay)
    if keepdim:
        for i in d:
            out = _unsqueeze(L, out, i)
    return out


IDENTITY = {"sum": 0, "prod": 1, "amax": float("-inf"), "amin": float("inf"), "any": False, "all": True}


def _kept_dim_contiguous(body: Any, xs: list, rs: list) -> bool:
    """Whether the reduction reads its innermost kept dim at unit stride and no reduced dim so (outer)."""
    from .expr import loads
    from .indexing import steps_by_one
    idx = [ld.index for ld in loads(body) if isinstance(ld.index, sympy.Basic)]
    if not xs or not rs or not idx:
        return False
    # loads that are the same for every kept point (a LayerNorm's per-row mean and rstd, read by its weight
    # gradient) are broadcast across the tile: they do not decide how the tile runs
    moving = [i for i in idx if i.free_symbols & set(xs)] or idx
    return any(steps_by_one(i, xs[-1]) for i in moving) and not any(steps_by_one(i, r) for i in moving for r in rs)


def _split_factor(device: torch.device, xnumel: Any, rnumel: Any, outer: bool = False) -> int:
    if device.type != "cuda" or not isinstance(xnumel, int) or not isinstance(rnumel, int):
        return 1
    if outer:
        h = heuristics()
        if rnumel < h.outer_min_rnumel or -(-xnumel // h.outer_tile) >= h.outer_min_programs:
            return 1
        return max(1, min(heuristics().split_target_outer // xnumel, rnumel // heuristics().outer_min_chunk))
    if rnumel < heuristics().split_min_rnumel or xnumel > heuristics().split_max_xnumel:
        return 1
    return max(1, min(heuristics().split_target_programs // xnumel, rnumel // heuristics().split_min_chunk))


def _accuracy_split(device: torch.device, rnumel: Any, kind: str, dtype: torch.dtype, outer: bool) -> int:
    """Chunks for a long floating-point outer sum on the CPU (``outer``: a per-channel sum over NHWC rows, a
    bias gradient over tokens). Its kernels give each vector lane an outer point, which adds its whole row one
    point after another, so the rounding error grows with the row (float32 over a million rows: 1e-5 of the
    sum, 1e-3 of a variance, where ATen's cascade sums keep 1e-7). Partials over chunks of about the row's
    square root, then their sum, bound both additions' lengths by that root. A contiguous row (not outer) is
    spread over the lanes, each adding a vector's share of it, and is left whole: its chunks would read it
    through divisions (an NCHW batch norm's rows of H*W points ran 10x slower). Rows from 2048 points on are
    split (``accurate_min_rnumel``): a RegNet-Y's batch statistics over 2048 points, added whole, flipped a ReLU
    whose input was 1.6e-6 from zero and moved its gradients by up to 3.6 (issue 31)."""
    if device.type != "cpu" or not outer or kind not in ("sum", "welford") or not dtype.is_floating_point \
            or not isinstance(rnumel, int) or rnumel < heuristics().accurate_min_rnumel:
        return 1
    return -(-rnumel // max(heuristics().accurate_min_chunk, math.isqrt(rnumel)))


def _identity(kind: str, dtype: torch.dtype) -> Any:
    v = IDENTITY[kind]
    if kind in ("amax", "amin") and not dtype.is_floating_point:
        if dtype is torch.bool:
            return kind == "amin"
        info = torch.iinfo(dtype)
        return info.min if kind == "amax" else info.max
    return v


def _split_reduction(L: Lowerer, body: Any, ranges: tuple, rranges: tuple, kind: str, split: int,
                     dtype: torch.dtype, device: torch.device, outer: bool = False) -> tuple:
    """Partials ``part[x..., s] = reduce over chunk s of the row``; returns the body, ranges and reduction
    ranges of the final reduction over ``s``. ``outer``: the partials are ``part[s, x...]`` instead, so that
    adjacent programs' outputs (and the loads of one tile) stay adjacent in the kept, contiguous dim."""
    from .expr import rvars, xvars
    from .indexing import _term
    R = prod(rranges)
    chunk = -(-R // split)
    xs = xvars(len(ranges) + 1)
    if outer:           # the split index first: rename x0.. -> x1.., and x0 is the split
        shift = {v: xs[i + 1] for i, v in enumerate(xs[:-1])}
        body = substitute(body, lambda e: e.xreplace(shift))
        s_var = xs[0]
    else:
        s_var = xs[-1]
    rr = rvars(1)[0]
    flat = s_var * chunk + rr
    aligned = aligned_factor(rranges, split) if device.type == "cpu" else None
    if aligned is not None:     # chunks interleaved along the row's dims: affine, unmasked (``split_align``)
        idx, prr = aligned_substitution(rranges, s_var, rvars(len(rranges)), *aligned)
        sub = {v: idx[i] for i, v in enumerate(rvars(len(rranges)))}
    else:
        prr = (chunk,)
        sub = {}
        for i, v in enumerate(rvars(len(rranges))):
            sub[v] = 0 if rranges[i] == 1 else _term(flat, prod(rranges[i + 1:]), rranges[i],
                                                     all(n == 1 for n in rranges[:i]))
    part_body = substitute(body, lambda e: e.xreplace(sub))
    if R % split:
        cond = sympy.Lt(flat, R)
        part_body = substitute(part_body, lambda e: e,
                               load=lambda ld: Load(ld.buf, ld.index, ld.dtype,
                                                    cond if ld.mask is None else sympy.And(ld.mask, cond)))
        part_body = Op("where", (IndexValue(cond, torch.bool), part_body,
                                 Const(_identity(kind, dtype), dtype)), dtype)
    pname = L.new_name()
    pranges = (split, *ranges) if outer else (*ranges, split)
    play = Layout.contiguous(pranges, dtype, device)
    L.nodes.append(Reduction(pname, play, pranges, prr, kind, part_body))
    xs2, r0 = xvars(len(ranges)), rvars(1)[0]
    final = Load(pname, play.index([r0, *xs2] if outer else [*xs2, r0]), dtype)
    return final, ranges, (split,)


def _reduction(kind: str) -> Any:
    def lowering(L: Lowerer, x: TV, dims: Any, keepdim: bool = False, dtype: torch.dtype | None = None) -> TV:
        return _reduce(L, x, dims, keepdim, kind, dtype)
    return lowering


for _k in ("sum", "prod", "amax", "amin", "any", "all"):
    register_lowering(_k)(_reduction(_k))


def _arg_reduction(best_kind: str) -> Any:
    """argmax (``best_kind`` "amax") / argmin ("amin") over one dim as two reductions the scheduler fuses into
    one kernel, as softmax's max and sum: the best value, then the smallest position holding it (ties: the first,
    as ATen), where a NaN counts as the best (ATen's rule; the best value is then NaN and ``==`` misses it)."""
    def lowering(L: Lowerer, x: TV, dim: int, keepdim: bool = False) -> TV:
        if x.ndim == 0:
            return constant((), 0, torch.int64, x.device)
        d = canonical_dims(dim, x.ndim)
        best = _broadcast(L, _reduce(L, x, d, True, best_kind, None), x.shape, list(range(x.ndim)))
        hit = pointwise("eq", [x, best], x.dtype, torch.bool)
        if x.dtype.is_floating_point:
            both_nan = pointwise("logical_and", [pointwise("isnan", [x], x.dtype, torch.bool),
                                                 pointwise("isnan", [best], x.dtype, torch.bool)], torch.bool)
            hit = pointwise("logical_or", [hit, both_nan], torch.bool)
        pos = index_value(x.shape, lambda idx: idx[d[0]], torch.int64, x.device)
        cand = pointwise("where", [hit, pos, int(x.shape[d[0]])], torch.int64)
        return _reduce(L, cand, d, keepdim, "amin", torch.int64)
    return lowering


register_lowering("argmax")(_arg_reduction("amax"))
register_lowering("argmin")(_arg_reduction("amin"))


# indexing: loads whose address depends on a loaded value ---------------------------------------------------
def _wrapped(v: Any, size: Any) -> Any:
    """A possibly negative index value wrapped into [0, size) as torch's advanced indexing does."""
    zero = Const(0, v.dtype)
    return Op("where", (Op("lt", (v, zero), torch.bool), Op("add", (v, Const(int(size), v.dtype)), v.dtype), v),
              v.dtype)


def _indirect(x: TV, xidx: list, dim_values: dict) -> Any:
    """x at xidx, with dims in ``dim_values`` (dim -> index Expr) read through bound symbols."""
    binds = []
    for d, val in dim_values.items():
        s = indirect_symbol()
        xidx[d] = s
        binds.append((s, val, x.shape[d] if isinstance(x.shape[d], int) else None))
    out = x.loader(xidx)
    for s, val, extent in reversed(binds):
        out = Bind(s, val, out, extent)
    return out


@register_lowering("gather")
def _gather(L: Lowerer, x: TV, dim: int, index: TV) -> TV:
    dim = dim % max(x.ndim, 1)
    if x.ndim == 0:         # the index has at most one element (0): the result is x in the index's shape
        return TV(tuple(index.shape), x.dtype, x.device, lambda idx: x.loader([]))

    def load(idx: Sequence) -> Any:
        return _indirect(x, list(idx), {dim: index.loader(idx)})
    return TV(index.shape, x.dtype, x.device, load)


@register_lowering("index_select")
def _index_select(L: Lowerer, x: TV, dim: int, index: TV) -> TV:
    if x.ndim == 0:
        return x
    dim = dim % x.ndim
    shape = list(x.shape)
    shape[dim] = prod(index.shape)

    def load(idx: Sequence) -> Any:
        ival = index.loader([idx[dim]] if index.ndim == 1 else [])
        return _indirect(x, list(idx), {dim: ival})
    return TV(tuple(shape), x.dtype, x.device, load)


def _broadcast_shapes(shapes: Sequence[tuple]) -> tuple:
    """The broadcast of index shapes whose sizes may be symbolic (a ``nonzero``'s count): per dim, the sizes
    other than 1 must be one expression; raises UseExtern where that cannot be told at compile time."""
    out = []
    for k in range(1, max(map(len, shapes), default=0) + 1):
        sizes = {s[-k] for s in shapes if len(s) >= k and not (isinstance(s[-k], int) and s[-k] == 1)}
        if len(sizes) > 1:
            raise UseExtern("index tensors of sizes that may not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(reversed(out))


def advanced_index(x: TV, indices: Sequence[Any]) -> tuple[tuple, Any]:
    """torch's advanced indexing ``x[indices]`` (index tensors or None per leading dim): the result's shape,
    and ``position(idx) -> (xidx, {dim: index value})``, where the result's point ``idx`` reads ``x``: ``xidx``
    holds the plain dims' indices, the indexed dims take the (wrapped) loaded values."""
    idx_t = list(indices) + [None] * (x.ndim - len(indices))
    adv = [i for i, t in enumerate(idx_t) if t is not None]
    if not adv or any(idx_t[i].dtype in (torch.bool, torch.uint8) for i in adv):
        raise UseExtern("boolean mask indexing")
    if not all(isinstance(x.shape[i], int) for i in adv):
        raise UseExtern("symbolic sizes of indexed dims")
    bshape = _broadcast_shapes([tuple(idx_t[i].shape) for i in adv])
    contiguous = adv == list(range(adv[0], adv[-1] + 1))
    rest = [i for i in range(x.ndim) if idx_t[i] is None]
    nb = len(bshape)
    if contiguous:
        before, after = list(range(adv[0])), list(range(adv[-1] + 1, x.ndim))
        shape = tuple(x.shape[i] for i in before) + bshape + tuple(x.shape[i] for i in after)
    else:
        before, after = [], rest
        shape = bshape + tuple(x.shape[i] for i in rest)

    def position(idx: Sequence) -> tuple[list, dict]:
        idx = list(idx)
        bidx = idx[len(before):len(before) + nb]
        xidx: list = [0] * x.ndim
        for k, d in enumerate(before):
            xidx[d] = idx[k]
        for k, d in enumerate(after):
            xidx[d] = idx[len(before) + nb + k]
        vals = {}
        for d in adv:
            t = idx_t[d]
            off = nb - t.ndim
            tidx = [0 if t.shape[j] == 1 and bshape[off + j] != 1 else bidx[off + j] for j in range(t.ndim)]
            vals[d] = _wrapped(t.loader(tidx), x.shape[d])
        return xidx, vals
    return shape, position


@register_lowering("index")
def _index(L: Lowerer, x: TV, indices: Sequence[Any]) -> TV:
    shape, position = advanced_index(x, indices)

    def load(idx: Sequence) -> Any:
        return _indirect(x, *position(idx))
    return TV(shape, x.dtype, x.device, load)
