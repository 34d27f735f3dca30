"""``ExportedProgram``: a functional ATen graph plus what it needs to run like the exported model.

The graph's placeholders are, in order, the parameters, the buffers and the flattened user inputs
(``input_specs`` says which is which). Its outputs are the flattened user outputs followed by the new value of
every input the model mutated (``output_specs``: ``buffer_mutation`` for a buffer, ``user_input_mutation`` for a
user input); ``module()`` copies those back, as the model itself would have. Tensors the model creates from
constants are ``get_attr`` attributes of the graph module.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx
from torch.utils._pytree import tree_flatten, tree_unflatten

from .dims import Dim


@dataclass(frozen=True)
class InputSpec:
    kind: str           # "parameter", "buffer" or "user_input"
    name: str           # the parameter/buffer path, or the user input's path in (args, kwargs)


@dataclass(frozen=True)
class OutputSpec:
    kind: str           # "user_output", "buffer_mutation" or "user_input_mutation"
    target: str         # the output's index, or the mutated buffer's / user input's name


@dataclass(frozen=True)
class LeafMeta:
    """What a user input must look like: a tensor's dtype/device/sizes (``Dim`` names where dynamic), or the
    exact value of a non-tensor input (the graph was specialized on it)."""

    kind: str                       # "tensor" or "value"
    dtype: torch.dtype | None = None
    device: str | None = None
    shape: tuple = ()               # ints, or Dim names for dynamic sizes
    value: Any = None


def _fmt_shape(meta: LeafMeta) -> str:
    return f"{str(meta.dtype).replace('torch.', '')}[{', '.join(str(s) for s in meta.shape)}]"


@dataclass
class ExportedProgram:
    graph_module: fx.GraphModule
    input_specs: list[InputSpec]
    output_specs: list[OutputSpec]
    state: dict[str, torch.Tensor]              # parameters and buffers by name
    in_spec: Any                                # pytree spec of (args, kwargs)
    out_spec: Any                               # pytree spec of the user outputs
    user_inputs: list[LeafMeta]
    range_constraints: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)
    parameter_names: frozenset = frozenset()
    relations: list = field(default_factory=list)     # JSON trees over Dim names (ember.deploy.relations)

    @property
    def graph(self) -> fx.Graph:
        return self.graph_module.graph

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.state)

    def module(self) -> "ExportedModule":
        """An ``nn.Module`` that runs the exported graph; ``module()(*args, **kwargs) == model(*args, **kwargs)``."""
        return ExportedModule(self)

    def run_decompositions(self) -> "ExportedProgram":
        """The same program with every ATen op that ember decomposes replaced by ember's prims."""
        from ember.autograd.aot import decompose_graph
        gm = self.graph_module
        if any("val" not in n.meta for n in gm.graph.nodes if n.op in ("placeholder", "call_function")):
            gm = _retrace(self)
        return _replace(self, _sizes_as_nodes(decompose_graph(gm)))

    def __str__(self) -> str:
        lines = ["ExportedProgram:", "  inputs:"]
        users = iter(self.user_inputs)
        for spec in self.input_specs:
            if spec.kind == "user_input":
                m = next(users)
                desc = _fmt_shape(m) if m.kind == "tensor" else f"= {m.value!r}"
            else:
                t = self.state[spec.name]
                desc = f"{str(t.dtype).replace('torch.', '')}[{', '.join(str(s) for s in t.shape)}]"
            lines.append(f"    {spec.kind:<11} {spec.name}: {desc}")
        lines.append("  outputs:")
        lines += [f"    {s.kind:<19} {s.target}" for s in self.output_specs]
        if self.range_constraints:
            from .relations import text
            lines.append("  range constraints:")
            lines += [f"    {k}: [{lo if lo is not None else 0}, {hi if hi is not None else 'inf'}]"
                      for k, (lo, hi) in self.range_constraints.items()]
            lines += [f"    {text(r)}" for r in self.relations]
        lines.append("  graph:")
        lines += ["    " + ln for ln in self.graph_module.code.strip().splitlines()]
        return "\n".join(lines)

    __repr__ = __str__


def _replace(ep: ExportedProgram, gm: fx.GraphModule) -> ExportedProgram:
    return ExportedProgram(gm, ep.input_specs, ep.output_specs, ep.state, ep.in_spec, ep.out_spec,
                           ep.user_inputs, dict(ep.range_constraints), ep.parameter_names, list(ep.relations))


def _sizes_as_nodes(gm: fx.GraphModule) -> fx.GraphModule:
    """The prims of a decomposed graph take symbolic sizes as sympy expressions (as the kernel compiler reads
    them: ``broadcast_in_dim(x, (4, s0), ...)``, ``div(sum, s0)``); for the program to run (``module()``),
    each becomes FX nodes computing it from the inputs' sizes (``ember.autograd.symnodes``)."""
    import sympy

    from ember.autograd.symnodes import SymNodes
    nodes = SymNodes(gm.graph)
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            nodes.add_source(n, n.meta.get("val"))
    if nodes.table is None:
        return gm

    def as_node(a: Any) -> Any:
        return nodes.build(a) if isinstance(a, sympy.Basic) and a.free_symbols else a
    for n in list(gm.graph.nodes):
        if n.op == "call_function":
            with gm.graph.inserting_before(n):
                n.args, n.kwargs = fx.node.map_aggregate((n.args, n.kwargs), as_node)
    gm.recompile()
    return gm


