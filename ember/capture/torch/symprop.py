"""Symbolic sizes of op results while tracing.

Each op of the trace runs on meta tensors at the call's sizes (the hints): that gives dtypes, devices and
the sizes of this call. Where inputs have symbolic sizes, the sizes of the result as expressions of the
symbols come from running the op again on meta tensors whose sizes are ``torch.SymInt``s (PyTorch's meta
kernels compute with ember's ``SymNode``), or, for the ops whose C++ meta kernel takes only concrete sizes
(views by sizes, ``expand``, indexing, ``matmul``...), from a small shape rule in ``RULES``. A size that
neither gives is *unknown*: the graph still computes it at run time, but reading it in Python makes the
frame compile with static sizes (``SymbolicUnsupported``). Every answer is checked against the meta run at
the hints.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import sympy
import torch

from ... import logs
from ...shapes import SymbolicUnsupported, expr_of, located
from ..values import Const, DictVar, ListVar, TupleVar, Value
from .graph import META, TensorVar
from .symsize import SymNumVar, where

RULES: dict[str, Callable] = {}


class Unknown(Exception):
    """A shape rule cannot compute the result's sizes symbolically."""


def rule(*names: str):
    def deco(fn):
        for n in names:
            RULES[n] = fn
        return fn
    return deco


def _name(kind: str, target: Any) -> str:
    return target if kind == "call_method" else (getattr(target, "__name__", "") or "")


def has_symbols(args, kwargs) -> bool:
    def sym(v) -> bool:
        t = type(v)
        if t is TensorVar:
            return v.sym is not None
        if t is SymNumVar:
            return True
        if t in (TupleVar, ListVar):
            return any(map(sym, v.items))
        if t is DictVar:
            return any(map(sym, v.items.values()))
        if t.__name__ == "SliceVar":
            return any(map(sym, v.parts))
        return False
    return any(map(sym, args)) or any(map(sym, kwargs.values()))


def propagate(d, f, kind: str, target: Any, meta_fn: Callable, args: list, kwargs: dict, out: Any) -> Any:
    """The symbolic sizes of ``out`` (same structure: a sizes tuple per tensor, None elsewhere)."""
    st = d.torch
    name = _name(kind, target)
    with located(where(f)):
        res, why = _symbolic_sizes(st, name, meta_fn, args, kwargs)
    if res is None and isinstance(out, (tuple, list)) and name in COUNTED:
        # the trace unrolls this op's pieces: their number must not depend on an unknown size
        raise SymbolicUnsupported(f"capture: {name}() at {where(f)} on symbolic sizes: {why}")
    checked = _checked(st.table, res, out)
    if why and logs.enabled("dynamic") and _has_unknown(checked):
        logs.log("dynamic", f"sizes of {name}() at {where(f)} are unknown: {why}")
    return checked


def _symbolic_sizes(st, name: str, meta_fn: Callable, args: list, kwargs: dict) -> tuple[Any, str]:
    """(sizes, "") from a shape rule or the symbolic meta run, or (None, why they are unknown)."""
    r = RULES.get(name)
    if r is not None:       # ops whose meta kernels take only concrete sizes (or specialize them)
        try:
            return r(st.table, [_sym_arg(a) for a in args], {k: _sym_arg(v) for k, v in kwargs.items()}), ""
        except Unknown:
            return None, "its shape rule does not cover these arguments"
        except Exception as e:      # noqa: BLE001 - arguments a rule does not expect: unknown sizes
            return None, f"its shape rule failed ({type(e).__name__}: {e})"
    try:
        sargs = [_sym_meta(st, a) for a in args]
        skw = {k: _sym_meta(st, v) for k, v in kwargs.items()}
        if "device" in skw and skw["device"] is not None:
            skw["device"] = "meta"
        with torch.no_grad(), torch.device(META):
            sout = meta_fn(*sargs, **skw)
        return _sizes_of(sout), ""
    except Unknown:
        return None, "an input's sizes or layout are unknown"
    except Exception as e:       # noqa: BLE001 - a meta kernel that takes only concrete sizes: unknown sizes
        first = (str(e).splitlines() or [""])[0][:160]
        return None, f"no shape rule, and PyTorch's meta kernel takes only concrete sizes ({first})"


