"""Tracing to ATen: run a callable on ember fake tensors and record every ATen op into a new FX graph.

Input: a callable (a torch-level ``torch.fx.GraphModule`` from ember's capture or from torch.compile's backend
hook, or any Python function of tensors) and example inputs (real or fake tensors, or plain Python values).
Output: a ``TracedGraph`` whose ``gm`` is a ``torch.fx.GraphModule`` of ``OpOverload`` calls (may still contain
in-place/``out=`` ops and views: see ``functionalize``), with one placeholder per example input
(``training=True`` adds one tangent placeholder per forward output that requires grad), and one flat output
tuple: the forward outputs, then (training) the gradient of each input that requires grad (None if unused).

Invariants:
- ``node.meta["val"]`` is the fake value of every placeholder and op node.
- A symbolic size an op takes (``torch.SymInt``) is an FX node (``ember.autograd.symnodes``): a ``sym_size`` of
  a placeholder, an int placeholder, or ``operator`` arithmetic on those, one node per expression.
- A tensor returned by an op maps to that op's node, also when it is the mutated ``self`` of an in-place op
  (later uses read the in-place node), so the graph replays eager's data flow op by op.
- Real tensors met during tracing that are not inputs (module attributes, ``torch.tensor`` constants) become
  ``get_attr`` constants of ``gm`` holding the real value.
- The backward is whatever ATen ops PyTorch's autograd engine runs for ``torch.autograd.grad``; grad mode and
  autocast are the caller's ambient state, as in eager. Autocast's cast cache is off while tracing, so no fake
  tensor is left in it for the caller's eager code.
"""
from __future__ import annotations

import contextlib
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from ember.autograd.fake import INPLACE_VIEW_OPS, FakeMode, FakeTensor
from ember.autograd import regions
from ember.autograd.device_norms import REDIRECTS
from ember.autograd.symnodes import SymNodes
from ember.autograd.overlap import ORDER, check_writes, self_overlapping_layout
from ember.autograd.runtime import modified_error
from ember.autograd import symbolic as _symbolic  # noqa: F401  (registers the symbolic shape rules fake tensors use)
from ember.errors import EmberError


class OrderDependentWrite(EmberError):
    """An in-place op over overlapping views (``ember.autograd.overlap``): the graph runs as captured."""


@dataclass
class TracedGraph:
    """An ATen-level graph and how its inputs and outputs relate to the traced function's."""

    gm: fx.GraphModule
    num_inputs: int
    num_forward_outputs: int
    out_spec: Any
    grad_input_indices: list[int] = field(default_factory=list)
    num_tangents: int = 0
    write_backs: list[tuple[int, int]] = field(default_factory=list)  # (input index, output index)
    # tensors eager's autograd saved for backward that the caller can reach (``SavedVersions``): the inputs
    # and forward outputs that share their storage, whose versions the runtime checks before the backward,
    # each with the bit mask of the forward outputs (bit k: flat output k) whose gradient reaches a backward
    # node that unpacks it: eager checks a saved tensor only when such a node runs
    saved_inputs: list[tuple[int, int]] = field(default_factory=list)
    saved_outputs: list[tuple[int, int]] = field(default_factory=list)