def _retrace(ep: ExportedProgram) -> fx.GraphModule:
    """Give a loaded graph its nodes' metadata back by tracing it on tensors shaped like its inputs."""
    from ember.autograd.trace import trace_aten
    inputs: list[Any] = []
    users = iter(ep.user_inputs)
    for spec in ep.input_specs:
        if spec.kind != "user_input":
            inputs.append(ep.state[spec.name])
            continue
        m = next(users)
        inputs.append(torch.empty(tuple(s if isinstance(s, int) else 2 for s in m.shape), dtype=m.dtype,
                                  device=m.device) if m.kind == "tensor" else m.value)
    traced = trace_aten(lambda *a: ep.graph_module(*a), inputs, training=False)
    return traced.gm


def state_owner(root: torch.nn.Module, path: str) -> tuple[torch.nn.Module, str]:
    """The submodule of ``root`` that holds the parameter or buffer ``path`` (``"layer.0.weight"``), made as empty
    modules where missing, and the attribute name in it."""
    mod = root
    *parents, leaf = path.split(".")
    for p in parents:
        if not hasattr(mod, p):
            mod.add_module(p, torch.nn.Module())
        mod = getattr(mod, p)
    return mod, leaf


def lookup_state(root: torch.nn.Module, names: list[str], params: Any) -> list[torch.Tensor]:
    """``root``'s parameters (names in ``params``) and buffers ``names``, in that order: a program's lifted
    state as its graph takes it."""
    return [root.get_parameter(n) if n in params else root.get_buffer(n) for n in names]


class ExportedModule(torch.nn.Module):
    """Runs an ``ExportedProgram``: checks the inputs against the exported specs, runs the graph with the
    program's parameters and buffers (registered here under their original names), writes mutated buffers and
    inputs back, and returns the outputs in the model's structure."""

    def __init__(self, ep: ExportedProgram) -> None:
        super().__init__()
        object.__setattr__(self, "_ep", ep)
        for name, t in ep.state.items():
            owner, leaf = state_owner(self, name)
            if name in ep.parameter_names:
                owner.register_parameter(leaf, t if isinstance(t, torch.nn.Parameter)
                                         else torch.nn.Parameter(t, requires_grad=t.requires_grad))
            else:
                owner.register_buffer(leaf, t)
        self._names = [s.name for s in ep.input_specs if s.kind != "user_input"]

    def _state(self) -> list[torch.Tensor]:
        return lookup_state(self, self._names, self._ep.parameter_names)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        ep = self._ep
        leaves, spec = tree_flatten((args, kwargs))
        if spec != ep.in_spec:
            raise ValueError(f"ember exported program: the inputs' structure differs from the exported one:\n"
                             f"  expected {ep.in_spec}\n  got      {spec}")
        check_inputs(ep, leaves)
        state = self._state()
        flat = state + leaves
        outs = list(ep.graph_module(*flat))
        user = [s for s in ep.output_specs if s.kind == "user_output"]
        muts = ep.output_specs[len(user):]
        with torch.no_grad():
            for s, new in zip(muts, outs[len(user):]):
                dst = (self.get_buffer(s.target) if s.kind == "buffer_mutation"
                       else leaves[int(s.target)])
                dst.copy_(new)
        return tree_unflatten(outs[:len(user)], ep.out_spec)


def check_inputs(ep: ExportedProgram, leaves: list[Any]) -> None:
    """Raise ``ValueError`` naming the input and the constraint a call violates."""
    names = [s.name for s in ep.input_specs if s.kind == "user_input"]
    seen: dict[str, tuple[int, str]] = {}
    for name, m, x in zip(names, ep.user_inputs, leaves):
        if m.kind == "value":
            if type(x) is not type(m.value) or x != m.value:
                raise ValueError(f"ember exported program: input {name} was {m.value!r} when exported (the "
                                 f"graph is specialized on it), got {x!r}")
            continue
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"ember exported program: input {name} must be a tensor, got {type(x).__name__}")
        if x.dtype != m.dtype or x.dim() != len(m.shape) or str(x.device) != m.device:
            raise ValueError(f"ember exported program: input {name} must be {_fmt_shape(m)} on {m.device}, "
                             f"got {_fmt_shape(LeafMeta('tensor', x.dtype, str(x.device), tuple(x.shape)))} "
                             f"on {x.device}")
        for d, (want, got) in enumerate(zip(m.shape, x.shape)):
            if isinstance(want, int):
                if got != want:
                    raise ValueError(f"ember exported program: input {name} dim {d} must be {want} (exported "
                                     f"static), got {got}")
                continue
            lo, hi = ep.range_constraints.get(want, (None, None))
            if (lo is not None and got < lo) or (hi is not None and got > hi):
                raise ValueError(f"ember exported program: input {name} dim {d} ({want}) must be in "
                                 f"[{lo}, {hi if hi is not None else 'inf'}], got {got}")
            if want in seen and seen[want][0] != got:
                raise ValueError(f"ember exported program: input {name} dim {d} and {seen[want][1]} are both "
                                 f"Dim {want!r}, so they must be equal; got {got} and {seen[want][0]}")
            seen.setdefault(want, (got, f"input {name} dim {d}"))
    if ep.relations:
        from .relations import evaluate, text
        sizes = {k: v for k, (v, _) in seen.items()}
        for r in ep.relations:
            if not evaluate(r, sizes):
                raise ValueError(f"ember exported program: the sizes {sizes} break the exported constraint "
                                 f"{text(r)}")


_ = Dim
