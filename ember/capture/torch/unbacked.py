"""Data-dependent sizes inside the graph: ops whose output size depends on tensor values, and ``.item()``.

``nonzero``, ``x[mask]``, ``masked_select`` and ``unique`` get an *unbacked* symbol ``u<k>`` for their
data-dependent size (``SymbolTable.new_unbacked``: no hint, range ``[0, numel]``), and ``.item()`` /
``int(t)`` of an integer tensor an unbacked int (range unbounded). The op stays one node of the graph; at run
time the graph (or the compiled wrapper) reads the size from that node's result, and what follows computes
with the symbol like with any other symbolic size. A question on an unbacked symbol that its range does not
settle is never answered from a guess (``ember.errors.DataDependent``: a graph break naming the condition),
while a property the program relies on (``torch._check``, a meta kernel's check) becomes a runtime assertion.

The meta runs of the trace use a stand-in size for each unbacked symbol (``ember.shapes.table.UNBACKED_HINT``)
only so that ops downstream get meta tensors; no decision is taken from it.

Each handler of ``OPS`` returns ``(meta result, symbolic sizes)`` for ``ops.record``, or None where the call
is not data-dependent (``x[i]`` with an integer index); off (the options), it raises a graph break that names
the option.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import sympy
import torch

from ..values import Const, ListVar, TupleVar, Value
from .graph import META, TensorVar
from .symsize import SymNumVar, make, where

OPS: dict[Any, Callable] = {}
_SHAPE_OPTION = "capture_dynamic_output_shape_ops"
_SCALAR_OPTION = "capture_scalar_outputs"


def op(*keys):
    def deco(fn):
        for k in keys:
            OPS[k] = fn
        return fn
    return deco


def lookup(kind: str, target: Any) -> Callable | None:
    key = ("method", target) if kind == "call_method" else target
    try:
        return OPS.get(key)
    except TypeError:       # an unhashable target
        return None


def scalar_allowed(d, f, name: str) -> bool:
    """Whether ``Tensor.<name>()`` may become a number read at run time. Inside a function given to
    torch.func.vmap it raises, as eager's vmap does (the float path records no ``item`` node that would)."""
    if "vmap" in d.torch.transforms:
        from ..interpreter import UserException
        raise UserException(RuntimeError("vmap: It looks like you're calling .item() on a Tensor. We don't "
                                         "support vmap over calling .item() on a Tensor, please try to rewrite "
                                         "what you're doing with other operations."))
    return _enabled(d, _SCALAR_OPTION)


def _enabled(d, option: str) -> bool:
    from ...options import CompileOptions
    opts = d.torch.options if d.torch.options is not None else CompileOptions()
    v = getattr(opts, option)
    if v is None:       # capture_scalar_outputs left unset: on under fullgraph=True (a break would be an
        return bool(getattr(d, "fullgraph", False))     # error there), off otherwise, as torch.compile does
    return bool(v)


def _off(d, f, what: str, option: str):
    return d.unsupported(f, f"{what} has an output size that depends on tensor values, and option {option!r} is "
                            "off", f"compile with options={{{option!r}: True}} to capture it with a symbolic "
                                   "size read at run time, or move it outside the compiled function")


def _table(d):
    from .dynamic import table
    return table(d.torch)


def _sizes(t: TensorVar) -> tuple:
    return t.sym if t.sym is not None else tuple(int(n) for n in t.meta.shape)


def _numel(sizes: tuple) -> int | None:
    return int(sympy.prod(sizes)) if all(isinstance(n, int) for n in sizes) else None


def _new(d, f, what: str, numel: int | None) -> sympy.Symbol:
    table = _table(d)
    return table.new_unbacked(f"{what} at {where(f)}", lo=0, hi=numel)


