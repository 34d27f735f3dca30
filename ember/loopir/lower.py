"""Lowering: a prim graph (FX, every node's meta["val"] a TensorMeta or fake tensor) -> ``LoopGraph``.

One small function per prim, registered with ``@register_lowering("exp")``. A lowering receives the
``Lowerer`` and the node's arguments with tensors as ``TV``s and returns a ``TV`` (or a tuple of them).
Pointwise ops and views compose loaders, so chains of them become one loop body; a value is *realized*
(given a buffer) where it is a graph output, an extern argument, a reduction result, or used more than once
(the scheduler later fuses those buffers back into their users' kernels). Prims and ATen ops without a
lowering become ``Extern`` nodes that run the op's eager implementation, recorded in ``MISSING_LOWERINGS``
and shown in ``EMBER_LOGS=perf_hints``.
"""
from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import sympy
import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from ember import logs
from ember.decomp.meta import TensorMeta, meta_of
from ember.errors import EmberError
from ember.shapes import SymbolicUnsupported, expr_of, size_hint

from .expr import COSTLY_OPS, EXPENSIVE_OPS, Load, Op, cast, size, walk, xvars
from .indexing import steps_by_one
from .ir import BufferRef, Extern, ExternOutput, InputBuffer, Layout, LoopGraph, Node, Pointwise
from .layouts import compact_expanded, loses_expansion, non_overlapping, storage_order, unexpanded
from .lowering_table import (LOWERINGS, MISSING_LOWERINGS, UseExtern, is_dense, layout_of, prim_name,  # noqa: F401
                             register_lowering, traced_layout)
from .values import TV, buffer_view, contiguous_layout
from ember.heuristics import heuristics

@dataclass(frozen=True)
class ReusePolicy:
    """How the lowering weighs recomputing a reused value against storing it. ``expensive_stored``: an expensive op
    makes it stored. ``count_broadcast_reads``: reads of broadcast rows and columns (a norm's per-row statistics
    and per-column weights) count towards ``reuse_reads`` like reads of a full buffer."""
    expensive_stored: bool
    count_broadcast_reads: bool


# One policy for every device. Recomputing on a GPU what the CPU stores was measured and lost: the handwritten
# encoder's training step at batch 16 x 512 on an H100 (bench/reuse_policy_ab.py (in git history), generated kernels' device
# time per step): 7.31 ms storing both kinds, 7.58 ms not counting broadcast reads, 8.91 ms recomputing exps,
# 9.17 ms both (bench/results/2026-11-25-h100-i/ab_*.log, in git history). The other policies stay for such measurements and
# for the tests of the recomputing paths.
REUSE_POLICY = ReusePolicy(expensive_stored=True, count_broadcast_reads=True)
# a value stored anyway (for an ATen call, or as an output) is loaded by its other users rather than recomputed
# from two or more buffers of its size (bench/reuse_stored_ab.py (in git history) measures the difference)
REUSE_STORED = True


class LoweringError(EmberError):
    """A graph the loop IR cannot represent (the caller runs it as an FX graph instead)."""


def _on_gpu(device: Any) -> bool:
    return torch.device(device).type == "cuda"


