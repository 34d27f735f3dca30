"""Reference interpreters for decompositions: run on real tensors, on metadata only, or record a prim graph.

- ``run_decomposition(op, *args)`` runs ``op``'s decomposition with each prim's reference implementation and
  (by default) checks every prim's meta rule against the tensor it produced.
- ``meta_decomposition(op, *metas)`` propagates ``TensorMeta`` (sizes may be sympy) through meta rules only.
- ``trace_decomposition(op, *args)`` records the prims as a ``torch.fx.GraphModule`` whose ``call_function``
  targets are prims (runnable: prims run their reference implementation when called outside a handler);
  every node's ``meta["val"]`` holds its ``TensorMeta``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree

from ember.errors import EmberError
from ember.shapes import SymbolicUnsupported, active_table, expr_of, using

from .core import PRIMS, Prim, push_handler
from .meta import TensorMeta, meta_of, same_shape
from .registry import decompose
from .trees import tree_map


class MetaMismatch(AssertionError):
    """A prim's meta rule disagrees with its reference implementation."""


def _check(prim: Prim, meta: Any, real: Any) -> None:
    for m, r in zip(pytree.tree_leaves(meta), pytree.tree_leaves(real)):
        if isinstance(r, torch.Tensor):
            if not isinstance(m, TensorMeta) or m.dtype != r.dtype or not same_shape(m.shape, tuple(r.shape)):
                raise MetaMismatch(f"ember.decomp: prim {prim.name}: meta {m} but reference gave "
                                   f"{list(r.shape)} {r.dtype}")


def _to_meta(x: Any) -> Any:
    return meta_of(x) if isinstance(x, torch.Tensor) else x


def checked_handler(prim: Prim, args: tuple, kwargs: dict) -> Any:
    """Run prim's reference implementation and check its meta rule agrees (shape and dtype)."""
    meta = prim.meta(*tree_map(_to_meta, args), **tree_map(_to_meta, kwargs))
    out = prim.impl(*args, **kwargs)
    _check(prim, meta, out)
    return out


def meta_handler(prim: Prim, args: tuple, kwargs: dict) -> Any:
    return prim.meta(*args, **kwargs)


def run_decomposition(op: Any, *args: Any, check_meta: bool = True, **kwargs: Any) -> Any:
    """Run op's decomposition on real tensors through the prims' reference implementations."""
    if not check_meta:
        return decompose(op, *args, **kwargs)
    with push_handler(checked_handler):
        return decompose(op, *args, **kwargs)


def meta_decomposition(op: Any, *args: Any, **kwargs: Any) -> Any:
    """Output TensorMeta(s) of op's decomposition from input metadata (sizes may be sympy)."""
    table = _symbols_of((args, kwargs))
    to_meta = lambda a: _to_meta(expr_of(a))  # noqa: E731 - SymInt sizes as sympy, as in TensorMeta
    args, kwargs = tree_map(to_meta, args), tree_map(to_meta, kwargs)

    def run(fn: Any) -> Any:
        with push_handler(meta_handler):
            return fn(op, *args, **kwargs)
    if table is None:
        return run(decompose)
    with using(table):
        return _or_extern(op, run)


def _or_extern(op: Any, run: Any) -> Any:
    """``run(decompose)``, or where the decomposition cannot follow symbolic sizes (a loop over a size, a
    comparison it cannot decide), ``run`` of the op as its ATen call; ``SymbolicUnsupported`` where even that
    has no symbolic metadata."""
    try:
        return run(decompose)
    except EmberError as e:     # ember's own (also a RuntimeError, errors.py) is not for the fallback
        if not isinstance(e, SymbolicUnsupported):
            raise
    except (TypeError, ValueError, RuntimeError, NotImplementedError):
        pass
    try:
        return run(lambda o, *a, **k: PRIMS["aten_extern"](o, a, k))
    except Exception as e:      # noqa: BLE001 - no symbolic metadata for it: the caller compiles static
        raise SymbolicUnsupported(f"ember.decomp: {op} with symbolic sizes: {type(e).__name__}: {e}") from e


def _symbols_of(args: Any) -> Any:
    """The ``SymbolTable`` decisions on the arguments' symbolic sizes go to: the one already active, else the
    table of a ``torch.SymInt`` among the arguments or their sizes; None for static arguments."""
    table = active_table()
    if table is not None:
        return table
    for a in pytree.tree_leaves(args):
        for v in (a, *(getattr(a, "shape", None) or ())):
            if isinstance(v, torch.SymInt) and hasattr(v.node, "table"):
                return v.node.table
    return None


