"""Symbolic sizes in ember's fake tensors: output metadata where PyTorch's meta kernel cannot compute it.

Input: an ATen op whose meta kernel raised on inputs with symbolic sizes (C++ composite code calling
``sizes()``: broadcasting ``add``, ``expand``, ``view``, ``cumsum``, ...; or the INTERNAL ASSERT
"dispatch_on_subclass" that PyTorch's Python-arg parser raises for view ops such as ``permute`` and ``slice``
on meta tensors with symbolic sizes, whose C++ view code re-enters Python). Output: meta tensors with
symbolic sizes/strides, as the meta kernel would have made them.

How:
- View ops use a small per-op rule (``VIEW_RULES``) giving (sizes, strides, storage offset) as sympy
  expressions; the result is an ``as_strided`` view of the input's meta tensor, so it shares its storage as
  eager's view does (aliasing and functionalization depend on that).
- Other ops run ember's decomposition on ``TensorMeta`` inputs (``ember.decomp.interp.meta_decomposition``,
  whose prim meta rules accept sympy sizes) for the symbolic shape; the strides are the dense strides, in the
  dimension order the concrete meta kernel gives at the hints. The symbolic result evaluated at the hints must
  equal the concrete meta kernel's output (shape and strides), else ``SymbolicUnsupported``.
- In-place and ``out=`` ops return the tensors they write (their metadata does not change).
Every decision on a symbolic size goes through ``SymbolTable.decide`` (recorded as a relation). No rule or a
failing decomposition -> ``SymbolicUnsupported`` (the caller compiles the graph with static sizes).
"""
from __future__ import annotations

from typing import Any, Callable

import sympy
import torch
from torch.utils._python_dispatch import _disable_current_modes

from ember.autograd.fake import FakeMode, SymbolicRules, _with_index
from ember.decomp.trees import tree_leaves, tree_map
from ember.shapes import SymbolicUnsupported, SymbolTable, expr_of, hint_of, is_symbolic, using

aten = torch.ops.aten
_BIG = 1 << 62          # slice ends at or past this mean "to the end" (INT64_MAX)


def has_symbols(args: Any, kwargs: Any) -> bool:
    """Whether an op's arguments hold a symbolic size (a SymInt, or a tensor with symbolic sizes/strides)."""
    for x in tree_leaves((args, kwargs)):
        if isinstance(x, torch.Tensor):
            if any(map(is_symbolic, (*x.shape, *x.stride(), x.storage_offset()))):
                return True
        elif is_symbolic(x):
            return True
    return False


def table_of(args: Any, kwargs: Any) -> SymbolTable:
    for x in tree_leaves((args, kwargs)):
        vals = (*x.shape, *x.stride()) if isinstance(x, torch.Tensor) else (x,)
        for v in vals:
            if is_symbolic(v):
                return v.node.table
    raise SymbolicUnsupported("no symbolic size among the arguments")


def prefers_rule(func: Any, args: tuple, kwargs: dict) -> bool:
    """A view op with a rule in ``VIEW_RULES``, on symbolic arguments."""
    return func._overloadpacket.__name__ in VIEW_RULES and not _written_indices(func) and \
        has_symbols(args, kwargs)