def _has_unknown(x) -> bool:
    if isinstance(x, tuple):
        return any(e is None for e in x)
    if isinstance(x, list):
        return any(map(_has_unknown, x))
    return False


def _checked(table, res, out):
    if isinstance(out, torch.Tensor):
        if not isinstance(res, tuple) or len(res) != out.dim():
            return tuple([None] * out.dim())
        sizes = []
        for e, n in zip(res, out.shape):
            e = table.simplify(e) if isinstance(e, sympy.Basic) else e
            if isinstance(e, sympy.Integer):
                e = int(e)
            if e is not None and table.hint(e) != int(n):
                e = None        # disagrees with the meta run at the hints: not trusted
            sizes.append(e)
        return tuple(sizes)
    if isinstance(out, (tuple, list)):
        rs = res if isinstance(res, (tuple, list)) and not _is_sizes(res) and len(res) == len(out) else [None] * len(out)
        return [_checked(table, r, o) for r, o in zip(rs, out)]
    return None


def _is_sizes(x) -> bool:
    return isinstance(x, tuple) and all(e is None or isinstance(e, (int, sympy.Basic)) for e in x)


def _sizes_of(x):
    if isinstance(x, torch.Tensor):
        return tuple(expr_of(s) for s in x.shape)
    if isinstance(x, (tuple, list)):
        return [_sizes_of(y) for y in x]
    return None


checked_sizes = _checked        # for the higher-order operators' nodes (subgraph.py)
sizes_of = _sizes_of


def final_sym(sizes: tuple | None):
    """What a TensorVar keeps: None when every size is a constant."""
    if sizes is None or all(isinstance(e, int) for e in sizes):
        return None
    return sizes


def _sym_meta(st, v: Value) -> Any:
    """``v`` as the symbolic meta run takes it: tensors with SymInt sizes, SymInts for symbolic ints."""
    t = type(v)
    if t is TensorVar:
        if v.sym is None:
            return v.meta
        return symbolic_meta(st.table, v.meta, v.sym)
    if t is SymNumVar or t.__name__ == "SymFloatVar":
        return v.sym
    if t is Const:
        return v.value
    if t is TupleVar:
        return tuple(_sym_meta(st, x) for x in v.items)
    if t is ListVar:
        return [_sym_meta(st, x) for x in v.items]
    if t is DictVar:
        return {k: _sym_meta(st, x) for k, x in v.items.items()}
    if t.__name__ == "SliceVar":
        return slice(*[_sym_meta(st, p) for p in v.parts])
    from .graph import meta_arg
    return meta_arg(v)


def symbolic_meta(table, meta: torch.Tensor, sizes: tuple) -> torch.Tensor:
    if any(e is None for e in sizes):
        raise Unknown()
    try:
        strides = sym_strides(table, meta, sizes)
    except Unknown:     # a view that is not dense (a piece of a split): result *sizes* never depend on strides
        strides = _contiguous_strides(sizes)
    return torch.empty_strided([table.symint(e) for e in sizes], [table.symint(e) for e in strides],
                               dtype=meta.dtype, device=META)


def _contiguous_strides(sizes: tuple) -> tuple:
    out, acc = [], sympy.Integer(1)
    for n in reversed(sizes):
        out.append(int(acc) if isinstance(acc, sympy.Integer) else acc)
        acc = acc * n
    return tuple(reversed(out))