class Lowerer:
    def __init__(self, gm: fx.GraphModule, name: str = "graph", channels_last: bool = False,
                 align_matmuls: bool = True, hoists: Callable[[Any], bool] = _on_gpu) -> None:
        self.gm, self.name = gm, name
        self.nodes: list[Node] = []
        self.constants: dict[str, torch.Tensor] = {}
        # buffers in a layout other than the traced one (matmul_align's padded rows, channels-last activations):
        # a graph output that is a view of one is copied into the traced layout
        self.padded_results: set[str] = set()
        self.channels_last = channels_last        # ember.loopir.conv_layout
        self.align_matmuls = align_matmuls        # ember.loopir.matmul_align (max-autotune pads at run time)
        self.hoists = hoists                      # whether kernels on a device get small costly values stored
        self.hoisted: set[str] = set()            # ... and the buffers stored so
        self._count = 0
        self._stored: dict[tuple, str] = {}       # (memory layout, expression) -> the buffer storing it
        self.deduped: set[str] = set()
        self.zero_padded: dict[str, Layout] = {}  # buffers stored with zero-padded rows for matmuls (matmul_align)
        table = gm.meta.get("ember_symbols")
        self.table = table if table is not None and table.symbols else None   # symbolic sizes (ember.shapes)
        self.symbol_inputs: dict[str, Any] = {}   # int graph inputs that are symbols: name -> expression
        self.items: dict[Any, str] = {}            # unbacked int (``t.item()``) -> the input buffer it reads
        self.mixed = _mixes_devices(gm)            # CPU next to another device: 0-dim CPU values are stored

    def new_name(self, prefix: str = "buf") -> str:
        self._count += 1
        return f"{prefix}{self._count - 1}"

    # -- buffers ---------------------------------------------------------------------------------------
    def realize(self, tv: TV, layout: Layout | None = None, share: bool = True) -> BufferRef:
        """``tv`` stored in a buffer of ``layout`` (default: contiguous, or channels-last in a convolution
        graph). A value already stored with the same memory image (the same expression at the same addresses,
        e.g. a weight's bf16 cast stored for the backward and its transpose taken by the forward's matmul) is
        not stored again: the result is a view of that buffer, unless ``share`` is false."""
        if tv.view is not None and (layout is None or layout == tv.view[1]):
            return BufferRef(*tv.view)
        default = None
        if layout is None and self.channels_last:
            from .conv_layout import default_layout
            default = layout = default_layout(tv)
        layout = layout or contiguous_layout(tv)
        perm = storage_order(layout)
        if perm is not None:     # a permuted dense layout: computed in memory order, used as a view
            shape = tuple(tv.shape[p] for p in perm)
            idx = xvars(tv.ndim)
            logical: list = [0] * tv.ndim
            for k, p in enumerate(perm):
                logical[p] = idx[k]
            own = Layout(shape, tuple(layout.stride[p] for p in perm), layout.dtype, layout.device, 0)
            body = tv.loader(logical)
        else:
            own, shape, body = layout, tuple(tv.shape), tv.loader(xvars(tv.ndim))
        key = (own, body)
        if share and key in self._stored:
            self.deduped.add(self._stored[key])     # two values of the graph, one buffer
            return BufferRef(self._stored[key], layout)
        name = self.new_name()
        if default is not None:
            self.padded_results.add(name)
        self._stored.setdefault(key, name)
        self.nodes.append(Pointwise(name, own, shape, body))
        return BufferRef(name, layout)

    def realized(self, tv: TV, layout: Layout | None = None) -> TV:
        ref = self.realize(tv, layout)
        return buffer_view(ref.name, ref.layout)

    def extern(self, target: Any, args: tuple, kwargs: dict, meta: Any, fresh: bool = False,
               arg_metas: Any = None, op: str = "") -> Any:
        """An ATen call on realized buffers. A computed argument is stored in the layout it had in the trace
        (``arg_metas``, where dense): ops like CPU attention give their output the layout of their input, so
        the traced output layout then holds at run time."""
        leaves, spec = tree_flatten((args, kwargs))
        traced = tree_flatten(arg_metas)[0] if arg_metas is not None else []
        if len(traced) != len(leaves):
            traced = [None] * len(leaves)
        refs = [self.realize(a, _operand_layout(op, a, m)) if isinstance(a, TV) else a
                for a, m in zip(leaves, traced)]
        if op in ("", "aten_extern") and self.channels_last:
            refs = [self._as_traced(a, r, m) if isinstance(a, TV) else r for a, r, m in zip(leaves, refs, traced)]
        pos = _ALIGNED_BIAS.get(target)
        if pos is not None and pos < len(leaves) and isinstance(leaves[pos], TV):
            refs[pos] = self._aligned_rows(leaves[pos], refs[pos])
        args, kwargs = tree_unflatten(refs, spec)
        if meta is None:      # a node traced without metadata: run the op on meta tensors to get it
            meta = _meta_call(target, args, kwargs)
        name = self.new_name()
        if meta is None:      # an op run for its effect (``_linalg_check_errors`` raises on bad input)
            dev = next((a.device for a in tree_flatten((args, kwargs))[0] if hasattr(a, "device")),
                       torch.device("cpu"))
            self.nodes.append(Extern(name, Layout.contiguous((), torch.bool, dev), target, args, kwargs, multi=True))
            return None
        if isinstance(meta, (tuple, list)):
            self.nodes.append(Extern(name, layout_of(_first_tensor(meta)), target, args, kwargs, multi=True, op=op))
            outs = []
            for i, m in enumerate(meta):
                if m is None or not hasattr(m, "shape"):
                    outs.append(m)
                    continue
                lay = layout_of(m)
                self.nodes.append(ExternOutput(f"{name}_{i}", lay, name, i))
                outs.append(buffer_view(f"{name}_{i}", lay))
            return type(meta)(outs) if isinstance(meta, tuple) else outs
        lay = layout_of(meta)
        self.nodes.append(Extern(name, lay, target, args, kwargs, fresh=fresh, op=op))
        return buffer_view(name, lay)

    def _as_traced(self, tv: TV, ref: BufferRef, meta: Any) -> BufferRef:
        """A stored ATen-call argument in the strides it had in the trace where the layout plan stored it otherwise
        (ATen kernels may read arguments in one's memory format: CPU group norm's backward)."""
        if tv.view is None or ref.layout is None or not hasattr(meta, "stride"):
            return ref
        try:
            want = layout_of(meta)
        except Exception:       # noqa: BLE001 - metadata without strides
            return ref
        if tuple(want.shape) != tuple(ref.layout.shape) or want.dtype != ref.layout.dtype or not is_dense(want):
            return ref
        if all(w == r for w, r, n in zip(want.stride, ref.layout.stride, want.shape) if n != 1):
            return ref
        return self.realize(tv, Layout(want.shape, want.stride, want.dtype, ref.layout.device, 0))

    def _aligned_rows(self, tv: TV, ref: BufferRef) -> BufferRef:
        """A CUDA attention kernel's bias with rows padded to ``ATTENTION_BIAS_ALIGN`` elements, as eager's
        ``scaled_dot_product_attention`` pads it (``pad_bias``) before the memory-efficient kernel, which
        refuses other row strides: the trace's pad-then-slice is index arithmetic here, so a bias of 6 keys
        would reach the kernel with rows of 6. Only the first ``keys`` points of each row are written."""
        lay = ref.layout
        if lay is None or lay.device.type != "cuda" or len(lay.shape) < 2:
            return ref
        a = ATTENTION_BIAS_ALIGN
        if all(_multiple_of(st, a) or sz == 1 for st, sz in zip(lay.stride[:-1], lay.shape[:-1])) and \
                lay.stride[-1] == 1:
            return ref
        keys = tv.shape[-1]
        row = (keys + a - 1) // a * a if isinstance(keys, int) else sympy.floor((keys + a - 1) / a) * a
        stride: list = [1, row]
        for d in reversed(tv.shape[1:-1]):
            stride.append(stride[-1] * d)
        lay = Layout(tuple(tv.shape), tuple(reversed(stride)), tv.dtype, lay.device, 0)
        return self.realize(tv, lay, share=False)

    # -- the graph -----------------------------------------------------------------------------------------
    def run(self) -> LoopGraph:
        env: dict[fx.Node, Any] = {}
        inputs: list[str] = []
        outputs: list[Any] = []
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                val = node.meta.get("val")
                if self.table is not None and isinstance(val, (torch.SymInt, int, sympy.Expr)) and \
                        not isinstance(val, bool):
                    name = f"arg{len(inputs)}"      # an int input (a symbol's value, or a constant)
                    inputs.append(name)
                    env[node] = self.symbol_inputs[name] = expr_of(val)
                    continue
                if not isinstance(val, torch.Tensor) and not hasattr(val, "shape"):
                    raise LoweringError(f"ember.loopir: graph input {node.name} is not a tensor ({val!r})")
                name = f"arg{len(inputs)}"
                lay = layout_of(val)
                self.nodes.append(InputBuffer(name, lay, len(inputs)))
                inputs.append(name)
                env[node] = buffer_view(name, lay)
            elif node.op == "get_attr":
                val = _attr(self.gm, node.target)
                if not isinstance(val, torch.Tensor):
                    env[node] = val
                    continue
                name = self.new_name("const")
                self.constants[name] = val
                lay = layout_of(val)
                self.nodes.append(InputBuffer(name, lay, -1))
                env[node] = buffer_view(name, lay)
            elif node.op == "call_function":
                args, kwargs = fx.map_arg((node.args, node.kwargs), lambda n: env[n])
                if self.table is not None:
                    if node.target is torch.ops.aten._local_scalar_dense.default:
                        self._item(node, args[0])
                    if _is_size_op(node):       # sym_size, int arithmetic: the value's sympy expression
                        env[node] = expr_of(node.meta["val"])
                        continue
                    args, kwargs = tree_map(expr_of, (args, kwargs))   # symbolic constants of a decomposition
                env[node] = self.call(node, args, kwargs)
            elif node.op == "output":
                outs, spec = tree_flatten(fx.map_arg(node.args[0], lambda n: env[n]))
                metas = tree_flatten(fx.map_arg(node.args[0], _eager_meta))[0]
                # a forward graph's values saved for its backward (outputs from ``ember_saved_from`` on) stay
                # in the layout computed here (padded matmul rows, channels-last activations): the backward is
                # compiled for that layout (``ember.autograd.aot``), so nothing is copied on either side
                saved_from = self.gm.meta.get("ember_saved_from", len(outs))
                returned: dict[str, Any] = {}   # buffers the caller gets as outputs (not saved values): node
                out_nodes = tree_flatten(node.args[0])[0]
                user_nodes = set(out_nodes[:saved_from])
                for i, (o, m) in enumerate(zip(outs, metas)):
                    if isinstance(o, TV):
                        computed = o.view is None
                        o = self.realize(o, self._output_layout(o, m) if i < saved_from else None)
                        if computed and o.name in returned and (i < saved_from or out_nodes[i] not in user_nodes) or \
                                o.name in self.deduped and returned.get(o.name, out_nodes[i]) is not out_nodes[i]:
                            # two outputs eager returns as distinct tensors (two equal values stored once, too)
                            # must not share memory, nor may a saved copy (a clone) share a returned value's
                            o = self.realize(TV(o.layout.shape, o.layout.dtype, o.layout.device,
                                                buffer_view(o.name, o.layout).loader), o.layout, share=False)
                        if i < saved_from:
                            returned.setdefault(o.name, out_nodes[i])
                    outputs.append(o)
            else:
                raise LoweringError(f"ember.loopir: unsupported node {node.op} {node.target}")
        return LoopGraph(self.nodes, inputs, outputs, self.name, self.constants, self.hoisted,
                         self.table, self.symbol_inputs, self.items)

    def _item(self, node: fx.Node, tv: Any) -> None:
        """``t.item()`` giving an unbacked int (a data-dependent size): the wrapper binds it from ``t``, a graph
        input (a computed ``t`` is not supported yet: the graph then runs as captured)."""
        e = expr_of(node.meta.get("val"))
        ref = self.realize(tv) if isinstance(tv, TV) else None
        if not isinstance(e, sympy.Symbol) or ref is None or not any(
                isinstance(n, InputBuffer) and n.name == ref.name and n.position >= 0 for n in self.nodes):
            raise SymbolicUnsupported(f"ember.loopir: .item() of a computed tensor as a size ({e})")
        self.items[e] = ref.name

    def _output_layout(self, tv: TV, meta: Any) -> Layout | None:
        """The layout a graph output is stored in: eager's where its elements do not overlap (a padded matmul
        result is copied into it, as the caller expects eager's strides; eager's view of a larger value, a slice
        of a channels-last product, gets a buffer of that value's extent); views of other buffers stay views.
        An expanded result (stride 0 where eager's is) keeps its stride-0 dims, a view of a buffer that lost
        them (a broadcast stored dense for its other uses) too: the caller may write into it after a graph
        break, and eager's write shows in every expanded copy."""
        if meta is None or not hasattr(meta, "shape"):
            return None
        lay = layout_of(meta)
        if tuple(lay.shape) != tuple(tv.shape):
            return None
        if tv.view is not None and tv.view[0] not in self.padded_results and not loses_expansion(tv.view[1], lay):
            return None
        return lay if non_overlapping(unexpanded(lay)) else compact_expanded(lay)

    def call(self, node: fx.Node, args: tuple, kwargs: dict) -> Any:
        target = node.target
        meta = node.meta.get("val")
        if target is operator.getitem or getattr(target, "__name__", "") == "_getitem":
            out = args[0][args[1]]
            return self._hoisted(node, out) if isinstance(out, TV) else out
        name = prim_name(node)
        fn = LOWERINGS.get(name) if name else None
        if fn is not None and _complex(args, kwargs, meta):
            fn = None      # kernels compute real numbers; complex values stay with ATen
        if fn is not None:
            _check_same_device(node)
            try:
                out = self._lowered_call(node, fn, args, kwargs, meta)
                return self._host_scalar(out) if self.mixed else out
            except UseExtern as e:      # raised before the lowering adds any node
                MISSING_LOWERINGS[f"prims.{name}"] += 1
                logs.log("perf_hints", f"ember.loopir: prims.{name} runs as an extern ATen call: {e}")
        else:
            label = f"prims.{name}" if name else str(target)
            MISSING_LOWERINGS[label] += 1
            if name not in _EXPECTED_EXTERNS:
                logs.log("perf_hints", f"ember.loopir: no lowering for {label}; it runs as an extern ATen call")
        # an ATen call returns eager's layout (a channels-last convolution's result), not its prim's contiguous one
        return self._extern_call(node, name, args, kwargs, _eager_meta(node) if name else meta)

    def _extern_call(self, node: fx.Node, name: str | None, args: tuple, kwargs: dict, meta: Any) -> Any:
        target = node.target
        impl = target.impl if name else target
        arg_metas = fx.map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
        if name == "convolution" and not kwargs:
            from .conv_patchify import patchify_conv
            out = patchify_conv(self, args)
            if out is not None:
                return out
        if self.channels_last and (name == "convolution" or target is _CONV_BACKWARD):
            from .conv_layout import channels_last_conv, channels_last_conv_backward
            rule = channels_last_conv if name == "convolution" else channels_last_conv_backward
            out = rule(self, impl, args, kwargs, meta)
            if out is not None:
                return out
        if target is _GROUP_NORM_BACKWARD:
            from .conv_layout import group_norm_backward
            return group_norm_backward(self, impl, args, kwargs, meta)
        if name in ("mm", "addmm", "bmm") and self.align_matmuls:
            from .matmul_align import align_matmul
            out = align_matmul(self, name, impl, args, kwargs, arg_metas)
            if out is not None:
                return out
        return self.extern(impl, args, kwargs, meta, fresh=name in _FRESH_EXTERNS, arg_metas=arg_metas,
                           op=name or "")

    def _lowered_call(self, node: fx.Node, fn: Callable[..., Any], args: tuple, kwargs: dict, meta: Any) -> Any:
        if hasattr(meta, "shape") and any(d == 0 for d in meta.shape):
            lay = layout_of(_eager_meta(node))   # nothing to compute: an empty tensor of eager's layout
            return self.extern(torch.empty_strided, (lay.shape, lay.stride), {"dtype": lay.dtype,
                                                                             "device": lay.device}, meta, fresh=True)
        out = fn(self, *args, **kwargs)
        if self.align_matmuls and isinstance(out, TV) and out.view is None:
            from .matmul_align import padded_for_matmuls
            out = padded_for_matmuls(self, node, out) or out
        if isinstance(out, TV) and out.view is None:
            body = out.loader(xvars(out.ndim))
            n_ops = size(body)
            h = heuristics()
            if n_ops >= h.max_inline_ops or (len(node.users) > 1 and _realize_on_reuse(node, body, n_ops, out.shape)):
                # stored in eager's layout (channels-last for a channels-last input's values), so that a view
                # of it that the graph returns has eager's strides; the default layout in a convolution graph
                eager = None if self.channels_last else traced_layout(out, _eager_meta(node))
                out = self.realized_narrow(out, body, eager)
            else:
                out = self._hoisted(node, out, body)
        return out

    def _host_scalar(self, tv: Any) -> Any:
        """A 0-dim CPU value in a graph that also computes on another device: stored in its own 0-dim CPU buffer
        (one element, by a CPU kernel), which a kernel of the other device then reads as a scalar (the wrapper
        gives it a device copy: ``wrapper._host_scalars``), as eager takes ``x_cuda * cpu_scalar`` for any 0-dim
        CPU tensor. Inlined into that kernel instead, its expression would read CPU memory on the device (a
        view of a larger CPU tensor, ``y_cpu[1, 2]``, is copied for the same reason)."""
        if not isinstance(tv, TV) or tv.ndim != 0 or torch.device(tv.device).type != "cpu":
            return tv
        reads = {n.buf for n in walk(tv.loader(())) if isinstance(n, Load)}
        scalars = {n.name for n in self.nodes if n.name in reads and n.device.type == "cpu" and not n.layout.shape}
        if reads <= scalars:
            return tv       # reads 0-dim CPU buffers only (``s.float()``): inlined, each of them copied
        if tv.view is not None:
            tv = TV(tv.shape, tv.dtype, tv.device, tv.loader)
        ref = self.realize(tv, share=False)
        return buffer_view(ref.name, ref.layout)

    def _hoisted(self, node: fx.Node, tv: TV, body: Any = None) -> TV:
        """``tv`` realized when it is a small value with a costly op that a user broadcasts over many more
        points (a batch norm's per-channel ``rsqrt(var / n + eps)``), so that the user loads it rather than
        computing it again at each of its points; ``tv`` itself otherwise. Only for Triton kernels
        (``hoists``): the C++ loops build such values once per row, or before the vector loop."""
        if tv.view is not None or not self.hoists(tv.device):
            return tv
        body = tv.loader(xvars(tv.ndim)) if body is None else body
        if not _hoist(node, body, tv.shape):
            return tv
        ref = self.realize(tv)
        self.hoisted.add(ref.name)
        return buffer_view(ref.name, ref.layout)

    def realized_narrow(self, tv: TV, body: Any, layout: Layout | None = None) -> TV:
        """``tv`` realized; a value that is a widening cast (a 16-bit value its users compute with in float32, a
        byte its users index with in int64) is stored before the cast, in fewer bytes, and cast where loaded."""
        if isinstance(body, Op) and body.name == "to_dtype" and _widens(body.args[0].dtype, tv.dtype):
            inner = TV(tv.shape, body.args[0].dtype, tv.device, lambda idx: tv.loader(idx).args[0])
            stored = self.realized(inner, layout and Layout(layout.shape, layout.stride, inner.dtype, layout.device,
                                                            layout.offset))
            return TV(tv.shape, tv.dtype, tv.device, lambda idx: cast(stored.loader(idx), tv.dtype))
        return self.realized(tv, layout)