def _written_indices(func: Any) -> list[int]:
    return [i for i, a in enumerate(func._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]


def symbolic_meta(func: Any, args: tuple, kwargs: dict, error: Exception) -> Any:
    """``func``'s meta output(s) for arguments with symbolic sizes (see the module docstring)."""
    table = table_of(args, kwargs)
    written = _written_indices(func)
    if written and all(r.alias_info is not None for r in func._schema.returns):
        return _written(func, args, kwargs, written)    # in-place / out=: the outputs are the written args
    rule = VIEW_RULES.get(func._overloadpacket.__name__)
    if rule is not None:
        return _views(table, args[0], rule(table, *args, **kwargs))
    if any(a.alias_info is not None for a in func._schema.returns):
        raise SymbolicUnsupported(f"{func}: a view op without a symbolic shape rule ({_first_line(error)})")
    return _decomposed(func, table, args, kwargs, error)


def _first_line(e: Exception | None) -> str:
    if e is None:
        return "no rule"
    return str(e).splitlines()[0][:200] if str(e) else type(e).__name__


def _written(func: Any, args: tuple, kwargs: dict, written: list[int]) -> Any:
    schema = func._schema.arguments
    outs = [kwargs[schema[i].name] if schema[i].name in kwargs else args[i] for i in written]
    return outs[0] if len(outs) == 1 else tuple(outs)


# -- views ---------------------------------------------------------------------------------------------
def _layout(t: torch.Tensor) -> tuple[list, list, Any]:
    return [expr_of(d) for d in t.shape], [expr_of(d) for d in t.stride()], expr_of(t.storage_offset())


def _views(table: SymbolTable, base: torch.Tensor, layouts: Any) -> Any:
    def make(layout: tuple) -> torch.Tensor:
        shape, stride, offset = layout
        with _disable_current_modes():
            return base.as_strided([table.symint(e) for e in shape], [table.symint(e) for e in stride],
                                   table.symint(offset))
    return [make(lay) for lay in layouts] if isinstance(layouts, list) else make(layouts)


def _same(a: Any, b: Any) -> bool:
    return sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0


def _equal(table: SymbolTable, a: Any, b: Any) -> bool:
    """``a == b`` for sizes: structural, else decided (and recorded) at the hints."""
    return _same(a, b) or table.decide(sympy.Eq(sympy.sympify(a), sympy.sympify(b)))


def _prod(xs: Any) -> Any:
    out: Any = sympy.Integer(1)
    for x in xs:
        out = out * x
    return out


def dense_strides(shape: list, order: list[int]) -> list:
    """Strides of a dense tensor of ``shape`` whose dims are laid out ``order`` (outermost first)."""
    stride: list = [0] * len(shape)
    acc: Any = sympy.Integer(1)
    for d in reversed(order):
        stride[d] = acc
        acc = acc * shape[d]
    return stride


def _contiguous(shape: list, stride: list) -> bool:
    expected: Any = sympy.Integer(1)
    for n, s in zip(reversed(shape), reversed(stride)):
        if _same(n, 1):
            continue
        if not _same(s, expected):
            return False
        expected = expected * n
    return True


def _inferred(table: SymbolTable, numel: Any, known: Any) -> Any:
    """A view's ``-1``: ``numel / known``, which the view requires to be whole. Where the other sizes hold
    floors (``x.view(B // 2, 2, -1)``: ``3*B / (2*(B // 2))``) and assuming each ``e // k`` exact makes the
    quotient a plain integer expression (``3``), those divisibilities are decided and recorded (``B % 2 == 0``)
    and that quotient is the size; else ``floor(numel / known)`` with ``numel % known == 0`` recorded."""
    q = sympy.simplify(table.exact(numel / known))
    if q.is_integer:
        return q
    floors = [f for f in sympy.sympify(known).atoms(sympy.floor) if _exact_floor(table, f)]
    if floors:
        exact = sympy.simplify(q.xreplace({f: f.args[0] for f in floors}))
        if exact.is_integer and not exact.atoms(sympy.Rational) - exact.atoms(sympy.Integer):
            for f in floors:
                e, d = sympy.fraction(sympy.together(f.args[0]))
                table.decide(sympy.Eq(sympy.Mod(e, d), 0))
            return exact
    table.decide(sympy.Eq(sympy.Mod(numel, known), 0))
    return sympy.floor(numel / known)


def _exact_floor(table: SymbolTable, f: Any) -> bool:
    """``f`` is ``floor(e / k)`` with an integer ``k`` that divides ``e`` at the hints."""
    e, d = sympy.fraction(sympy.together(f.args[0]))
    return d.is_Integer and d > 1 and table.hint(e) % int(d) == 0


def _view(table: SymbolTable, x: torch.Tensor, size: Any, *_: Any) -> tuple:
    shape, stride, offset = _layout(x)
    size = [expr_of(s) for s in size]
    numel = _prod(shape)
    if -1 in size:
        k = size.index(-1)
        size[k] = _inferred(table, numel, _prod(size[:k] + size[k + 1:]))
    if not _equal(table, _prod(size), numel):
        raise SymbolicUnsupported(f"view of {shape} as {size}: sizes do not match")
    if len(size) == len(shape) and all(_same(a, b) for a, b in zip(size, shape)):
        return size, stride, offset
    if _contiguous(shape, stride):
        return size, dense_strides(size, list(range(len(size)))), offset
    new_stride = _view_strides(table, shape, stride, size)
    if new_stride is None:
        raise SymbolicUnsupported(f"view of a tensor of sizes {shape}, strides {stride} as {size}")
    return size, new_stride, offset


def _view_strides(table: SymbolTable, shape: list, stride: list, size: list) -> list | None:
    """Strides viewing ``shape``/``stride`` as ``size`` without a copy, or None: each run of input dims that are
    contiguous with each other (a chunk) must be covered by whole output dims, which get strides within it."""
    def ne(a: Any, b: Any) -> bool:
        return not _same(a, b) and not table.decide(sympy.Eq(sympy.sympify(a), sympy.sympify(b)))

    out: list = [0] * len(size)
    v = len(size) - 1
    base, t_numel, v_numel = stride[-1] if stride else 1, sympy.Integer(1), sympy.Integer(1)
    for d in reversed(range(len(shape))):
        t_numel = t_numel * shape[d]
        if d == 0 or (ne(shape[d - 1], 1) and ne(stride[d - 1], t_numel * base)):
            while v >= 0 and (table.decide(sympy.Lt(v_numel, t_numel)) or _same(size[v], 1)):
                out[v] = v_numel * base
                v_numel = v_numel * size[v]
                v -= 1
            if ne(v_numel, t_numel):
                return None
            if d > 0:
                base, t_numel, v_numel = stride[d - 1], sympy.Integer(1), sympy.Integer(1)
    return out if v == -1 else None


def _expand(table: SymbolTable, x: torch.Tensor, size: Any, *_: Any, **__: Any) -> tuple:
    shape, stride, offset = _layout(x)
    size = [expr_of(s) for s in size]
    new = len(size) - len(shape)
    out_shape, out_stride = [], []
    for i, s in enumerate(size):
        if i < new:
            out_shape.append(s)
            out_stride.append(0)
            continue
        cur, st = shape[i - new], stride[i - new]
        if _same(s, -1) or _same(s, cur):
            out_shape.append(cur)
            out_stride.append(st)
        elif _same(cur, 1):
            out_shape.append(s)
            out_stride.append(0)
        elif _equal(table, s, cur):
            out_shape.append(cur)
            out_stride.append(st)
        else:
            raise SymbolicUnsupported(f"expand of {shape} to {size}")
    return out_shape, out_stride, offset


def _permute(table: SymbolTable, x: torch.Tensor, dims: Any) -> tuple:
    shape, stride, offset = _layout(x)
    dims = [d % max(len(shape), 1) for d in dims]
    return [shape[d] for d in dims], [stride[d] for d in dims], offset


def _clamp(table: SymbolTable, v: Any, n: Any) -> Any:
    """A slice bound as Python clamps it to ``[0, n]`` (negative counts from the end)."""
    v = sympy.sympify(v)
    if v.is_number and int(v) >= _BIG:
        return n
    if table.decide(sympy.Lt(v, 0)):
        v = v + n
        if table.decide(sympy.Lt(v, 0)):
            return sympy.Integer(0)
    if table.decide(sympy.Gt(v, n)):
        return n
    return v


def _slice_of(table: SymbolTable, shape: list, stride: list, offset: Any, dim: int, start: Any, end: Any,
              step: Any) -> tuple:
    dim = dim % len(shape)
    n = shape[dim]
    lo = _clamp(table, 0 if start is None else expr_of(start), n)
    hi = _clamp(table, n if end is None else expr_of(end), n)
    step = int(step)
    span = sympy.sympify(hi - lo)
    if table.unbacked and span.free_symbols & table.unbacked and table.maybe(sympy.Ge(hi, lo)):
        nonempty = True     # a data-dependent end (x[:t.item()]) known >= start: hi == lo gives 0 below too
    else:
        nonempty = table.decide(sympy.Gt(hi, lo))
    length = sympy.Integer(0) if not nonempty else \
        (hi - lo if step == 1 else sympy.floor((hi - lo + step - 1) / step))
    shape, stride = list(shape), list(stride)
    offset = offset + lo * stride[dim]
    shape[dim], stride[dim] = length, stride[dim] * step
    return shape, stride, offset


def _slice(table: SymbolTable, x: torch.Tensor, dim: int = 0, start: Any = None, end: Any = None,
           step: Any = 1) -> tuple:
    return _slice_of(table, *_layout(x), dim, start, end, step)


def _narrow(table: SymbolTable, x: torch.Tensor, dim: int, start: Any, length: Any) -> tuple:
    return _slice_of(table, *_layout(x), dim, start, expr_of(start) + expr_of(length), 1)


def _split_with_sizes(table: SymbolTable, x: torch.Tensor, sizes: Any, dim: int = 0) -> list:
    layout, at, out = _layout(x), sympy.Integer(0), []
    for s in sizes:
        out.append(_slice_of(table, *layout, dim, at, at + expr_of(s), 1))
        at = at + expr_of(s)
    _equal(table, at, layout[0][dim % len(layout[0])])
    return out


def _split(table: SymbolTable, x: torch.Tensor, split_size: Any, dim: int = 0) -> list:
    n, ss = expr_of(x.shape[dim]), expr_of(split_size)
    count = max(-(-int(hint_of(x.shape[dim])) // int(hint_of(split_size))), 1)
    # the number of pieces is fixed by the graph: record that the size gives that many
    table.decide(sympy.Eq(sympy.ceiling(sympy.sympify(n) / ss), count))
    sizes = [ss] * (count - 1) + [n - ss * (count - 1)]
    return _split_with_sizes(table, x, sizes, dim)


def _select_of(table: SymbolTable, shape: list, stride: list, offset: Any, dim: int, index: Any) -> tuple:
    dim = dim % len(shape)
    i = sympy.sympify(expr_of(index))
    if table.decide(sympy.Lt(i, 0)):
        i = i + shape[dim]
    return shape[:dim] + shape[dim + 1:], stride[:dim] + stride[dim + 1:], offset + i * stride[dim]


def _select(table: SymbolTable, x: torch.Tensor, dim: int, index: Any) -> tuple:
    return _select_of(table, *_layout(x), dim, index)


def _unbind(table: SymbolTable, x: torch.Tensor, dim: int = 0) -> list:
    """One view per index of ``dim``: their number is fixed by the graph (recorded when the size is symbolic)."""
    layout = _layout(x)
    n = layout[0][dim % len(layout[0])]
    count = int(hint_of(x.shape[dim]))
    table.decide(sympy.Eq(n, count))
    return [_select_of(table, *layout, dim, i) for i in range(count)]


def _diagonal(table: SymbolTable, x: torch.Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> tuple:
    """The diagonal ``offset`` of dims ``dim1``/``dim2`` as the last dim (torch.func.jacfwd's identity
    tangents, hessian): its length ``min(n1, n2 - offset)`` (``min(n1 + offset, n2)`` below the main diagonal),
    at least 0, is decided through ``table``."""
    shape, stride, base = _layout(x)
    d1, d2 = dim1 % len(shape), dim2 % len(shape)
    off = int(offset)
    n1, n2 = (shape[d1], shape[d2] - off) if off >= 0 else (shape[d1] + off, shape[d2])
    n = n1 if table.decide(sympy.Le(n1, n2)) else n2
    n = n if table.decide(sympy.Ge(n, 0)) else sympy.Integer(0)
    base = base + (off * stride[d2] if off >= 0 else -off * stride[d1])
    keep = [d for d in range(len(shape)) if d not in (d1, d2)]
    return [shape[d] for d in keep] + [n], [stride[d] for d in keep] + [stride[d1] + stride[d2]], base


def _alias(table: SymbolTable, x: torch.Tensor, *_: Any) -> tuple:
    return _layout(x)


VIEW_RULES: dict[str, Callable[..., Any]] = {
    "view": _view, "_unsafe_view": _view, "_reshape_alias": _view, "expand": _expand, "permute": _permute,
    "slice": _slice, "narrow": _narrow, "split": _split, "split_with_sizes": _split_with_sizes,
    "alias": _alias, "detach": _alias, "lift_fresh": _alias, "select": _select, "unbind": _unbind,
    "diagonal": _diagonal,
}


# -- other ops: ember's decompositions on TensorMeta --------------------------------------------------------
def _at_hints(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return torch.empty_strided([hint_of(d) for d in x.shape], [hint_of(d) for d in x.stride()],
                                   dtype=x.dtype, device="meta")
    return hint_of(x) if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)) else x


def _tensor_meta(table: SymbolTable) -> Callable[[Any], Any]:
    """``x`` as a decomposition's input: ``TensorMeta`` with sympy sizes, simplified through ``table`` (an
    expression made before a relation unified two symbols, ``s1 -> s0``, is stale until simplified)."""
    from ember.decomp.meta import TensorMeta

    def convert(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return TensorMeta(tuple(table.simplify(expr_of(d)) for d in x.shape), x.dtype, x.device,
                              tuple(table.simplify(expr_of(d)) for d in x.stride()))
        return table.simplify(expr_of(x)) if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)) else x
    return convert


def unify_broadcast(table: SymbolTable, args: Any, kwargs: Any) -> None:
    """Broadcasting of a pointwise op's tensor inputs, decided through ``table``: two sizes of one output dim
    that are not structurally equal and neither is 1 at the hints must be equal (``Eq(s1, s0)``, recorded with
    the user line and learnt as ``s1 -> s0``), as eager requires. The decomposition's structural broadcast
    check then sees equal sizes."""
    shapes = [[expr_of(d) for d in x.shape] for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    ndim = max((len(s) for s in shapes), default=0)
    for i in range(1, ndim + 1):
        dims = [s[-i] for s in shapes if len(s) >= i and table.hint(s[-i]) != 1]
        for d in dims[1:]:
            if table.hint(d) == table.hint(dims[0]):
                _equal(table, table.simplify(d), table.simplify(dims[0]))


def _shape(x: torch.Tensor) -> list:
    return [expr_of(d) for d in x.shape]


def _same_as_self(table: SymbolTable, concrete: Any, x: torch.Tensor, *_: Any, **__: Any) -> list:
    return [_shape(x)]


def _by_candidates(table: SymbolTable, concrete: Any, candidates: list) -> list:
    """Each concrete output's symbolic shape: the first candidate equal to it at the hints, else its own
    (constant) shape (an empty saved statistic in eval mode)."""
    outs = concrete if isinstance(concrete, (tuple, list)) else [concrete]
    shapes = []
    for c in outs:
        want = list(c.shape) if isinstance(c, torch.Tensor) else []
        shapes.append(next((s for s in candidates if [table.hint(d) for d in s] == want), want))
    return shapes


def _batch_norm(table: SymbolTable, concrete: Any, x: torch.Tensor, *_: Any, **__: Any) -> list:
    """``native_batch_norm`` and friends: outputs shaped as the input or as its channels ``[C]``."""
    return _by_candidates(table, concrete, [_shape(x), [expr_of(x.shape[1])]])


def _batch_norm_backward(table: SymbolTable, concrete: Any, grad: torch.Tensor, x: torch.Tensor, *_: Any,
                         **__: Any) -> list:
    return _batch_norm(table, concrete, x)


# Ops whose output shape is simple but whose meta kernel fails on symbolic sizes and whose decomposition is
# not shape-generic (``cumsum`` unrolls a scan over its length; batch norm's reads sizes as ints): a rule
# ``(table, concrete outputs at the hints, *args, **kwargs) -> output shapes`` (sympy lists).
SHAPE_RULES: dict[str, Callable[..., list]] = {
    "cumsum": _same_as_self, "cumprod": _same_as_self,
    "native_batch_norm": _batch_norm, "_native_batch_norm_legit": _batch_norm,
    "_native_batch_norm_legit_functional": _batch_norm, "_native_batch_norm_legit_no_training": _batch_norm,
    "native_batch_norm_backward": _batch_norm_backward,
}


def _decomposed(func: Any, table: SymbolTable, args: tuple, kwargs: dict, error: Exception) -> Any:
    from ember.decomp import has_decomposition
    from ember.decomp.interp import meta_decomposition

    rule = SHAPE_RULES.get(func._overloadpacket.__name__)
    if rule is None and not has_decomposition(func):
        raise SymbolicUnsupported(f"{func}: its meta kernel fails on symbolic sizes ({_first_line(error)}) and "
                                  "ember has no decomposition to compute them")
    if torch.Tag.pointwise in func.tags:
        unify_broadcast(table, args, kwargs)
    with _disable_current_modes():
        concrete = func(*tree_map(_at_hints, args), **tree_map(_at_hints, kwargs))
    if rule is not None:
        shapes = rule(table, concrete, *args, **kwargs)
        return _match(func, table, [_Shape(s) for s in shapes] if isinstance(concrete, (tuple, list))
                      else _Shape(shapes[0]), concrete)
    convert = _tensor_meta(table)
    try:
        # the arguments' sizes are sympy by now (no SymInt left to find the table by): the decomposition's
        # decisions on sizes (a broadcast of ``s1 + 1`` against ``s3 + 1``) go to this graph's table
        with using(table):
            metas = meta_decomposition(func, *tree_map(convert, args), **tree_map(convert, kwargs))
    except SymbolicUnsupported:
        raise
    except Exception as e:      # noqa: BLE001 - any failure of the decomposition means "no symbolic rule"
        raise SymbolicUnsupported(f"{func}: ember's decomposition cannot compute symbolic sizes: "
                                  f"{_first_line(e)}") from e
    return _match(func, table, metas, concrete)


class _Shape:
    """An output shape given by a ``SHAPE_RULES`` rule (``_match`` reads ``.shape``)."""

    def __init__(self, shape: list) -> None:
        self.shape = shape


def _match(func: Any, table: SymbolTable, meta: Any, concrete: Any) -> Any:
    """The concrete meta output with the decomposition's symbolic shape (strides dense in its dim order)."""
    if isinstance(concrete, (tuple, list)):
        if not isinstance(meta, (tuple, list)) or len(meta) != len(concrete):
            raise SymbolicUnsupported(f"{func}: the decomposition returns {meta!r}, the meta kernel {concrete!r}")
        return type(concrete)(_match(func, table, m, c) for m, c in zip(meta, concrete))
    if not isinstance(concrete, torch.Tensor):
        return concrete
    shape = [table.simplify(sympy.sympify(d)) for d in getattr(meta, "shape", ())]
    if len(shape) != concrete.ndim or [table.hint(d) for d in shape] != list(concrete.shape):
        raise SymbolicUnsupported(f"{func}: symbolic shape {shape} disagrees with the meta kernel's "
                                  f"{list(concrete.shape)} at the hints")
    order = sorted(range(concrete.ndim), key=lambda d: (-concrete.stride(d), d))
    stride = dense_strides(shape, order)
    if [table.hint(s) for s in stride] != list(concrete.stride()) and concrete.numel() > 1:
        raise SymbolicUnsupported(f"{func}: its output strides {concrete.stride()} are not dense")
    with _disable_current_modes():
        return torch.empty_strided([table.symint(d) for d in shape], [table.symint(s) for s in stride],
                                   dtype=concrete.dtype, device="meta")


# -- graph inputs with symbolic sizes (the capture -> backend contract) -------------------------------------
def graph_table(gm: Any) -> SymbolTable | None:
    """The symbol table of a graph with symbolic sizes (``gm.meta["ember_symbols"]``); None for a static one."""
    table = getattr(gm, "meta", {}).get("ember_symbols")
    return table if table is not None and table.symbols else None


def symbol_binder(gm: Any, table: SymbolTable | None) -> Any:
    """Where each symbol of ``table`` is read from ``gm``'s inputs (a ``runtime.SymbolBinder``), or None for a
    static graph. A symbol no placeholder carries -> ``SymbolicUnsupported``."""
    from ember.autograd.runtime import SymbolBinder

    if table is None:
        return None
    sources: dict = {}
    for i, ph in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        if "ember_int" in ph.meta:
            e = table.simplify(sympy.sympify(ph.meta["ember_int"]))
            if isinstance(e, sympy.Symbol):
                sources.setdefault(e, (i, None))
        for d, size in enumerate(ph.meta.get("ember_shape", ())):
            e = table.simplify(sympy.sympify(size))
            if isinstance(e, sympy.Symbol):
                sources.setdefault(e, (i, d))
    missing = [s for s in table.symbols if s not in sources and s not in table.replacements
               and s not in table.unbacked]     # unbacked: computed inside the graph (ember.autograd.unbacked)
    if missing:
        raise SymbolicUnsupported(f"symbols {missing} are not a size of any graph input")
    return SymbolBinder(table, sources)


def symbolic_inputs(gm: Any, inputs: Any) -> tuple[Any, list]:
    """``(fake_mode, inputs)`` for tracing ``gm``: with symbolic sizes, each placeholder with ``ember_shape``
    gets a fake tensor of those sizes and strides (``ember_stride``), each with ``ember_int`` a ``SymInt``;
    a static graph gets ``(None, inputs)`` (fakes made from the real values)."""
    table = graph_table(gm)
    if table is None:
        return None, list(inputs)
    mode = FakeMode()
    mode.symbolic = True
    mode.table = table
    out = []
    for ph, x in zip([n for n in gm.graph.nodes if n.op == "placeholder"], inputs):
        if "ember_shape" in ph.meta and isinstance(x, torch.Tensor):
            shape = [table.symint(sympy.sympify(e)) for e in ph.meta["ember_shape"]]
            stride = ph.meta.get("ember_stride")
            stride = [table.symint(sympy.sympify(e)) for e in stride] if stride is not None else \
                [table.symint(e) for e in dense_strides([sympy.sympify(e) for e in ph.meta["ember_shape"]],
                                                        list(range(len(shape))))]
            out.append(mode.fake_empty(shape, stride, x.dtype, _with_index(x.device), x.requires_grad))
        elif "ember_int" in ph.meta:
            out.append(table.symint(sympy.sympify(ph.meta["ember_int"])))
        else:
            out.append(mode.to_fake(x) if isinstance(x, torch.Tensor) else x)
    return mode, out


SymbolicRules.prefers_rule, SymbolicRules.symbolic_meta, SymbolicRules.has_symbols = \
    prefers_rule, symbolic_meta, has_symbols