def sym_strides(table, meta: torch.Tensor, sizes: tuple) -> tuple:
    """The strides of ``meta`` as expressions of ``sizes``: dense in the order of its strides; 0 stays 0. A
    dim of size 1 whose stride is the dense one at its place (a contiguous KV cache (1, h, s0, d): h*s0*d at
    dim 0) gets that expression, not the hint's number; any other stride there is kept (it is never
    multiplied by a nonzero index, and guards and the wrapper do not compare it)."""
    order = sorted(range(meta.dim()), key=lambda i: (meta.stride(i), meta.shape[i]))
    out: list = [0] * meta.dim()
    expected: Any = sympy.Integer(1)
    for i in order:
        st = meta.stride(i)
        if st == 0 and meta.shape[i] != 1:
            out[i] = 0
            continue
        if meta.shape[i] == 1:
            out[i] = expected if not isinstance(sizes[i], int) or table.hint(expected) == st else st
            continue
        if table.hint(expected) != st:
            raise Unknown()
        out[i] = expected
        expected = expected * sizes[i]
    return tuple(int(e) if isinstance(e, sympy.Integer) else e for e in out)


def _sym_arg(v: Value) -> Any:
    t = type(v)
    if t is TensorVar:
        return TSizes(v.sym if v.sym is not None else tuple(int(n) for n in v.meta.shape))
    if t is SymNumVar:
        return v.sym.node.expr
    if t.__name__ == "SymFloatVar":     # a float operand: sizes never depend on its value
        return v.sym.node.hint
    if t is Const:
        return v.value
    if t in (TupleVar, ListVar):
        return tuple(_sym_arg(x) for x in v.items)
    if t.__name__ == "SliceVar":
        return slice(*[_sym_arg(p) for p in v.parts])
    raise Unknown()


class TSizes(tuple):
    """A tensor argument of a shape rule: its sizes."""


def _sizes_arg(args: tuple) -> tuple:
    if len(args) == 1 and isinstance(args[0], tuple) and not isinstance(args[0], TSizes):
        return args[0]
    return tuple(args)


def _prod(xs) -> Any:
    p: Any = sympy.Integer(1)
    for x in xs:
        if x is None:
            raise Unknown()
        p = p * x
    return p


def _div(a, b):
    q = sympy.cancel(sympy.sympify(a) / b)
    num, den = sympy.fraction(q)
    return q if den == 1 else sympy.floor(sympy.sympify(a) / b)


@rule("view", "reshape", "_unsafe_view")
def _view(table, args, kwargs):
    t = args[0]
    sizes = list(_sizes_arg(args[1:]) if len(args) > 1 else kwargs.get("shape", ()))
    if any(isinstance(s, torch.dtype) for s in sizes):
        raise Unknown()
    if -1 in sizes:
        k = sizes.index(-1)
        sizes[k] = _div(_prod(t), _prod(s for i, s in enumerate(sizes) if i != k))
    return tuple(sizes)


@rule("expand")
def _expand(table, args, kwargs):
    t = args[0]
    sizes = list(_sizes_arg(args[1:]))
    lead = len(sizes) - len(t)
    return tuple(t[i - lead] if (s == -1 and i >= lead) else s for i, s in enumerate(sizes))


@rule("expand_as", "view_as", "reshape_as")
def _as(table, args, kwargs):
    return tuple(args[1])


@rule("masked_fill", "masked_fill_", "tril", "triu", "tril_", "triu_", "contiguous", "clone", "detach")
def _same(table, args, kwargs):
    return tuple(args[0])


@rule("ones", "zeros", "empty", "randn", "rand", "full")
def _factory(table, args, kwargs):
    sizes = args[0] if args and isinstance(args[0], tuple) else tuple(a for a in args if not isinstance(a, float))
    return tuple(kwargs.get("size", sizes))


