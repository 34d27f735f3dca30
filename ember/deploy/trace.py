"""``export``: check the model captures as one graph, then trace it to a functional ATen graph."""
from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
from torch.utils._pytree import keystr, tree_flatten_with_path, tree_unflatten

from ..errors import Unsupported
from .dims import Dim, dims_per_leaf
from .symbolic import relations_of, symbolic_leaves
from .program import ExportedProgram, InputSpec, LeafMeta, OutputSpec

_VALUE_TYPES = (int, float, bool, str, type(None))


def export(model: Any, args: Any = (), kwargs: dict | None = None, *, dynamic_shapes: Any = None,
           strict: bool = True) -> ExportedProgram:
    """Export ``model(*args, **kwargs)`` as one whole graph (see ``ember.export``'s package docstring).

    ``strict`` (default) first runs ember's capture with ``fullgraph=True`` (state restored afterwards), so a
    construct that would be a graph break raises ``ember.Unsupported`` with the user's file:line. The program
    is then traced on ember's fake tensors: parameters and buffers become inputs, mutations become outputs.
    """
    if not callable(model):
        raise TypeError(f"ember.export: model must be an nn.Module or a function, got {type(model).__name__}")
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    kwargs = dict(kwargs or {})
    register_dataclasses((args, kwargs))
    with_paths, in_spec = tree_flatten_with_path((args, kwargs))
    leaves = [v for _, v in with_paths]
    names = [_leaf_name(p) for p, _ in with_paths]
    for n, v in zip(names, leaves):
        if not isinstance(v, (torch.Tensor, *_VALUE_TYPES)):
            raise ValueError(f"ember.export: input {n} is a {type(v).__name__}; inputs must be tensors, numbers, "
                             "strings or None inside tuples, lists and dicts")
    sig_fn = model.forward if isinstance(model, torch.nn.Module) else model
    dims = dims_per_leaf(sig_fn, args, kwargs, dynamic_shapes, leaves, names)
    state_names, state, params = _state_of(model)
    if strict:
        _check_one_graph(model, args, kwargs, state + [t for t in leaves if isinstance(t, torch.Tensor)])
    sym = symbolic_leaves(leaves, dims, names) if any(dims) else None
    traced, write_backs = _trace(model, state_names, state, in_spec, leaves, sym)
    n_state = len(state)
    input_specs = [InputSpec("parameter" if n in params else "buffer", n) for n in state_names]
    input_specs += [InputSpec("user_input", n) for n in names]
    output_specs = [OutputSpec("user_output", str(i)) for i in range(traced.num_forward_outputs)]
    for i, _ in write_backs:
        if i < n_state:
            if state_names[i] in params:
                raise Unsupported(f"ember.export: the model writes into parameter {state_names[i]} in place; "
                                  "exported programs cannot update parameters",
                                  hint="make it a buffer, or do the update outside forward()")
            output_specs.append(OutputSpec("buffer_mutation", state_names[i]))
        else:
            output_specs.append(OutputSpec("user_input_mutation", str(i - n_state)))
    metas = [_leaf_meta(v, d) for v, d in zip(leaves, dims)]
    ranges = {dim.name: (max(2, dim.min or 0), dim.max) for d in dims for dim in d.values()}
    ep = ExportedProgram(traced.gm, input_specs, output_specs, dict(zip(state_names, state)), in_spec,
                         traced.out_spec, metas, ranges, frozenset(params))
    if sym is not None:
        ep.relations = relations_of(sym)
    return ep


def register_dataclasses(tree: Any) -> None:
    """Register with PyTorch's pytree every dataclass type found in ``tree`` that is not registered yet (as
    ``torch.export.register_dataclass`` would), so its tensor fields become graph inputs/outputs rather than one
    opaque leaf. The serialized name is the type's module and qualified name; ``ember.load`` needs the type
    registered (imported and registered, or pytree-registered by its library) in the loading process."""
    import dataclasses

    from torch.utils import _pytree as pytree
    for _ in range(32):         # each round registers the dataclasses now visible as leaves
        leaves = pytree.tree_leaves(tree)
        new = {type(v) for v in leaves if dataclasses.is_dataclass(v) and not isinstance(v, type)
               and type(v) not in pytree.SUPPORTED_NODES}
        if not new:
            return
        for cls in new:
            pytree.register_dataclass(cls, serialized_type_name=f"{cls.__module__}.{cls.__qualname__}")


def _check_outputs(out: Any) -> None:
    from torch.utils._pytree import tree_flatten_with_path
    for path, v in tree_flatten_with_path(out)[0]:
        if not isinstance(v, (torch.Tensor, *_VALUE_TYPES)):
            raise ValueError(f"ember.export: output{keystr(path)} is a {type(v).__name__}; outputs must be "
                             "tensors or numbers inside tuples, lists, dicts, dataclasses or types registered "
                             "with torch.utils._pytree")


