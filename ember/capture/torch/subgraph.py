"""Subgraphs for higher-order operators (``torch.func`` transforms, ``torch.cond``, ``torch.while_loop``).

A higher-order call takes a Python function and applies something to it as a whole (batching, differentiation,
a branch). Capture runs the function with ember's interpreter into a graph of its own, so its ops are
recorded and every guard its body needs (closure cells, module attributes, globals) is installed as for
inlined code; then the outer graph gets one node that applies the operator to that subgraph, held as a
``GraphModule`` submodule of the captured graph (``get_attr``).

The subgraph's inputs are its operands' tensor leaves, then its *free* tensors: values of the enclosing graph
that the body read (closure tensors, parameters, results computed before the call), lifted to placeholders
after tracing. Graph inputs first met inside the body (a parameter read for the first time) become inputs of
the root graph (``TorchState.placeholder``) and reach the subgraph as free tensors. Nested higher-order calls
nest the same way: the inner subgraph's free values are nodes of the outer subgraph.

Operands and results are pytrees of values: ``flatten`` gives their tensor leaves and a skeleton (tuples, lists
and dicts of ``Slot`` markers and constants) that ``build`` refills with runtime tensors.
"""
from __future__ import annotations

import contextlib
import operator
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx as fx

from ... import logs
from ...errors import Unsupported
from ...shapes import hint_of, located
from ..values import Const, DictVar, ListVar, TupleVar, Value
from .graph import META, TensorVar, location_meta, run_meta
from .symsize import where


@dataclass(frozen=True)
class Slot:
    """The place of the ``index``-th tensor leaf in a skeleton."""
    index: int


@contextlib.contextmanager
def saved_tensors_hooks_aside():
    """torch.func's grad transforms (``grad``, ``vjp``, ``jacrev``) refuse to run while any saved-tensors hook
    is installed. ember's AOT trace installs one (``autograd.trace.SavedVersions``, which learns what eager's
    autograd saves) and so may a user; a graph node running a transform (``torch.cond``'s backward, a captured
    ``torch.func.grad``) sets them aside for its own call and restores them after. The tensors saved inside the
    transform are its own, never seen by eager's hooks either."""
    stack = []
    while (top := torch._C._autograd._top_saved_tensors_default_hooks(True)) is not None:
        stack.append(top)
        torch._C._autograd._pop_saved_tensors_default_hooks()
    try:
        yield
    finally:
        for pack, unpack in reversed(stack):
            torch._C._autograd._push_saved_tensors_default_hooks(pack, unpack)


def flatten(d, f, v: Value, leaves: list[TensorVar], what: str) -> Any:
    """The skeleton of ``v``; appends its tensors to ``leaves``. Other values must be constants."""
    t = type(v)
    if t is TensorVar:
        leaves.append(v)
        return Slot(len(leaves) - 1)
    if t is TupleVar:
        return tuple(flatten(d, f, x, leaves, what) for x in v.items)
    if t is ListVar:
        return [flatten(d, f, x, leaves, what) for x in v.items]
    if t is DictVar:
        return {k: flatten(d, f, x, leaves, what) for k, x in v.items.items()}
    if t is Const:
        return v.value
    try:
        return d.as_python(f, v)
    except Unsupported:
        raise d.unsupported(f, f"{what}: a {v.describe()} where ember expects tensors, tuples, lists, dicts or "
                               "constants") from None


def build(skel: Any, tensors: list | tuple) -> Any:
    """The Python value of a skeleton, with ``tensors`` in its slots."""
    if type(skel) is Slot:
        return tensors[skel.index]
    if type(skel) is tuple:
        return tuple(build(x, tensors) for x in skel)
    if type(skel) is list:
        return [build(x, tensors) for x in skel]
    if type(skel) is dict:
        return {k: build(x, tensors) for k, x in skel.items()}
    return skel