_CONV_BACKWARD = torch.ops.aten.convolution_backward.default
_GROUP_NORM_BACKWARD = torch.ops.aten.native_group_norm_backward.default
# CUDA attention kernels that take an additive bias whose rows must be aligned: the bias's argument position
ATTENTION_BIAS_ALIGN = 16
_ALIGNED_BIAS = {torch.ops.aten._scaled_dot_product_efficient_attention.default: 3,
                 torch.ops.aten._scaled_dot_product_efficient_attention_backward.default: 4}


def _multiple_of(v: Any, a: int) -> bool:
    if isinstance(v, int):
        return v % a == 0
    return sympy.Mod(v, a) == 0
_FRESH_EXTERNS = {"mm", "bmm", "addmm", "convolution"}       # prims whose result is a new tensor
_EXPECTED_EXTERNS = {"mm", "bmm", "addmm", "convolution", "sdpa", "aten_extern", "uniform", "normal", "rng_seed"}


def _is_size_op(node: fx.Node) -> bool:
    """An int computed from sizes (``aten.sym_size.int``, ``operator.mul`` of sizes...): its value is the
    expression in its ``meta["val"]``, which the wrapper computes from the symbols it binds."""
    val = node.meta.get("val")
    if isinstance(val, (torch.SymInt, torch.SymBool, torch.SymFloat, sympy.Basic)):
        return True
    return isinstance(val, (int, bool)) and (getattr(node.target, "__module__", "") in ("_operator", "math") or
                                             node.target in _SIZE_OPS)