def bcast(table, a: tuple, b: tuple) -> tuple:
    """The broadcast of two shapes; two symbolic sizes broadcast only when equal (decided: a relation)."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if isinstance(x, int) and x == 1:
            out.append(y)
        elif isinstance(y, int) and y == 1:
            out.append(x)
        elif isinstance(x, int) and isinstance(y, int):
            if x != y:
                raise Unknown()
            out.append(x)
        else:       # a symbolic size is never 1: the sizes must be equal
            if not table.decide(sympy.Eq(x, y)):
                raise Unknown()
            out.append(y if isinstance(y, int) else x)
    return tuple(out)


@rule("matmul", "__matmul__", "bmm", "mm")
def _matmul(table, args, kwargs):
    a, b = args[0], args[1]
    if len(a) == 0 or len(b) == 0:
        raise Unknown()
    if len(b) == 1:
        return tuple(a[:-1])
    if len(a) == 1:
        return tuple(b[:-2]) + (b[-1],)
    return bcast(table, a[:-2], b[:-2]) + (a[-2], b[-1])


@rule("linear")
def _linear(table, args, kwargs):
    x, w = args[0], args[1]
    return tuple(x[:-1]) + (w[0],)


@rule("scaled_dot_product_attention")
def _sdpa(table, args, kwargs):
    q, v = args[0], args[2]
    return tuple(q[:-1]) + (v[-1],)


@rule("getitem")
def _getitem(table, args, kwargs):
    t, idx = args[0], args[1]
    idx = idx if isinstance(idx, tuple) and not isinstance(idx, TSizes) else (idx,)
    if any(isinstance(i, TSizes) for i in idx):
        return _advanced(table, t, idx)
    n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
    out, d = [], 0
    for i in idx:
        if i is Ellipsis:
            k = len(t) - n_real
            out.extend(t[d:d + k])
            d += k
        elif i is None:
            out.append(1)
        elif isinstance(i, (int, sympy.Basic)) and not isinstance(i, bool):
            d += 1
        elif isinstance(i, slice):
            out.append(_slice_len(table, t[d], i))
            d += 1
        else:
            raise Unknown()
    return tuple(out) + tuple(t[d:])


def _advanced(table, t: tuple, idx: tuple) -> tuple:
    """Indexing by (integer) tensors and slices: the broadcast index shape replaces the indexed dims, in
    place when those are adjacent, else in front (NumPy's rule, as PyTorch's). Ints and None: unknown."""
    k = len(t) - sum(1 for i in idx if i is not Ellipsis)
    parts = []
    for i in idx:
        parts.extend([slice(None)] * k if i is Ellipsis else [i])
    if any(not isinstance(i, (slice, TSizes)) for i in parts) or len(parts) > len(t):
        raise Unknown()
    parts += [slice(None)] * (len(t) - len(parts))
    where_t = [j for j, i in enumerate(parts) if isinstance(i, TSizes)]
    shape: tuple = ()
    for j in where_t:
        shape = bcast(table, shape, parts[j])
    rest = [(j, _slice_len(table, t[j], i)) for j, i in enumerate(parts) if isinstance(i, slice)]
    if where_t == list(range(where_t[0], where_t[-1] + 1)):
        return tuple(n for j, n in rest if j < where_t[0]) + shape + tuple(n for j, n in rest if j > where_t[-1])
    return shape + tuple(n for _, n in rest)


def _slice_len(table, n, s: slice):
    step = 1 if s.step is None else s.step
    if not isinstance(step, int) or step <= 0:
        raise Unknown()
    start = _clamp(table, 0 if s.start is None else s.start, n)
    stop = _clamp(table, n if s.stop is None else s.stop, n)
    if table.decide(sympy.Ge(stop, start)) if _symbolic(stop, start) else stop >= start:
        return (stop - start) if step == 1 else sympy.floor((stop - start + step - 1) / sympy.Integer(step))
    return 0


def _symbolic(*xs) -> bool:
    return any(isinstance(x, sympy.Basic) and x.free_symbols for x in xs)


def _clamp(table, i, n):
    if isinstance(i, int) and i < 0:
        i = n + i
        if (table.decide(sympy.Lt(i, 0)) if _symbolic(i) else i < 0):
            return 0
        return i
    if _symbolic(i, n):
        if not table.decide(sympy.Ge(i, 0)):
            return 0
        return i if table.decide(sympy.Le(i, n)) else n
    return min(i, n)


_ = operator

COUNTED = frozenset({"split", "chunk", "unbind", "tensor_split", "split_with_sizes", "unsafe_split", "hsplit",
                     "vsplit", "dsplit"})   # ops whose number of outputs may depend on a size