def tensor_leaves(x: Any, out: list) -> list:
    """The tensors of a Python pytree (tuples, lists, dicts) in ``flatten``'s order."""
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (tuple, list)):
        for y in x:
            tensor_leaves(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            tensor_leaves(y, out)
    return out


def build_values(d, skel: Any, leaves: list[Value]) -> Value:
    """The trace value of a skeleton, with ``leaves`` in its slots."""
    if type(skel) is Slot:
        return leaves[skel.index]
    if type(skel) is tuple:
        return TupleVar([build_values(d, x, leaves) for x in skel])
    if type(skel) is list:
        return ListVar([build_values(d, x, leaves) for x in skel])
    if type(skel) is dict:
        return DictVar({k: build_values(d, x, leaves) for k, x in skel.items()},
                       {k: d.from_python(k) for k in skel})
    return d.from_python(skel)


def meta_skeleton(x: Any, metas: list) -> Any:
    """A skeleton of a Python result (of meta tensors); its tensors go to ``metas``."""
    if isinstance(x, torch.Tensor):
        metas.append(x)
        return Slot(len(metas) - 1)
    if type(x) in (tuple, list):
        return type(x)(meta_skeleton(y, metas) for y in x)
    if isinstance(x, tuple):       # a namedtuple (torch.return_types): a plain tuple of its fields
        return tuple(meta_skeleton(y, metas) for y in x)
    if isinstance(x, dict):
        return {k: meta_skeleton(y, metas) for k, y in x.items()}
    return x


@dataclass
class Body:
    """A traced function: ``gm(*leaves, *free)`` returns the tensors of its result, laid out as ``out_skel``."""
    gm: fx.GraphModule
    n_leaves: int
    free: list[fx.Node]                  # nodes of the enclosing graph, in the order of the free placeholders
    out_skel: Any
    out_metas: list[torch.Tensor] = field(default_factory=list)
    out_syms: list = field(default_factory=list)       # symbolic sizes of the result's tensors (None: static)

    def call(self, leaves: list | tuple, free: list | tuple) -> Any:
        return build(self.out_skel, self.gm(*leaves, *free))


def trace_body(d, f, fn: Value, args: list[Value], kwargs: dict[str, Value], leaf_metas: list[torch.Tensor],
               what: str, leaf_syms: list | None = None) -> Body:
    """Trace ``fn(*args, **kwargs)`` into a graph of its own whose placeholders stand for the tensor leaves of
    ``args`` (in ``flatten`` order) with the metadata ``leaf_metas`` and symbolic sizes ``leaf_syms`` (per
    example, for ``vmap``; by default the leaves' own); tensors in ``kwargs`` are free values of the
    subgraph. With symbolic sizes the body is traced over the same symbols as the enclosing graph: what it
    relies on about them is a relation (a guard) of the one symbol table."""
    st = d.torch
    leaves: list[TensorVar] = []
    skel = flatten(d, f, TupleVar(list(args)), leaves, what)
    if leaf_syms is None:
        leaf_syms = [x.sym for x in leaves]
    sub = fx.Graph()
    outer, outer_mods = st.graph, st.submodules
    st.graph, st.submodules = sub, {}
    try:
        inner = [TensorVar(sub.placeholder(f"arg{i}"), m, x.device) for i, (x, m) in enumerate(zip(leaves,
                                                                                                 leaf_metas))]
        for v, sym in zip(inner, leaf_syms):
            v.node.meta["example_value"] = v.meta
            v.node.meta["ember_device"] = v.device
            if sym is not None:
                v.sym = sym
                v.node.meta["ember_shape"] = sym
        # keyword arguments reach the function as they are: the transforms pass them through untransformed
        # (not batched, not differentiated), which is what the enclosing graph's values are to the subgraph
        out = d.call(f, fn, list(build_values(d, skel, inner).items), dict(kwargs))
        out_leaves: list[TensorVar] = []
        out_skel = flatten(d, f, out, out_leaves, f"the result of the function given to {what}")
        sub.output(tuple(v.node for v in out_leaves))
        mods = st.submodules
    except Unsupported as e:
        e.reason = f"inside the function given to {what}: {e.reason}"
        e.hint = e.hint or f"{what} then runs eagerly at this graph break"
        raise
    finally:
        st.graph, st.submodules = outer, outer_mods
    free = _lift(sub, len(inner))
    root = torch.nn.Module()
    for name, m in mods.items():
        root.add_module(name, m)
    gm = fx.GraphModule(root, sub, class_name="EmberSubgraph")
    return Body(gm, len(inner), free, out_skel, [v.meta for v in out_leaves], [v.sym for v in out_leaves])


def _lift(sub: fx.Graph, n_args: int) -> list[fx.Node]:
    """Turn every use of an enclosing graph's node in ``sub`` into a use of a new placeholder; returns those
    nodes, in placeholder order."""
    free: dict[fx.Node, fx.Node] = {}
    last = [n for n in sub.nodes if n.op == "placeholder"][-1] if n_args else None
    for node in list(sub.nodes):
        for a in list(node.all_input_nodes):
            if a.graph is sub:
                continue
            ph = free.get(a)
            if ph is None:
                if last is None:
                    first = next(iter(sub.nodes))
                    with sub.inserting_before(first):
                        ph = sub.placeholder(f"free{len(free)}")
                else:
                    with sub.inserting_after(last):
                        ph = sub.placeholder(f"free{len(free)}")
                ph.meta.update({k: v for k, v in a.meta.items() if k in ("example_value", "ember_device",
                                                                          "ember_shape", "ember_int")})
                free[a] = last = ph
            node.replace_input_with(a, ph)
    return list(free)


def add_submodule(st, module: torch.nn.Module, prefix: str) -> fx.Node:
    """A ``get_attr`` node of the current graph for ``module``, registered on the graph's root module."""
    name = f"{prefix}_{len(st.submodules)}"
    while name in st.submodules:
        name += "_"
    st.submodules[name] = module
    return st.graph.get_attr(name)


def emit(d, f, target: Callable, modules: list[tuple[torch.nn.Module, str]], operands: list[Any],
         metas: list[torch.Tensor], device: torch.device) -> list[TensorVar]:
    """One node ``target(*modules, *operands)`` that returns the flat tuple of tensors described by ``metas``
    (the caller's meta run); returns a value per tensor."""
    st = d.torch
    syms = _symbolic_sizes(d, f, target, [m for m, _ in modules], operands, metas)
    attrs = [add_submodule(st, m, prefix) for m, prefix in modules]
    node = st.graph.call_function(target, tuple(attrs) + tuple(operands))
    node.meta.update(location_meta(f))
    node.meta["example_value"] = tuple(metas)
    node.meta["ember_device"] = device
    st.n_calls += 1
    out = []
    for i, m in enumerate(metas):
        item = st.graph.call_function(operator.getitem, (node, i))
        item.meta.update(node.meta)
        item.meta["example_value"] = m
        v = TensorVar(item, m, device)
        if syms is not None and syms[i] is not None:
            v.sym = syms[i]
            item.meta["ember_shape"] = syms[i]
        out.append(v)
    return out


def hint_metas(nodes: list) -> list:
    """What the meta run (at the hints) takes for operands given as nodes: their meta tensors, and the hint of
    a symbolic int (a size the body read from an enclosing graph's tensor)."""
    out = []
    for n in nodes:
        m = n.meta.get("example_value") if isinstance(n, fx.Node) else n
        out.append(int(hint_of(m)) if isinstance(m, torch.SymInt) else m)
    return out


def _symbolic_sizes(d, f, target: Callable, modules: list, operands: list, metas: list) -> list | None:
    """The symbolic sizes of the node's result tensors (None: every size static): ``target`` run once more on
    meta tensors whose sizes are the trace's ``SymInt``s (the subgraphs run inside it, so the transforms and
    branches compute the result's sizes as expressions), each checked against the run at the hints; a size
    that the run cannot give is unknown (``symprop``)."""
    st = d.torch
    if st.table is None or not any(_is_symbolic(n) for n in operands):
        return None
    from .symprop import checked_sizes, symbolic_meta, sizes_of
    args = []
    for n in operands:
        m = n.meta.get("example_value") if isinstance(n, fx.Node) else n
        shape = n.meta.get("ember_shape") if isinstance(n, fx.Node) else None
        if isinstance(m, torch.Tensor) and shape is not None and any(e is None for e in shape):
            return [tuple([None] * x.dim()) for x in metas]
        if isinstance(m, torch.Tensor) and shape is not None:
            m = symbolic_meta(st.table, m, shape)
        args.append(m)
    try:
        with torch.no_grad(), torch.device(META), located(where(f)):
            res = target(*modules, *args)
    except Exception as e:       # noqa: BLE001 - a transform the symbolic run cannot take: unknown sizes
        if logs.enabled("dynamic"):
            logs.log("dynamic", f"sizes of {getattr(target, '__name__', target)} at {where(f)} are unknown: "
                                f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}")
        return [tuple([None] * x.dim()) for x in metas]
    sizes = sizes_of(list(res))
    return [s if s is None else (None if all(isinstance(e, int) for e in s) else s)
            for s in checked_sizes(st.table, sizes, list(metas))]


def _is_symbolic(n: Any) -> bool:
    if not isinstance(n, fx.Node):
        return False
    if isinstance(n.meta.get("example_value"), torch.SymInt):
        return True
    shape = n.meta.get("ember_shape")
    return shape is not None and not all(isinstance(e, int) for e in shape)


def meta_call(d, f, fn: Callable, args: list) -> Any:
    """``fn(*args)`` on meta tensors under the trace's grad mode (``graph.run_meta``)."""
    return run_meta(d, f, d.torch, fn, list(args), {})
