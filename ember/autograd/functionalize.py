"""Functionalization: rewrite a traced ATen graph so that no op mutates a tensor.

Input: a ``TracedGraph`` from ``trace.trace_aten`` (ATen ``OpOverload`` nodes, possibly in-place ops such as
``aten.add_``, ``out=`` overloads, ``native_batch_norm`` updating running stats, and mutations through views).
Output: a new ``TracedGraph`` over the same placeholders whose graph has only functional ops, whose output tuple
is the original one followed by the new value of every mutated input, and whose ``write_backs`` list says
"copy output j into input i" for each of them (``apply_write_backs`` does it after the graph ran).

Invariants:
- Every in-place/``out=`` op becomes its functional op (``add_.Tensor`` -> ``add.Tensor``, ``add.out`` ->
  ``add.Tensor``, ``native_batch_norm`` -> ``_native_batch_norm_legit_functional``), cast back to the mutated
  tensor's dtype where the functional op would promote.
- Each tensor belongs to an alias root (a non-view value) and a chain of view ops from it. Mutating a view
  rebuilds the root with ``as_strided_scatter`` on a 1-D list of its elements in their traced memory order
  (the root must be dense: strides a permutation of contiguous ones, as inputs' and fresh results' are);
  later reads of any view of a mutated root replay its view chain on the root's newest value.
- Inputs that alias each other are independent placeholders here; ``aot_compile`` rebuilds a group of them
  that has a mutated member as views of one synthetic base input (``ember.autograd.aliasing``), which this
  pass then handles like any mutation through a view.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, replace
from typing import Any, Sequence

import torch
import torch.fx as fx
from torch.utils._python_dispatch import _disable_current_modes

from ember.autograd.fake import FakeTensor
from ember.autograd import regions
from ember.autograd.overlap import self_overlapping_layout
from ember.autograd.symnodes import SymNodes
from ember.autograd.trace import TracedGraph
from ember.decomp.trees import tree_map
from ember.shapes import is_symbolic
from ember.decomp.core import is_impure_node
from ember.errors import EmberError

aten = torch.ops.aten


class FunctionalizationError(EmberError):
    """A mutation ember cannot turn into functional ops yet."""


@dataclass
class _Alias:
    root: fx.Node                                   # old-graph node owning the storage
    chain: tuple[tuple[Any, tuple, dict, fx.Node], ...]   # view ops from root: (target, args after self,
                                                          # kwargs, the old-graph view node)


def _is_view(target: Any) -> bool:
    if target is operator.getitem:
        return False
    if not isinstance(target, torch._ops.OpOverload):
        return False
    schema = target._schema
    if not schema.arguments or not schema.returns:
        return False
    a0 = schema.arguments[0].alias_info
    r0 = schema.returns[0].alias_info
    return a0 is not None and not a0.is_write and r0 is not None and not r0.is_write


def _written_args(target: Any) -> list[tuple[int, str]]:
    if not isinstance(target, torch._ops.OpOverload):
        return []
    return [(i, a.name) for i, a in enumerate(target._schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write]


def _arg(node: fx.Node, index: int, name: str) -> Any:
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[index] if index < len(node.args) else None


def _signature(op: torch._ops.OpOverload, drop_out: bool) -> list[tuple[str, str]]:
    return [(a.name, str(a.type)) for a in op._schema.arguments
            if not (drop_out and a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)]


def _functional_overload(target: torch._ops.OpOverload) -> torch._ops.OpOverload:
    """``foo_.ov`` -> ``foo.ov``; ``foo.out`` / ``foo.X_out`` -> the ``foo`` overload with the same inputs."""
    special = _SPECIAL_FUNCTIONAL.get(target)
    if special is not None:
        return special
    packet = target._schema.name.split("::")[-1]
    if packet.endswith("_") and not packet.endswith("__"):
        packet = packet[:-1]
    packet_obj = getattr(aten, packet, None)
    want = _signature(target, drop_out=True)
    for ov in packet_obj.overloads() if packet_obj is not None else []:
        cand = getattr(packet_obj, ov)
        if not _written_args(cand) and _signature(cand, drop_out=False) == want:
            return cand
    raise FunctionalizationError(f"no functional variant of {target} (stage: functionalization); add it to "
                                 "ember/autograd/functionalize.py:_SPECIAL_FUNCTIONAL")


# batch norms that update running stats in place (same arguments): become the functional legit variant
_BATCH_NORMS = (aten.native_batch_norm.default, aten._native_batch_norm_legit.default)

_SPECIAL_FUNCTIONAL: dict[Any, Any] = {
    aten.bernoulli_.float: aten.bernoulli.p,
    aten.normal_.default: aten.normal_functional.default,
    aten.fill_.Scalar: aten.fill.Scalar,
    aten.fill_.Tensor: aten.fill.Tensor,
}


def _fill_defaults(inplace: Any, func: Any, args: list, kwargs: dict) -> None:
    """Arguments the in-place overload defaults but its functional one requires (``bernoulli_(p=0.5)`` ->
    ``bernoulli.p``): filled from the in-place schema."""
    fschema = {a.name: a for a in func._schema.arguments}
    for i, a in enumerate(inplace._schema.arguments):
        if i < len(args) or a.name in kwargs or not a.has_default_value():
            continue
        fa = fschema.get(a.name)
        if fa is not None and not fa.has_default_value():
            kwargs[a.name] = a.default_value


def _storage_order(t: torch.Tensor) -> list[int] | None:
    """The dims of ``t`` from the outermost in memory to the innermost, when its elements fill a block of
    memory without gaps or overlaps (strides a permutation of contiguous ones); None otherwise."""
    order = sorted(range(t.ndim), key=lambda d: (-t.stride(d), d))
    if t.numel() == 0:
        return order
    expected = 1
    for d in reversed(order):
        if t.shape[d] != 1 and t.stride(d) != expected:
            return None
        expected *= t.shape[d]
    return order


def _dense_if_overlapping(val: Any) -> Any:
    """The metadata of a functional op's result that replaces an in-place op on ``val``: ``val``'s own, unless
    its elements share memory (an expanded tensor), where the functional op returns a fresh contiguous tensor
    (ATen never allocates a self-overlapping result); a backend storing or restriding it into the expanded
    layout would need one memory location per element."""
    if not isinstance(val, FakeTensor) or not self_overlapping_layout(val.shape, val.stride()):
        return val
    with _disable_current_modes():
        meta = torch.empty(tuple(val.shape), dtype=val.dtype, device="meta")
    return FakeTensor(meta, val.device, val.fake_mode, requires_grad=val.requires_grad)


class _Functionalizer:
    def __init__(self, traced: TracedGraph) -> None:
        self.old = traced.gm.graph
        self.graph = fx.Graph()
        self.alias: dict[fx.Node, _Alias] = {}
        self.current: dict[fx.Node, fx.Node] = {}     # root -> newest value (new graph)
        self.version: dict[fx.Node, int] = {}
        self.views: dict[fx.Node, tuple[fx.Node, int]] = {}  # view node -> (new node, root version)
        self.sym = SymNodes(self.graph)     # symbolic sizes of the ops this pass adds, as nodes

    # -- reading values ---------------------------------------------------------------------------------
    def value(self, node: fx.Node) -> fx.Node:
        al = self.alias[node]
        if not al.chain:
            return self.current[al.root]
        cached = self.views.get(node)
        if cached is not None and cached[1] == self.version[al.root]:
            return cached[0]
        out, chain = self._from_storage_list(al)
        for target, rest, kwargs, old in chain:
            out = self.graph.call_function(target, (out, *rest), kwargs)
            out.meta = dict(old.meta)       # every replayed view keeps its value's metadata (and region)
        self.views[node] = (out, self.version[al.root])
        return out

    def _from_storage_list(self, al: _Alias) -> tuple[fx.Node, tuple]:
        """Where to replay ``al``'s view chain from, and the steps to replay. An ``as_strided`` step addresses the
        root's storage in eager's layout, which the backend need not keep for a computed root (see
        ``_scatter_into_root``): the chain then restarts at that step, taken of the 1-D list of the root's
        elements in eager's storage order. Inputs keep eager's layout, so their chains replay as they are."""
        base, chain = self.current[al.root], al.chain
        last = max((k for k, step in enumerate(chain) if step[0] is aten.as_strided.default), default=None)
        root_val = al.root.meta.get("val")
        if last is None or al.root.op in ("placeholder", "get_attr") or not isinstance(root_val, torch.Tensor):
            return base, chain
        flat = self._storage_list(base, root_val)
        if flat is None:
            return base, chain
        val = chain[last][3].meta.get("val")
        step = (aten.as_strided.default, self._sizes(
                (list(val.shape), list(val.stride()), val.storage_offset() - root_val.storage_offset())), {},
                chain[last][3])
        return flat, (step, *chain[last + 1:])

    def _storage_list(self, base: fx.Node, root_val: torch.Tensor) -> fx.Node | None:
        """``base`` (a value of ``root_val``'s layout) as the 1-D list of its elements in storage order."""
        order = _storage_order(root_val)
        if order is None:
            return None
        with torch.no_grad():       # metadata only: no autograd on fake tensors
            ordered_val, flat_val = root_val.permute(order), root_val.new_empty(root_val.numel())
        ordered = self._call(aten.permute.default, (base, order), ordered_val)
        return self._call(aten.reshape.default, (ordered, [root_val.numel()]), flat_val)

    def map_arg(self, a: Any) -> Any:
        return fx.map_arg(a, self.value)

    # -- nodes ------------------------------------------------------------------------------------------
    def run(self) -> list[fx.Node]:
        for node in self.old.nodes:
            if node.op == "output":
                return self._output(node)
            since = next(iter(reversed(self.graph.nodes)), None)
            if node.op in ("placeholder", "get_attr"):
                self._new_root(node, self.graph.node_copy(node))
            elif _written_args(node.target) or node.target in _BATCH_NORMS:
                self._mutation(node)
            elif _is_view(node.target) or self._is_view_getitem(node):
                self._view(node)
            else:
                self._new_root(node, self.graph.node_copy(node, self.value))
            _inherit_region(node, since)
        raise AssertionError("graph without output node")

    def _new_root(self, old: fx.Node, new: fx.Node) -> None:
        new.meta = dict(old.meta)
        if new.op == "placeholder":
            self.sym.add_source(new, new.meta.get("val"))
        self.alias[old] = _Alias(old, ())
        self.current[old] = new
        self.version[old] = 0

    def _is_view_getitem(self, node: fx.Node) -> bool:
        return node.target is operator.getitem and isinstance(node.args[0], fx.Node) \
            and _is_view(node.args[0].target)

    def _view(self, node: fx.Node) -> None:
        base = node.args[0]
        al = self.alias[base]
        step = (node.target, self.map_arg(tuple(node.args[1:])), self.map_arg(dict(node.kwargs)), node)
        self.alias[node] = _Alias(al.root, al.chain + (step,))
        self.value(node)

    def _mutation(self, node: fx.Node) -> None:
        if node.target in _BATCH_NORMS:
            return self._batch_norm(node)
        written = _written_args(node.target)
        func = _functional_overload(node.target)
        schema_args = node.target._schema.arguments
        outs = {n for i, n in written if schema_args[i].kwarg_only}
        args = [self.map_arg(a) for a in node.args]
        kwargs = {k: self.map_arg(v) for k, v in node.kwargs.items() if k not in outs}
        _fill_defaults(node.target, func, args, kwargs)
        new = self.graph.call_function(func, tuple(args), kwargs)
        new.meta = dict(node.meta)
        targets = [_arg(node, *w) for w in written]
        for k, target in enumerate(targets):
            piece = new if len(written) == 1 else self.graph.call_function(operator.getitem, (new, k))
            if isinstance(target, (list, tuple)):       # a foreach op writes every tensor of a list
                for j, t in enumerate(target):
                    self._write(t, self.graph.call_function(operator.getitem, (piece, j)))
            else:
                self._write(target, piece)
        # The in-place node's result is the mutated tensor itself (or a tuple of them for multi-out ops; nothing
        # for a foreach op).
        if len(written) == 1 and isinstance(targets[0], fx.Node):
            self.alias[node] = self.alias[targets[0]]
        else:
            self._new_root(node, new)

    def _batch_norm(self, node: fx.Node) -> None:
        x, w, b, rm, rv, training, momentum, eps = (list(node.args) + [node.kwargs.get(k) for k in (
            "input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps")][len(node.args):])
        if rm is None or rv is None:        # no running stats: nothing is written
            args = self.map_arg((x, w, b, training, momentum, eps))
            return self._new_root(node, self.graph.call_function(aten._native_batch_norm_legit.no_stats, args))
        if not training:                    # eval: the stats are read, not written
            args = self.map_arg((x, w, b, rm, rv, momentum, eps))
            return self._new_root(node, self.graph.call_function(
                aten._native_batch_norm_legit_no_training.default, args))
        args = self.map_arg((x, w, b, rm, rv, training, momentum, eps))
        new = self.graph.call_function(aten._native_batch_norm_legit_functional.default, args)
        for i, mutated in ((3, rm), (4, rv)):
            self._write(mutated, self.graph.call_function(operator.getitem, (new, i)))
        self._new_root(node, new)

    def _write(self, target: fx.Node, new_value: fx.Node) -> None:
        """``target`` (an old-graph tensor) now holds ``new_value``: update its root."""
        val = target.meta.get("val")
        if isinstance(val, torch.Tensor) and isinstance(new_value.meta.get("val"), torch.Tensor) \
                and new_value.meta["val"].dtype != val.dtype:
            new_value = self.graph.call_function(aten._to_copy.default, (new_value,), {"dtype": val.dtype})
        new_value.meta["val"] = _dense_if_overlapping(val)
        al = self.alias[target]
        if al.chain:
            new_value = self._scatter_into_root(al, target, new_value)
        self.current[al.root] = new_value
        self.version[al.root] += 1
        if al.chain:
            self.views[target] = (self.value(target), self.version[al.root])

    def _scatter_into_root(self, al: _Alias, view: fx.Node, src: fx.Node) -> fx.Node:
        """The root's new value with ``src`` written over ``view``'s elements.

        The view's strides and offset address the root's storage in eager's layout (the traced one), which the
        backend need not keep: it may store a temporary (a ``flip`` of a transposed value, eager keeps the
        transposed strides) in any order. So the scatter goes through a 1-D value that lists the root's
        elements in eager's storage order, whatever layout each value gets: ``permute`` to the order of the
        traced strides, ``reshape`` to 1-D, ``as_strided_scatter`` (on a 1-D input it addresses the elements
        of that list), and back."""
        root_val, view_val = al.root.meta.get("val"), view.meta.get("val")
        order = _storage_order(root_val) if isinstance(root_val, torch.Tensor) else None
        if order is None:
            raise FunctionalizationError(
                f"mutation through a view of {al.root.name}, whose elements overlap or leave gaps in memory, "
                "is not supported yet (stage: functionalization)")
        offset = view_val.storage_offset() - root_val.storage_offset()
        src, view_val = self._unexpand(src, view_val)
        flat = self._storage_list(self.current[al.root], root_val)
        if self.current[al.root].op in ("placeholder", "get_attr"):
            # the list is then a view of an input, and ATen's as_strided_scatter counts the offset from the
            # start of the input's storage, not from its first element: an input that is a slice (storage
            # offset 1) had its write land one element early. A fresh copy starts at its first element.
            flat = self._call(aten.clone.default, (flat,), flat.meta["val"])
        with torch.no_grad():
            ordered_val = root_val.permute(order)
            unflat_val = ordered_val.contiguous()
        scattered = self._call(aten.as_strided_scatter.default,
                               (flat, src, list(view_val.shape), list(view_val.stride()), offset), flat.meta["val"])
        unflat = self._call(aten.reshape.default, (scattered, list(ordered_val.shape)), unflat_val)
        inverse = sorted(range(len(order)), key=order.__getitem__)
        return self._call(aten.permute.default, (unflat, inverse), root_val)

    def _unexpand(self, src: fx.Node, view_val: torch.Tensor) -> tuple[fx.Node, torch.Tensor]:
        """A write over an expanded view (stride 0 along a dim of size > 1: ``t.expand(4, 3).zero_()``, which
        eager allows for ``fill_``, ``zero_``, ``masked_fill_``) stores each memory location once: ``src``'s
        last element along each such dim (eager's loop writes it last) over the view narrowed to size 1 there.
        ``as_strided_scatter`` itself refuses a view whose elements share memory."""
        dims = [d for d, (n, st) in enumerate(zip(view_val.shape, view_val.stride()))
                if type(st) is int and st == 0 and not (type(n) is int and n <= 1)]
        if not dims:
            return src, view_val
        with torch.no_grad():
            for d in dims:
                n = view_val.shape[d]
                view_val = view_val.narrow(d, n - 1, 1)
                src = self._call(aten.slice.Tensor, (src, d, n - 1, n), src.meta["val"].narrow(d, n - 1, 1))
        return src, view_val

    def _sizes(self, args: Any) -> Any:
        """``args`` with each symbolic size an FX node computing it (``ember.autograd.symnodes``)."""
        return tree_map(lambda a: self.sym.node_of(a) if is_symbolic(a) else a, args)

    def _call(self, target: Any, args: tuple, val: Any) -> fx.Node:
        out = self.graph.call_function(target, self._sizes(args))
        out.meta["val"] = val
        return out

    def _output(self, node: fx.Node) -> list[fx.Node]:
        outs = list(self.map_arg(node.args[0]))
        self.mutated_inputs: list[tuple[int, fx.Node]] = []
        placeholders = [n for n in self.old.nodes if n.op == "placeholder"]
        for i, ph in enumerate(placeholders):
            if self.version[ph] > 0:
                self.mutated_inputs.append((i, self.current[ph]))
        mutated_consts = [n for n in self.old.nodes if n.op == "get_attr" and self.version.get(n, 0) > 0]
        if mutated_consts:
            raise FunctionalizationError(
                f"the traced function mutates tensors that are not inputs ({[n.target for n in mutated_consts]}); "
                "pass them as inputs (lift module buffers) so their updates can be written back")
        return outs


def _inherit_region(old: fx.Node, since: fx.Node | None) -> None:
    """The nodes added for ``old`` (after ``since``: its functional op, the scatters writing a mutation back,
    the views replayed for its arguments) stay in ``old``'s activation-checkpoint region, so the partitioner
    recomputes them with the rest of the region instead of saving them."""
    region = old.meta.get(regions.TAG)
    if region is None or since is None:
        return
    n = since.next
    while n.op != "root":
        n.meta.setdefault(regions.TAG, region)
        n = n.next


def functionalize(traced: TracedGraph) -> TracedGraph:
    """A functional copy of ``traced`` (see the module docstring)."""
    f = _Functionalizer(traced)
    outs = f.run()
    write_backs = []
    for i, new in f.mutated_inputs:
        write_backs.append((i, len(outs)))
        outs.append(new)
    f.graph.output(tuple(outs))
    f.graph.eliminate_dead_code(is_impure_node)
    gm = fx.GraphModule(traced.gm, f.graph)
    return replace(traced, gm=gm, write_backs=write_backs)


def apply_write_backs(traced: TracedGraph, inputs: Sequence[Any], flat_outputs: Sequence[Any]) -> None:
    """Copy each mutated input's new value (an extra graph output) into the input, as eager would have."""
    with torch.no_grad():
        for i, j in traced.write_backs:
            inputs[i].copy_(flat_outputs[j])


def has_mutations(gm: fx.GraphModule) -> list[str]:
    """Names of ops in ``gm`` that mutate a tensor (empty for a functional graph)."""
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"
            and (_written_args(n.target) or n.target in _BATCH_NORMS
                 and n.args[5] and n.args[3] is not None)]


def run_functional(traced: TracedGraph, *args: Any) -> tuple[Any, list[Any]]:
    """Run a functionalized graph on real values, write mutated inputs back, return (forward, grads)."""
    from torch.utils._pytree import tree_unflatten

    flat = traced.gm(*args)
    apply_write_backs(traced, args, flat)
    n_fwd = traced.num_forward_outputs
    n_grads = len(traced.grad_input_indices)
    fwd = tree_unflatten(list(flat[:n_fwd]), traced.out_spec)
    return fwd, list(flat[n_fwd:n_fwd + n_grads])