class _Recorder(TorchDispatchMode):
    """Records each ATen op that reaches it, then lets the fake mode below compute it."""

    def __init__(self, graph: fx.Graph, fake_mode: FakeMode) -> None:
        super().__init__()
        self.graph = graph
        self.fake_mode = fake_mode
        self.nodes: dict[int, tuple[torch.Tensor, fx.Node]] = {}
        self.constants: dict[str, torch.Tensor] = {}
        self.sym = SymNodes(graph)

    def bind(self, value: torch.Tensor, node: fx.Node) -> None:
        self.nodes[id(value)] = (value, node)
        node.meta["val"] = value
        if node.op == "placeholder":
            self.sym.add_source(node, value)

    def node_of(self, x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            if isinstance(x, (torch.SymInt, torch.SymFloat)) and x.node.is_symbolic():
                return self.sym.node_of(x)
            return x
        hit = self.nodes.get(id(x))
        if hit is not None and hit[0] is x:
            return hit[1]
        if isinstance(x, FakeTensor):
            raise RuntimeError(f"ember tracer: {x!r} was not produced inside the trace")
        return self._constant(x)

    def _constant(self, real: torch.Tensor) -> fx.Node:
        name = f"_tensor_constant{len(self.constants)}"
        self.constants[name] = real
        node = self.graph.get_attr(name)
        self.bind(self.fake_mode.to_fake(real), node)
        # Memoized by identity: the fake of this constant now maps to the get_attr node.
        self.nodes[id(real)] = (real, node)
        return node

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        redirect = REDIRECTS.get(func)
        if redirect is not None:        # a vendor batch norm, recorded as native_batch_norm (device_norms)
            return redirect(lambda op, a, k: self.__torch_dispatch__(op, types, a, k), args, kwargs)
        node_args, node_kwargs = tree_map(self.node_of, (tuple(args), kwargs))
        if check_writes(func, args, kwargs) == ORDER:     # raises eager's error for an overlap eager refuses
            raise OrderDependentWrite(f"{func} writes memory that one of its inputs reads at other positions; "
                                      "eager's result depends on its loop order, so this graph runs eagerly")
        if func._schema.name in _RESHAPING_VIEW_OPS and isinstance(args[0], FakeTensor):
            _freeze_val(node_args[0], args[0])
        out = func(*args, **kwargs)
        node = self.graph.call_function(func, node_args, node_kwargs)
        self._bind_outputs(out, node)
        if regions.current() is not None and regions.policy_saves(func, args, kwargs):
            for n in [node, *node.users]:       # the op and its getitems: saved, never recomputed
                n.meta[regions.SAVE_TAG] = True
        return out

    def _bind_outputs(self, out: Any, node: fx.Node) -> None:
        node.meta["val"] = out
        region = regions.current()
        if region is not None:       # recorded inside torch.utils.checkpoint (ember.autograd.regions)
            node.meta[regions.TAG] = region
        if isinstance(out, torch.Tensor):
            self.bind(out, node)
        elif isinstance(out, (tuple, list)):
            for i, o in enumerate(out):
                if isinstance(o, torch.Tensor):
                    item = self.graph.call_function(operator.getitem, (node, i))
                    self.bind(o, item)
                    if region is not None:
                        item.meta[regions.TAG] = region
        if self.fake_mode.table is not None and self.fake_mode.table.unbacked:
            self._unbacked_sources(out, node)


    def _unbacked_sources(self, out: Any, node: fx.Node) -> None:
        """A data-dependent op's result carries its unbacked sizes: later reads are ``sym_size`` of it (or the
        ``item`` node itself), so the graph computes them at run time (ember.autograd.unbacked)."""
        from ember.autograd.unbacked import unbacked_in
        table = self.fake_mode.table
        if unbacked_in(out, table) and not isinstance(out, torch.Tensor):
            self.sym.add_source(node, out)
        elif isinstance(out, torch.Tensor) and unbacked_in(out, table):
            self.sym.add_source(node, out)
        elif isinstance(out, (tuple, list)):
            for i, o in enumerate(out):
                if isinstance(o, torch.Tensor) and unbacked_in(o, table):
                    item = next((u for u in node.users if u.target is operator.getitem and u.args[1] == i), None)
                    if item is not None:
                        self.sym.add_source(item, o)


# in-place view ops that reshape their input (resize_ changes the storage too, and is functionalized as such)
_RESHAPING_VIEW_OPS = INPLACE_VIEW_OPS - {"aten::resize_", "aten::resize_as_"}


def _freeze_val(node: Any, t: FakeTensor) -> None:
    """Before an in-place view op changes ``t``'s own shape (``squeeze_``, ``transpose_``): the node that produced
    ``t`` keeps a value with the shape it had (the recorded functional view op gets the new one)."""
    if not isinstance(node, fx.Node) or node.meta.get("val") is not t:
        return
    with _disable_current_modes():
        m = t._meta.as_strided(t.shape, t.stride(), t.storage_offset())
    # it keeps t's requires_grad too: autograd's reach from inputs to outputs reads it (a pooled mean that
    # ``adaptive_avg_pool2d`` restrides in place read as not requiring grad, and the loss's gradient then
    # skipped every parameter before it)
    node.meta["val"] = FakeTensor(m, t.device, t.fake_mode, requires_grad=t.requires_grad)


class SavedVersions:
    """Saved-tensor hooks for the training trace: eager's autograd checks, when the backward unpacks a tensor it
    saved, that no in-place op changed it since (its version counter), and raises otherwise. Hooks turn that
    check off (the frontend pushes identity hooks while compiling so that user hooks do not see the trace), so
    these do it themselves: a trace whose function modifies a saved tensor after saving it raises as eager's
    backward would, and the graph then runs as captured, with eager autograd, which raises at backward.
    They also record what was saved: the inputs and outputs sharing those storages, the tensors a caller can
    still modify in place after the call (``runtime.AotFunction`` checks their versions before the backward).

    Eager checks a saved tensor only when the backward node that saved it runs, and that node runs only when a
    gradient flows into it: from an output the loss uses, not through a detached branch nor from an output
    whose gradient is None. So each saved tensor also records the nodes that unpacked it in the traced backward
    (which runs every node a gradient can reach), and ``reachable`` gives each value the mask of the forward
    outputs whose gradients reach one of those nodes; the runtime checks it only when one of them has a
    gradient (``runtime.check_versions``)."""

    def __init__(self) -> None:
        self.saved: list[torch.Tensor] = []
        self.unpacked_by: dict[int, list[Any]] = {}     # saved index -> backward nodes that unpacked it
        self._hooks: Any = None

    def __enter__(self) -> "SavedVersions":
        if torch._C._autograd._saved_tensors_hooks_get_disabled_error_message() is None:
            self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
            self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._hooks is not None:
            self._hooks.__exit__(*exc)
            self._hooks = None

    def _pack(self, t: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        self.saved.append(t)
        return t, t._version, len(self.saved) - 1

    def _unpack(self, packed: tuple[torch.Tensor, int, int]) -> torch.Tensor:
        t, version, k = packed
        if t._version != version:
            raise modified_error(t, version)
        self.unpacked_by.setdefault(k, []).append(torch._C._current_autograd_node())
        return t

    def reachable(self, values: Sequence[Any], outputs: Sequence[Any]) -> list[tuple[int, int]]:
        """``(i, mask)`` for each of ``values`` (fake tensors) sharing a storage with a saved tensor that the
        traced backward unpacked: ``mask`` has bit k set where the gradient of ``outputs[k]`` reaches a node
        that unpacks it (eager checks that tensor's version only when one of those outputs gets a gradient)."""
        if not self.unpacked_by:
            return []
        masks = _output_masks(outputs)
        every = sum(1 << k for k, o in enumerate(outputs) if getattr(o, "grad_fn", None) is not None)
        by_storage: dict[int, int] = {}
        for k, nodes in self.unpacked_by.items():
            key = _storage_key(self.saved[k])
            if key is not None:
                mask = 0
                for node in nodes:      # None: not inside a node (never seen): checked whenever any flows
                    mask |= every if node is None else masks.get(node, 0)
                by_storage[key] = by_storage.get(key, 0) | mask
        found = [(i, by_storage.get(_storage_key(v), 0)) for i, v in enumerate(values)]
        return [(i, m) for i, m in found if m]


def _output_masks(outputs: Sequence[Any]) -> dict[Any, int]:
    """Backward node -> bit mask of the ``outputs`` whose gradient reaches it (bit k: ``outputs[k]``)."""
    roots = [(getattr(o, "grad_fn", None), k) for k, o in enumerate(outputs) if isinstance(o, torch.Tensor)]
    roots = [(n, k) for n, k in roots if n is not None]
    order, seen, stack = [], set(), [(n, False) for n, _ in roots]
    while stack:        # depth-first post-order over next_functions: a node after every node it feeds
        node, done = stack.pop()
        if done:
            order.append(node)
        elif node not in seen:
            seen.add(node)
            stack.append((node, True))
            stack.extend((nxt, False) for nxt, _ in node.next_functions if nxt is not None and nxt not in seen)
    masks: dict[Any, int] = {}
    for node, k in roots:
        masks[node] = masks.get(node, 0) | (1 << k)
    for node in reversed(order):        # consumers first: each passes its mask on to what it feeds
        m = masks.get(node, 0)
        for nxt, _ in node.next_functions:
            if nxt is not None:
                masks[nxt] = masks.get(nxt, 0) | m
    return masks


def _storage_key(t: Any) -> int | None:
    meta = getattr(t, "_meta", None)
    return meta.untyped_storage()._cdata if isinstance(meta, torch.Tensor) else None


def trace_aten(fn: Callable[..., Any], example_inputs: Sequence[Any], *, training: bool,
               fake_mode: FakeMode | None = None) -> TracedGraph:
    """Trace ``fn(*example_inputs)`` to ATen ops; with ``training`` also its backward, into one joint graph."""
    from ember import counters
    counters.bump("traces")
    mode = fake_mode or FakeMode()
    graph = fx.Graph()
    rec = _Recorder(graph, mode)
    fakes = [mode.to_fake(x) if isinstance(x, torch.Tensor) else x for x in example_inputs]
    for i, f in enumerate(fakes):
        node = graph.placeholder(f"primals_{i + 1}" if training else f"arg{i}")
        if isinstance(f, torch.Tensor):
            rec.bind(f, node)
        else:
            node.meta["val"] = f
            rec.sym.add_source(node, f)
    cache = torch.is_autocast_cache_enabled()
    # autocast caches the low-precision casts of leaf tensors (parameters) until the autocast region exits:
    # with the cache on, the casts made while tracing would hand fake tensors to the caller's eager code
    torch.set_autocast_cache_enabled(False)
    regions.clear()
    saved = SavedVersions()
    try:
        with mode, rec:
            with saved if training else contextlib.nullcontext():
                outs = fn(*fakes)
                flat_outs, spec = tree_flatten(outs)
                grads, grad_idx, n_tan = [], [], 0
                if training:
                    grads, grad_idx, n_tan = _trace_backward(rec, fakes, flat_outs)
    finally:
        torch.set_autocast_cache_enabled(cache)
        regions.clear()
    out_nodes = [rec.node_of(o) for o in flat_outs + grads]
    graph.output(tuple(out_nodes))
    root = torch.nn.Module()
    for name, value in rec.constants.items():
        setattr(root, name, value)
    gm = fx.GraphModule(root, graph)
    return TracedGraph(gm, len(fakes), len(flat_outs), spec, grad_idx, n_tan,
                       saved_inputs=saved.reachable(fakes, flat_outs),
                       saved_outputs=saved.reachable(flat_outs, flat_outs))


def _trace_backward(rec: _Recorder, inputs: list[Any], flat_outs: list[Any]
                    ) -> tuple[list[Any], list[int], int]:
    """Run torch.autograd.grad on the fake forward outputs with placeholder tangents."""
    diff_outs = [o for o in flat_outs if isinstance(o, torch.Tensor) and o.requires_grad]
    grad_idx = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.requires_grad]
    if not diff_outs or not grad_idx:
        return [None] * len(grad_idx), grad_idx, 0
    first_op = next((n for n in rec.graph.nodes if n.op != "placeholder"), None)   # None: outputs are inputs
    tangents = []
    for i, o in enumerate(diff_outs):
        # eager's gradient for an expanded output is any layout (often dense): a tangent traced with the
        # output's stride-0 layout would make the backward restride it into memory it cannot hold
        stride = o.stride()
        if self_overlapping_layout(o.shape, stride):
            stride = _contiguous_stride(tuple(o.shape))
        t = rec.fake_mode.fake_empty(tuple(o.shape), stride, o.dtype, o.device)
        if first_op is None:
            rec.bind(t, rec.graph.placeholder(f"tangents_{i + 1}"))
        else:
            with rec.graph.inserting_before(first_op):
                rec.bind(t, rec.graph.placeholder(f"tangents_{i + 1}"))
        tangents.append(t)
    grads = torch.autograd.grad(diff_outs, [inputs[i] for i in grad_idx], grad_outputs=tangents,
                                allow_unused=True)
    return list(grads), grad_idx, len(tangents)


def _contiguous_stride(shape: tuple) -> tuple:
    stride, acc = [], 1
    for n in reversed(shape):
        stride.append(acc)
        acc = acc * (max(n, 1) if type(n) is int else n)
    return tuple(reversed(stride))


def run_traced(traced: TracedGraph, *args: Any) -> Any:
    """Run a traced graph on real values and unflatten its forward outputs like the traced function's."""
    from torch.utils._pytree import tree_unflatten

    flat = traced.gm(*args)
    fwd = tree_unflatten(list(flat[:traced.num_forward_outputs]), traced.out_spec)
    return fwd, list(flat[traced.num_forward_outputs:])


def lift_module(module: torch.nn.Module) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    """``(fn, state)`` with ``fn(*state, *inputs) == module(*inputs)``: parameters and buffers become inputs,
    so the traced graph gets placeholders for them (gradients for parameters, write-backs for buffers)."""
    from torch.nn.utils.stateless import _reparametrize_module

    names = [n for n, _ in module.named_parameters()] + [n for n, _ in module.named_buffers()]
    state = [t for _, t in module.named_parameters()] + [t for _, t in module.named_buffers()]

    def fn(*args: Any) -> Any:
        with _reparametrize_module(module, dict(zip(names, args[:len(names)]))):
            return module(*args[len(names):])

    return fn, state