_SIZE_OPS = {torch.ops.aten.sym_size.int, torch.ops.aten.sym_stride.int, torch.ops.aten.sym_numel.default,
             torch.ops.aten.sym_storage_offset.default}


_MATMULS = ("mm", "bmm", "addmm")


def _operand_layout(op: str, tv: TV, meta: Any) -> Layout | None:
    """The layout to store a computed extern argument in: a matmul operand that reads its input transposed
    (the bf16 cast of ``P`` in ``P^T @ dO``, an attention's value gradient) is stored in its input's order and
    passed transposed (cuBLAS takes either order): the kernel computing it then reads and writes in memory
    order, and can share its loads with a kernel over the same input (BERT's softmax backward read the saved
    probabilities twice, once across rows). Otherwise the layout it had in the trace. Sizes may be symbolic:
    the strides are then expressions of them, so a dynamic graph gets the static graph's layout."""
    if op in _MATMULS and tv.view is None and tv.ndim in (2, 3):
        idx = xvars(tv.ndim)
        lds = [n.index for n in walk(tv.loader(idx)) if isinstance(n, Load)]
        if lds and all(steps_by_one(i, idx[-2]) and not steps_by_one(i, idx[-1]) for i in lds):
            a, b = tv.shape[-2:]
            stride = (1, a) if tv.ndim == 2 else (a * b, 1, a)
            return Layout(tuple(tv.shape), stride, tv.dtype, tv.device, 0)
    return traced_layout(tv, meta)