def _meta(table, sizes: tuple, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty([table.hint(n) if isinstance(n, sympy.Basic) else n for n in sizes], dtype=dtype,
                       device=META)


def _arg(args: list, kwargs: dict, i: int, name: str, default: Any = None) -> Any:
    v = args[i] if len(args) > i else kwargs.get(name)
    if v is None:
        return default
    if type(v) is Const:
        return v.value
    return v


def _check_tensor(d, f, x: Value, what: str) -> TensorVar | None:
    if type(x) is not TensorVar:
        return None
    if any(e is None for e in _sizes(x)):
        raise d.unsupported(f, f"{what} of a tensor whose sizes ember could not compute symbolically")
    return x


# -- ops ------------------------------------------------------------------------------------------------------
@op(torch.nonzero, ("method", "nonzero"), torch.argwhere, ("method", "argwhere"))
def _nonzero(d, f, args: list, kwargs: dict):
    x = _check_tensor(d, f, args[0], "nonzero")
    if x is None:
        return None
    if not _enabled(d, _SHAPE_OPTION):
        raise _off(d, f, "nonzero", _SHAPE_OPTION)
    sizes = _sizes(x)
    u = _new(d, f, "nonzero", _numel(sizes))
    table = _table(d)
    if _arg(args, kwargs, 1, "as_tuple", False) is True:
        return tuple(_meta(table, (u,), torch.int64) for _ in sizes), [(u,) for _ in sizes]
    return _meta(table, (u, len(sizes)), torch.int64), (u, len(sizes))


@op(torch.where)
def _where_one(d, f, args: list, kwargs: dict):
    """``torch.where(cond)`` (one argument) is ``nonzero(cond, as_tuple=True)``."""
    if len(args) != 1 or kwargs:
        return None
    return _nonzero(d, f, [args[0], Const(True)], {})


@op(torch.masked_select, ("method", "masked_select"))
def _masked_select(d, f, args: list, kwargs: dict):
    x, mask = args[0], _arg(args, kwargs, 1, "mask")
    if _check_tensor(d, f, x, "masked_select") is None or type(mask) is not TensorVar:
        return None
    if not _enabled(d, _SHAPE_OPTION):
        raise _off(d, f, "masked_select", _SHAPE_OPTION)
    from .symprop import bcast
    table = _table(d)
    shape = bcast(table, _sizes(x), _sizes(mask))
    u = _new(d, f, "masked_select", _numel(shape))
    return _meta(table, (u,), x.meta.dtype), (u,)


@op(operator.getitem)
def _mask_getitem(d, f, args: list, kwargs: dict):
    """``x[mask]`` with a boolean tensor ``mask`` (covering ``x``'s leading dims): ``(u, *x.shape[k:])``."""
    x, idx = args[0], args[1]
    if type(x) is not TensorVar or type(idx) is not TensorVar or idx.meta.dtype not in (torch.bool, torch.uint8):
        return None
    _check_tensor(d, f, x, "x[mask]")
    _check_tensor(d, f, idx, "x[mask]")
    if not _enabled(d, _SHAPE_OPTION):
        raise _off(d, f, "indexing with a boolean mask (x[mask])", _SHAPE_OPTION)
    xs, ms = _sizes(x), _sizes(idx)
    k = len(ms)
    if k > len(xs) or k == 0:
        return None         # the meta run raises eager's error (or indexes a 0-dim mask)
    table = _table(d)
    for a, b in zip(xs[:k], ms):
        if a != b and not table.decide(sympy.Eq(a, b)):
            from ..interpreter import UserException
            raise UserException(IndexError(f"The shape of the mask {tuple(idx.meta.shape)} does not match the "
                                           f"shape of the indexed tensor {tuple(x.meta.shape)}"))
    u = _new(d, f, "x[mask]", _numel(tuple(xs[:k])))
    shape = (u,) + tuple(xs[k:])
    return _meta(table, shape, x.meta.dtype), shape


@op(torch.unique, ("method", "unique"))
def _unique(d, f, args: list, kwargs: dict, first: int = 2, name: str = "unique"):
    """``unique(x)``: ``(u,)`` values; ``unique(x, dim=k)``: ``x``'s sizes with ``u`` (distinct slices) at ``k``,
    an inverse of ``(x.shape[k],)``; counts ``(u,)`` either way. ``first``: the position of
    ``return_inverse`` (``return_counts`` and ``dim`` follow it)."""
    x = _check_tensor(d, f, args[0], name)
    dim = _arg(args, kwargs, first + 2, "dim")
    if x is None or (dim is not None and type(dim) is not int):
        return None
    if not _enabled(d, _SHAPE_OPTION):
        raise _off(d, f, name, _SHAPE_OPTION)
    inverse = _arg(args, kwargs, first, "return_inverse", False)
    counts = _arg(args, kwargs, first + 1, "return_counts", False)
    if type(inverse) is not bool or type(counts) is not bool:
        return None
    sizes = _sizes(x)
    if dim is not None and not -len(sizes) <= dim < len(sizes):
        return None         # the meta run raises eager's error
    table = _table(d)
    if dim is None:
        u = _new(d, f, name, _numel(sizes))
        values, inv = (u,), sizes
    else:
        dim %= len(sizes)
        u = _new(d, f, f"{name}(dim={dim})", sizes[dim] if isinstance(sizes[dim], int) else None)
        values, inv = sizes[:dim] + (u,) + sizes[dim + 1:], (sizes[dim],)
    outs = [(_meta(table, values, x.meta.dtype), values)]
    if inverse:
        outs.append((_meta(table, inv, torch.int64), inv))
    if counts:
        outs.append((_meta(table, (u,), torch.int64), (u,)))
    if len(outs) == 1:
        return outs[0]
    return tuple(m for m, _ in outs), [s for _, s in outs]


@op(torch.unique_consecutive, ("method", "unique_consecutive"))
def _unique_consecutive(d, f, args: list, kwargs: dict):
    """``unique_consecutive(x, return_inverse, return_counts, dim)``: ``unique``'s sizes (runs instead of
    distinct values)."""
    return _unique(d, f, args, kwargs, first=1, name="unique_consecutive")


@op(torch.split, ("method", "split"), ("method", "split_with_sizes"))
def _split_sizes(d, f, args: list, kwargs: dict):
    """``x.split([u0, u1], dim)`` with sizes read from tensor data (``i.tolist()``): pieces of sizes
    ``u0, u1`` along ``dim``; that the sizes are sizes and add up to the dim's size is a runtime assertion,
    as eager checks it."""
    x = args[0]
    sections = _arg(args, kwargs, 1, "split_size_or_sections")
    if sections is None:
        sections = _arg(args, kwargs, 1, "split_sizes")
    dim = _arg(args, kwargs, 2, "dim", 0)
    if type(x) is not TensorVar or type(sections) not in (ListVar, TupleVar) or type(dim) is not int:
        return None
    items = sections.items
    if not any(type(v) is SymNumVar and v.sym.node.expr.free_symbols & _table(d).unbacked for v in items):
        return None
    if not all(type(v) is SymNumVar or (type(v) is Const and type(v.value) is int) for v in items):
        return None
    sizes = _sizes(x)
    if not -len(sizes) <= dim < len(sizes):
        return None         # the meta run raises eager's error
    dim %= len(sizes)
    total = items[0]
    for v in items:
        _check_is_size(d, f, [v], {})
    for v in items[1:]:
        total = d.binary(f, "+", total, v)
    _check(d, f, [d.compare(f, "==", total, _size_value(d, f, x, dim, sizes[dim]))], {})
    table = _table(d)
    shapes = [sizes[:dim] + (v.sym.node.expr if type(v) is SymNumVar else v.value,) + sizes[dim + 1:]
              for v in items]
    return tuple(_meta(table, sh, x.meta.dtype) for sh in shapes), shapes


def _size_value(d, f, x: TensorVar, dim: int, n) -> Value:
    return Const(n) if isinstance(n, int) else d.call_method(f, x, "size", [Const(dim)], {})


# -- .item() --------------------------------------------------------------------------------------------------
_ITEM_METHODS = ("item", "__int__", "__index__")


def item(d, f, t: TensorVar, name: str, record: Callable[..., Value]) -> Value | None:
    """``t.item()`` / ``int(t)`` of a one-element integer tensor: an unbacked int ``u<k>`` read at run time
    (a ``SymNumVar``), or None (other dtypes: the caller's graph break). ``record`` is ``ops.record`` (which
    imports this module), for ``int(t)`` of a float tensor's truncation."""
    if name not in _ITEM_METHODS or t.meta.numel() != 1 or t.sym is not None:
        return None
    truncate = name == "__int__" and t.meta.dtype.is_floating_point     # int(t) of a float: toward zero
    if (t.meta.dtype.is_floating_point and not truncate) or t.meta.dtype.is_complex or t.meta.dtype == torch.bool:
        return None
    if not scalar_allowed(d, f, name):
        raise d.unsupported(f, f"Tensor.{name}() turns a tensor value into a Python int, and option "
                               f"{_SCALAR_OPTION!r} is off", f"compile with options={{{_SCALAR_OPTION!r}: True}} "
                                                             "to capture it as a symbolic int read at run time")
    if truncate:        # (a NaN, an infinity or a value past int64 gives no error, as under torch.compile)
        t = record(d, f, "call_method", "to", [record(d, f, "call_method", "trunc", [t], {}), Const(torch.int64)], {})
    table = _table(d)
    u = table.new_unbacked(f"{name}() at {where(f)}", lo=None, hi=None)
    st = d.torch
    node = st.graph.call_method("item", (t.node,))
    from .graph import location_meta
    node.meta.update(location_meta(f))
    st.n_calls += 1
    st.carriers[u] = (t, "item")
    return make(st, table.symint(u), node)


def note_carriers(st, res: Value) -> None:
    """Remember, for each new unbacked symbol, a result tensor that holds it (a size of it): the glue after a
    graph break reads the symbol's value from there (``reconstruct``)."""
    items = [res] if type(res) is TensorVar else list(getattr(res, "items", ()))
    for t in items:
        if type(t) is not TensorVar or t.sym is None:
            continue
        for k, e in enumerate(t.sym):
            if isinstance(e, sympy.Symbol) and e in st.table.unbacked and e not in st.carriers:
                st.carriers[e] = (t, k)


def reconstruct_names(glue, table, expr, names: dict) -> dict:
    """``names`` with each unbacked symbol of ``expr`` bound to an expression that reads it from a graph
    output (``__out[0].size(0)``, ``__out[1].item()``)."""
    st = glue.d.torch
    out = dict(names)
    for u in sorted(expr.free_symbols & table.unbacked, key=str):
        t, how = st.carriers[u]
        ref = glue.expr(t)
        out[u] = f"{ref}.item()" if how == "item" else f"{ref}.size({how})"
    return out


# -- conditions on unbacked ints, torch._check --------------------------------------------------------------
class SymCondVar(Value):
    """A comparison of symbolic ints that the ranges do not settle because it involves an unbacked symbol
    (``n <= x.shape[0]`` with ``n = t.item()``): ``cond`` (sympy) and ``node`` (computes the bool at run time).
    ``torch._check(c)`` relies on it (a runtime assertion); a truth test (``if c:``) is a graph break."""
    __slots__ = ("cond", "node", "table")

    def __init__(self, cond, node, table):
        super().__init__(None)
        self.cond, self.node, self.table = cond, node, table

    def python_type(self):
        return bool

    def describe(self):
        return f"bool {self.cond} (depends on a size computed from tensor data)"


def compare(d, f, fn, op: str, pa, pb) -> Value:
    """``pa op pb`` (``(SymInt | int, node)`` pairs): a ``Const`` where the table can decide it, else a
    ``SymCondVar`` for an undecidable condition on unbacked symbols."""
    from ...errors import DataDependent
    from ...shapes import located
    try:
        with located(where(f)):
            return Const(bool(fn(pa[0], pb[0])))
    except DataDependent:
        pass
    sym = fn(pa[0], pb[0])      # a SymBool (building it decides nothing)
    node = d.torch.graph.call_function(fn, (pa[1], pb[1]))
    node.meta["example_value"] = sym
    return SymCondVar(sym.node.expr, node, sym.node.table)


def _truth(d, f, v: SymCondVar) -> bool:
    return v.table.decide(v.cond)       # raises DataDependent (a graph break) unless the ranges decide it


def runtime_check(cond, message: str = "") -> None:
    """What the graph runs for a ``torch._check`` on a data-dependent size: eager's check, with the relation
    and the user's line in the message."""
    if isinstance(cond, torch.SymBool):
        cond.node.expect_true()         # tracing the graph again (AOT): the table records the assertion
        return
    if not cond:
        raise RuntimeError(f"ember: a check the compiled program relies on failed: {message}")


def _check(d, f, args: list, kwargs: dict) -> Value:
    cond = args[0] if args else kwargs.get("cond")
    if type(cond) is Const:
        if not cond.value:
            from ..interpreter import UserException
            raise UserException(RuntimeError("Expected cond to be True, but got False. (Could this error message "
                                             "be improved? If so, please report an enhancement request to "
                                             "PyTorch.)"))
        return Const(None)
    if type(cond) is not SymCondVar:
        raise d.unsupported(f, f"torch._check of a {cond.describe()}")
    return _assert(d, f, cond.table, cond.cond, cond.node)


def _assert(d, f, table, cond, node) -> Value:
    from ...shapes import located, to_python
    with located(where(f)):
        table.expect(cond)
    st = d.torch
    n = st.graph.call_function(runtime_check, (node, f"{to_python(cond)} (at {where(f)})"))
    n.meta.update(_location(f))
    st.n_calls += 1
    return Const(None)


def _location(f) -> dict:
    from .graph import location_meta
    return location_meta(f)


def _check_is_size(d, f, args: list, kwargs: dict) -> Value:
    v = args[0] if args else kwargs.get("i")
    if type(v) is Const and type(v.value) is int:
        return _check(d, f, [Const(v.value >= 0)], {})
    if type(v) is not SymNumVar:
        raise d.unsupported(f, f"torch._check_is_size of a {v.describe()}")
    ge = v.sym >= 0 if not v.sym.node.table.unbacked & v.sym.node.expr.free_symbols else None
    if ge is not None:      # a backed size: decided (and guarded) as any comparison
        return Const(None) if bool(ge) else _check(d, f, [Const(False)], {})
    import operator as _op
    node = d.torch.graph.call_function(_op.ge, (v.node, 0))
    return _assert(d, f, v.sym.node.table, sympy.Ge(v.sym.node.expr, 0), node)


RULES = {torch._check: lambda d, f, a, k: _check(d, f, a, k),
         torch._check_is_size: lambda d, f, a, k: _check_is_size(d, f, a, k)}


def _register() -> None:
    from .. import rules as R
    from . import symsize
    R.TRUTH.register(SymCondVar)(_truth)
    symsize.UNBACKED.update(compare=compare, reconstruct_names=reconstruct_names)


_register()
_ = (SymNumVar, TupleVar)