def _leaf_name(path: tuple) -> str:
    """``x`` for positional argument 0's name-free path ``[0][0]`` -> ``args[0]``; kwargs by key."""
    text = keystr(path)
    if text.startswith("[0]"):
        return "args" + text[3:]
    if text.startswith("[1]"):
        return "kwargs" + text[3:]
    return text


def _leaf_meta(v: Any, dims: dict[int, Dim]) -> LeafMeta:
    if isinstance(v, torch.Tensor):
        shape = tuple(dims[d].name if d in dims else s for d, s in enumerate(v.shape))
        return LeafMeta("tensor", v.dtype, str(v.device), shape)
    return LeafMeta("value", value=v)


def _state_of(model: Any) -> tuple[list[str], list[torch.Tensor], set[str]]:
    if not isinstance(model, torch.nn.Module):
        return [], [], set()
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    return list(params) + list(buffers), list(params.values()) + list(buffers.values()), set(params)


def _check_one_graph(model: Any, args: tuple, kwargs: dict, tensors: list[torch.Tensor]) -> None:
    """Run ember's capture with ``fullgraph=True`` on the real inputs, then restore every tensor and the RNG."""
    import ember
    saved = [t.detach().clone() for t in tensors]
    devices = sorted({t.device.index or 0 for t in tensors if t.device.type == "cuda"})
    from ..capture.torch.tensor import NO_HOOKS
    token = NO_HOOKS.set(True)
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            ember.compile(model, fullgraph=True, backend="eager")(*args, **kwargs)
    except Unsupported as e:
        raise Unsupported(f"ember.export: the model does not capture as one graph: {e.reason}",
                          hint=e.hint or "rewrite that line, or move it out of the exported forward()",
                          user_stack=e.user_stack, source_line=e.source_line) from None
    finally:
        NO_HOOKS.reset(token)
        with torch.no_grad():
            for t, s in zip(tensors, saved):
                t.copy_(s)


def _trace(model: Any, state_names: list[str], state: list[torch.Tensor], in_spec: Any, leaves: list[Any],
           sym: Any = None):
    from torch.nn.utils.stateless import _reparametrize_module

    from ..autograd.fake import DataDependentOpError
    from ..autograd.functionalize import functionalize
    from ..autograd.symcompose import SymbolicCompositions
    from ..autograd.trace import trace_aten
    from ..shapes import SymbolicUnsupported
    n_state = len(state)

    def flat_fn(*flat: Any) -> Any:
        a, k = tree_unflatten(list(flat[n_state:]), in_spec)
        ctx = (_reparametrize_module(model, dict(zip(state_names, flat[:n_state]))) if state_names
               else contextlib.nullcontext())
        # with symbolic sizes, the size-generic compositions ember.compile's AOT trace uses (symcompose): ATen's
        # C++ compositions (matmul, linear, sdpa on some releases) would read, and so pin, the symbolic sizes
        with ctx, _compiling(), (SymbolicCompositions() if sym is not None else contextlib.nullcontext()):
            out = model(*a, **k)
        register_dataclasses(out)       # before trace_aten flattens the outputs
        _check_outputs(out)
        return out

    try:
        with torch.no_grad():
            if sym is None:
                traced = trace_aten(flat_fn, state + leaves, training=False)
            else:
                traced = trace_aten(flat_fn, state + sym.fakes, training=False, fake_mode=sym.mode)
    except SymbolicUnsupported as e:
        raise Unsupported(f"ember.export: the model cannot be traced with dynamic dims yet: {e}",
                          hint="export without dynamic_shapes (static sizes), or make fewer dims dynamic") from None
    except DataDependentOpError as e:
        raise Unsupported(f"ember.export: {e}", hint="the exported graph cannot depend on tensor values "
                          "(.item(), nonzero, data-dependent control flow)", user_stack=_user_stack()) from None
    func = functionalize(traced)
    return func, func.write_backs


@contextlib.contextmanager
def _compiling() -> Any:
    """``torch.compiler.is_compiling()`` is True while the model runs on fake tensors, as ember's capture (the
    strict check) sees it: libraries branch on it (transformers skips its data-dependent checks, torch.nn its
    fused fast paths), so the traced program is the one the capture accepted."""
    old = torch.compiler._is_compiling_flag
    torch.compiler._is_compiling_flag = True
    try:
        yield
    finally:
        torch.compiler._is_compiling_flag = old


def _user_stack() -> list[str]:
    import sys
    import traceback
    tb = sys.exc_info()[2]
    frames = [f for f in traceback.extract_tb(tb) if "/ember/" not in f.filename and "/torch/" not in f.filename]
    return [f"{f.filename}:{f.lineno}" for f in frames]


_ = Callable