def _eager_meta(node: fx.Node) -> Any:
    """``node``'s metadata with the strides eager gives its value (``aot._keep_eager_strides``)."""
    val, stride = node.meta.get("val"), node.meta.get("ember_eager_stride")
    if stride is None or not hasattr(val, "shape") or len(stride) != len(val.shape):
        return val
    return TensorMeta(tuple(val.shape), val.dtype, val.device, stride)


def _meta_call(target: Any, args: tuple, kwargs: dict) -> Any:
    def fake(a: Any) -> Any:
        if isinstance(a, BufferRef):
            return torch.empty_strided(a.layout.shape, a.layout.stride, dtype=a.layout.dtype, device="meta")
        return a
    try:
        out = target(*tree_map(fake, args), **tree_map(fake, kwargs))
    except Exception as e:       # noqa: BLE001 - no meta kernel: the graph runs as FX instead
        raise LoweringError(f"ember.loopir: no metadata for {target} and no meta kernel ({e})") from e
    dev = next((a.layout.device for a in tree_flatten((args, kwargs))[0] if isinstance(a, BufferRef)),
               torch.device("cpu"))
    moved = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.device)]
    if moved:       # a transfer or factory (``_to_copy(x, device="cuda")``): the device it puts data on
        dev = moved[0]

    def fix(o: Any) -> Any:        # keep shapes and strides, report the real device
        if isinstance(o, torch.Tensor):
            return TensorMeta(tuple(o.shape), o.dtype, dev, tuple(o.stride()))
        return o
    return tree_map(fix, out)