@dataclass(repr=False)
class Var(TensorMeta):
    """A traced value: its metadata and the FX node that produces it."""

    node: Any = None


class _Recorder:
    def __init__(self) -> None:
        self.graph = torch.fx.Graph()

    def placeholder(self, name: str, x: Any) -> Var:
        m = meta_of(x)
        node = self.graph.placeholder(name)
        node.meta["val"] = m
        return Var(m.shape, m.dtype, m.device, m.stride, node=node)

    def __call__(self, prim: Prim, args: tuple, kwargs: dict) -> Any:
        meta = prim.meta(*args, **kwargs)
        unwrap = lambda v: v.node if isinstance(v, Var) else v  # noqa: E731
        node = self.graph.call_function(prim, tree_map(unwrap, args), tree_map(unwrap, kwargs))
        node.meta["val"] = meta
        if isinstance(meta, TensorMeta):
            return Var(meta.shape, meta.dtype, meta.device, meta.stride, node=node)
        if isinstance(meta, (tuple, list)):
            outs = []
            for i, m in enumerate(meta):
                item = self.graph.call_function(_getitem, (node, i))
                item.meta["val"] = m
                outs.append(Var(m.shape, m.dtype, m.device, m.stride, node=item) if isinstance(m, TensorMeta)
                            else m)
            return type(meta)(outs)
        return meta


def _getitem(x: Any, i: int) -> Any:
    return x[i]


def trace_decomposition(op: Any, *args: Any, **kwargs: Any) -> torch.fx.GraphModule:
    """An FX graph of prims computing op(*args, **kwargs); tensor args (or TensorMetas) become placeholders."""
    return torch.fx.GraphModule(torch.nn.Module(), decomposition_graph(op, *args, **kwargs))


def _returns_alias(op: Any) -> bool:
    """Whether ``op``'s schema lets its result share its input's memory (views, in-place ops, ``to``/``alias``)."""
    schema = getattr(op, "_schema", None)
    if schema is None:
        return True
    return any(r.alias_info is not None for r in schema.returns)


def _fresh_results(out: Any, args: Any, kwargs: Any) -> Any:
    """A rule may return an operand unchanged where the op is an identity for these shapes (``cumsum`` over a
    dimension of size 1, a reduction over no dimension). Eager's op returns a new tensor, and the stages after
    decomposition give a graph result that *is* an input that input's memory: a later in-place write to one
    (an input mutation written back, or the result mutated after a graph break) would change the other. Such
    a result is copied."""
    from .core import PRIMS

    operands = {id(v) for v in pytree.tree_leaves((args, kwargs)) if isinstance(v, Var)}
    return tree_map(lambda v: PRIMS["clone"](v) if isinstance(v, Var) and id(v) in operands else v, out)


def decomposition_graph(op: Any, *args: Any, **kwargs: Any) -> torch.fx.Graph:
    """``trace_decomposition``'s graph alone (no module: no Python code generated for it). With symbolic sizes,
    a decomposition that cannot follow them (a loop over a size, a comparison it cannot decide) leaves the op
    as its ATen call (``aten_extern``); where even that has no symbolic metadata, ``SymbolicUnsupported``."""
    table = _symbols_of((args, kwargs))
    if table is None:
        return _record(op, args, kwargs, decompose)
    with using(table):
        return _or_extern(op, lambda run: _record(op, args, kwargs, run))


def _record(op: Any, args: tuple, kwargs: dict, run: Any) -> torch.fx.Graph:
    rec = _Recorder()
    counter = iter(range(1 << 30))

    def lift(x: Any) -> Any:
        if isinstance(x, (torch.Tensor, TensorMeta)):
            return rec.placeholder(f"arg{next(counter)}", x)
        return expr_of(x)       # a symbolic size argument: its sympy expression, as in TensorMeta

    args, kwargs = tree_map(lift, args), tree_map(lift, kwargs)
    with push_handler(rec):
        out = run(op, *args, **kwargs)
        if not _returns_alias(op):
            out = _fresh_results(out, args, kwargs)
    rec.graph.output(tree_map(lambda v: v.node if isinstance(v, Var) else v, out))
    return rec.graph