def _realize_on_reuse(node: fx.Node, body: Any, n_ops: int, shape: Sequence = ()) -> bool:
    policy = REUSE_POLICY
    reads, expensive = set(), False
    full: set[str] = set()       # buffers read at every point of the value (not a broadcast row or column)
    need = {x for x, n in zip(xvars(len(shape)), shape) if n != 1}
    for e in walk(body):
        if isinstance(e, Load):
            reads.add(e.buf)
            if need <= getattr(e.index, "free_symbols", set()):
                full.add(e.buf)
        elif isinstance(e, Op) and e.name in EXPENSIVE_OPS:
            expensive = policy.expensive_stored
    if expensive or not reads:
        return expensive
    externs = sum(1 for u in node.users if _stores(u))
    # stored anyway for an ATen call or as an output: a kernel using it too loads that one buffer rather than
    # recomputing it from two or more of the same size (a post-norm layer's output, which feeds the next
    # layer's matmul and its residual add)
    if REUSE_STORED and externs and externs < len(node.users) and len(full) >= 2:
        return True
    if len(full) >= heuristics().reuse_many_full and len(node.users) - externs >= heuristics().reuse_many_users:
        return True
    n_reads = len(reads) if policy.count_broadcast_reads else len(full)
    return externs > 1 or n_reads > heuristics().reuse_reads or n_ops >= heuristics().reuse_ops


def _hoist(node: fx.Node, body: Any, shape: Sequence) -> bool:
    """Whether a value is small against a lowered user (at most 1/hoist_fraction of its points) and computes a
    costly op (``COSTLY_OPS`` or ``EXPENSIVE_OPS``) from a buffer: see ``Lowerer._hoisted``. Symbolic sizes count
    at their hints (a batch norm's statistics over a symbolic batch: storing them is right for any size)."""
    n = _numel_hint(shape)
    if n is None or n > heuristics().hoist_max_numel:
        return False
    costly = reads = False
    for e in walk(body):
        if isinstance(e, Load):
            reads = True
        elif isinstance(e, Op) and (e.name in COSTLY_OPS or e.name in EXPENSIVE_OPS) and e.dtype.is_floating_point:
            costly = True
    if not (costly and reads):
        return False
    for u in node.users:
        val = u.meta.get("val") if _lowered(u) else None
        shp = getattr(val, "shape", None)
        h = heuristics()
        points = _numel_hint(shp) if shp is not None else None
        if points is not None and points >= h.hoist_fraction * max(n, 1):
            return True
    return False


def _numel_hint(shape: Sequence) -> int | None:
    """The number of points of ``shape`` at the hints, or None (a size without one: unbacked)."""
    try:
        return int(size_hint(math.prod(shape)))
    except (ValueError, TypeError, SymbolicUnsupported):
        return None





_SHAPE_VIEWS = {"reshape", "view_of", "squeeze", "unsqueeze"}     # the same memory image, another shape


def _stores(user: fx.Node) -> bool:
    """Whether ``user`` needs its input stored in a buffer: an ATen call or a graph output, or a view every
    user of which is one (the softmax of attention's math path, viewed 3-d for its bmm and saved 4-d for the
    backward: stored once, with the bmm taking a view of it, instead of once per shape). The view chain is
    reshapes and squeezes, or one permute whose users take it as it is, so it stays a view of the buffer."""
    if not _lowered(user):
        return True
    name = prim_name(user)
    if name == "permute":
        return all(not _lowered(u) for u in user.users)
    return name in _SHAPE_VIEWS and bool(user.users) and all(_stores(u) for u in user.users)


def _lowered(user: fx.Node) -> bool:
    """Whether a user node becomes loop IR (a prim with a lowering, or tuple indexing) rather than an ATen call
    or a graph output (each of which would store a value that is not a buffer)."""
    if user.op != "call_function":
        return False
    t = user.target
    if t is operator.getitem or getattr(t, "__name__", "") == "_getitem":
        return True
    return type(t).__name__ == "Prim" and t.name in LOWERINGS and t.name not in _EXPECTED_EXTERNS


def _widens(src: torch.dtype, dst: torch.dtype) -> bool:
    """Whether every ``src`` value is exactly a ``dst`` value of more bytes (16-bit floats in float32, small
    integers such as a max pool's window offsets in int64)."""
    if src in (torch.bfloat16, torch.float16):
        return dst in (torch.float32, torch.float64)
    ints = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
    return src in ints and dst in ints and dst.itemsize > src.itemsize and (dst.is_signed or not src.is_signed)


def _complex(args: tuple, kwargs: dict, meta: Any) -> bool:
    leaves = tree_flatten((args, kwargs, meta))[0]
    return any(getattr(getattr(x, "dtype", None), "is_complex", False) for x in leaves)


def _first_tensor(meta: Any) -> Any:
    return next(m for m in meta if hasattr(m, "shape"))


def _attr(obj: Any, target: str) -> Any:
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def lower(gm: fx.GraphModule, name: str = "graph", channels_last: bool | None = None,
          align_matmuls: bool = True, hoists: Callable[[Any], bool] = _on_gpu) -> LoopGraph:
    """``channels_last``: store 4-D activations NHWC (``ember.loopir.conv_layout``); None decides from the
    graph (graphs heavy in 2-D convolutions of ``conv_layout.DTYPES``). ``align_matmuls``: pad misaligned CUDA matmuls
    (``ember.loopir.matmul_align``); max-autotune times padding at run time instead. ``hoists(device)``: whether
    the kernels of a device get small costly values stored (``Lowerer._hoisted``; the Triton ones)."""
    from . import lowerings, scatter, welford  # noqa: F401  (register the table)
    scatter.fold_zero_scatter_adds(gm)
    with _sympy_metadata(gm):
        if channels_last is None:
            from .conv_layout import wants_channels_last
            channels_last = wants_channels_last(gm)
        return Lowerer(gm, name, channels_last, align_matmuls, hoists).run()


# prims that pass a 0-dim CPU scalar on as a scalar (the decompositions broadcast ``x * torch.tensor(2.5)``'s
# scalar to x's shape before the ``mul``; the kernel still loads the one CPU value, copied to x's device)
_SCALAR_CARRIERS = frozenset({"broadcast_in_dim", "convert_element_type", "reshape", "squeeze", "unsqueeze",
                              "expand", "permute"})


def _cpu_scalar(node: fx.Node) -> bool:
    """Whether ``node``'s value is a 0-dim CPU tensor, or one broadcast/cast to another shape or dtype."""
    for _ in range(64):
        v = node.meta.get("val")
        if not isinstance(v, (torch.Tensor, TensorMeta)) or torch.device(v.device).type != "cpu":
            return False
        if len(v.shape) == 0:
            return True
        if node.op != "call_function" or prim_name(node) not in _SCALAR_CARRIERS or not node.all_input_nodes:
            return False
        node = node.all_input_nodes[0]
    return False


def _mixes_devices(gm: fx.GraphModule) -> bool:
    devs = {torch.device(v.device).type for v in (n.meta.get("val") for n in gm.graph.nodes)
            if isinstance(v, (torch.Tensor, TensorMeta))}
    return "cpu" in devs and len(devs) > 1


def _check_same_device(node: fx.Node) -> None:
    """A prim that becomes kernel code takes its tensors on one device (0-dim CPU tensors are scalars): eager
    refuses ``x_cuda * torch.ones(3, 3)``, and a constant operand (``torch.ones(3, 3, device="meta")``) folded
    into the kernel's expression would hide the mismatch from ``check_devices``. Raises ``LoweringError``: the
    graph then runs as an FX graph, whose ATen calls raise eager's error at call time."""
    devs = set()
    for a in node.all_input_nodes:
        v = a.meta.get("val")
        if isinstance(v, (torch.Tensor, TensorMeta)) and not _cpu_scalar(a):
            devs.add(torch.device(v.device))
    if len(devs) > 1:
        raise LoweringError(f"ember.loopir: {node.name} ({node.target}) mixes tensors on devices "
                            f"{sorted(map(str, devs))} (eager refuses such an op)")


def check_devices(graph: LoopGraph, has_kernels: Callable[[torch.device], bool]) -> None:
    """Raise ``LoweringError`` (the graph then runs as an FX graph, ATen checking devices as eager does) where a
    kernel would compute on a device that has no kernel backend (``meta``, ``mps``: a C++ kernel handed their
    memory crashes the process), or would read a buffer of another device: eager refuses such an op ("Expected
    all tensors to be on the same device"), except a 0-dim CPU tensor, a scalar, which the wrapper copies to
    the kernel's device (``wrapper._host_scalars``: a graph input or constant, or a 0-dim value computed on the
    CPU, which ``Lowerer._host_scalar`` stores in its own buffer)."""
    nodes = {n.name: n for n in graph.nodes}
    for n in graph.nodes:
        if not hasattr(n, "body"):          # inputs and ATen calls: no generated kernel
            continue
        if not has_kernels(n.device):
            raise LoweringError(f"ember.loopir: {graph.name} computes {n.name} on device {n.device}, which has "
                                "no kernel backend (cpu: C++, cuda: Triton)")
        for r in sorted(n.reads()):
            src = nodes.get(r)
            if src is None or src.device == n.device:
                continue
            scalar = src.device.type == "cpu" and len(src.layout.shape) == 0     # an input or a stored value
            if not scalar:
                raise LoweringError(f"ember.loopir: {graph.name}: {n.name} on {n.device} reads {r} on {src.device} "
                                    "(an op mixing devices, which eager refuses)")


@contextlib.contextmanager
def _sympy_metadata(gm: fx.GraphModule) -> Iterator[None]:
    """In a graph with symbolic sizes, every tensor ``meta["val"]`` (a fake tensor with ``torch.SymInt`` sizes)
    and ``ember_eager_stride`` is seen by the lowering as sympy (``TensorMeta``), as the contract puts sizes in
    ember's IRs: comparing sizes is then structural and ``int()`` of one raises, where on a ``SymInt`` either
    would silently add a relation or pin the size. The graph's own metadata is restored afterwards."""
    table = gm.meta.get("ember_symbols")
    if table is None or not table.symbols:
        yield
        return
    saved = []
    for node in gm.graph.nodes:
        for key in ("val", "ember_eager_stride"):
            v = node.meta.get(key)
            new = _as_sympy(v)
            if new is not v:
                saved.append((node, key, v))
                node.meta[key] = new
    try:
        yield
    finally:
        for node, key, v in saved:
            node.meta[key] = v


def _as_sympy(v: Any) -> Any:
    if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter) and _symbolic_tensor(v):
        return meta_of(v)
    if isinstance(v, (tuple, list)) and any(isinstance(x, (torch.Tensor, torch.SymInt)) for x in v):
        return type(v)(_as_sympy(x) for x in v)
    return expr_of(v) if isinstance(v, torch.SymInt) else v


def _symbolic_tensor(t: torch.Tensor) -> bool:
    return any(isinstance(d, torch.SymInt) for d in (*t.shape, *t.stride()))


__all__ = ["lower", "register_lowering", "LOWERINGS", "MISSING_LOWERINGS", "LoweringError", "Lowerer", "UseExtern"]
