"""``aot_compile(ep, path, device, options)``: an ``ExportedProgram`` compiled ahead of time into a package that
``load_package`` (``package_load.py``) runs in another process with no capture, no tracing and no compiling.

Compiling: the program's graph (its ``get_attr`` constants lifted to inputs after the user inputs) is traced on
ember's fake tensors, symbolic where the program has ``Dim``s (one size symbol per Dim, its range the Dim's),
decomposed to prims and given to the kernel compiler as one inference graph, exactly as ``ember.compile``'s
backend does. Kernels take the sizes as arguments, so one package serves every size the constraints allow.

The package is a directory (``package_format.py`` names its files):

- ``manifest.json``: the format version, ember's/torch's/Triton's/the C++ compiler's versions, the device kind
  (and the CPU's or GPU's identity the kernels were built for), and the SHA-256 of every other file;
- ``program.json``: the specs and constraints as ``ember.save`` writes them, the wrapper's source and the table
  of what each of its free names is bound to (a kernel, a ``torch.ops`` overload, an ember prim, a device, a
  constant value or tensor), all plain data;
- ``weights.bin``: the parameters, buffers and constants as raw bytes (``ember.save``'s tensor records);
- ``kernels/``: the kernels: C++ shared objects (CPU), or Triton's compiled binaries (cubin) and their launch
  metadata as JSON (CUDA).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import fx
from torch.utils._pytree import treespec_dumps

from . import package_format as F
from .program import ExportedProgram
from .serialize import _enc, _leaf_record, _target_name, _tensor_record

# a Dim's size while compiling (decisions use it: docs/dynamic-contract.md), the first the relations allow
# (odd sizes last: a program traced at an odd size may need one, e.g. x[:, :t // 2 * 2].reshape(...) records
# that 2*(t // 2) != t)
_HINTS = (16, 32, 8, 64, 24, 48, 12, 6, 4, 17, 33, 9, 65, 25, 13, 7, 5, 3)


class PackageBuildError(ValueError):
    """``aot_compile`` cannot package this program (what, why, what to do)."""


def aot_compile(ep: ExportedProgram, path: str | os.PathLike, device: str = "cpu", options: Any = None) -> str:
    """Compile ``ep`` for ``device`` ("cpu" or "cuda") into the package directory ``path``; returns ``path``."""
    from ..options import CompileOptions, make_options
    if device not in ("cpu", "cuda"):
        raise ValueError(f"ember.aot_compile: device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("ember.aot_compile: device='cuda' needs a CUDA device in this process; build the package "
                         "on the machine kind it will run on")
    _check_devices(ep, device)
    opts = options if isinstance(options, CompileOptions) else make_options(None, options)
    if device == "cuda" and (opts.max_autotune or opts.cuda_graphs):
        raise PackageBuildError("ember.aot_compile: CUDA packages do not hold autotuned matmul templates or CUDA "
                                "graphs yet; build without max_autotune/cuda_graphs (mode='default')")
    gm, consts = _lifted(ep)
    prim, sym = _prim_graph(ep, gm, consts)
    from ..codegen import compile_graph
    from ..errors import Unsupported
    from ..shapes import SymbolicUnsupported
    try:
        with torch.no_grad():
            compiled = compile_graph(prim, "inference", opts)
    except SymbolicUnsupported as e:     # ember.compile would compile static sizes; a package serves every size
        raise Unsupported(f"ember.aot_compile: the kernel compiler cannot compile this program with dynamic sizes "
                          f"yet: {e}", hint="export it without dynamic_shapes (or with fewer dynamic dims)") from None
    if not hasattr(compiled, "wrapper_globals"):
        raise PackageBuildError("ember.aot_compile: the program's graph cannot be lowered to kernels "
                                "(EMBER_LOGS=perf_hints says why); run it with ep.module() or ember.compile")
    relations = list(ep.relations)
    if sym is not None:
        from .symbolic import relations_of
        relations = _merge(relations, relations_of(sym))
    recorded: dict = {}
    if device == "cuda":        # each Triton kernel's arguments, to compile the variants a call may need
        from .package_cuda import record_launches
        recorded = record_launches(compiled, list(ep.state.values()) + _example_leaves(ep) + consts)
    out = Path(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent if str(out.parent) else "."))
    try:
        _write(ep, consts, compiled, relations, device, opts, tmp, recorded)
        _replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return os.fspath(path)


def _check_devices(ep: ExportedProgram, device: str) -> None:
    for name, t in ep.state.items():
        if t.device.type != device:
            raise PackageBuildError(f"ember.aot_compile: parameter/buffer {name} is on {t.device}, the package is "
                                    f"for {device}: export the model on {device} (model.to({device!r}))")
    for m in ep.user_inputs:
        if m.kind == "tensor" and torch.device(m.device).type != device:
            raise PackageBuildError(f"ember.aot_compile: the program was exported with inputs on {m.device}, the "
                                    f"package is for {device}: export it with inputs on {device}")


def _merge(a: list, b: list) -> list:
    seen = {json.dumps(r, sort_keys=True) for r in a}
    return a + [r for r in b if json.dumps(r, sort_keys=True) not in seen]


# the graph --------------------------------------------------------------------------------------------------
def _lifted(ep: ExportedProgram) -> tuple[fx.GraphModule, list[torch.Tensor]]:
    """A copy of the program's graph whose ``get_attr`` constants are placeholders after the user inputs, and
    whose non-tensor user inputs are their exported values (the program is specialized on them; the package
    checks each call's value and passes only the tensors)."""
    graph = fx.Graph()
    env: dict[fx.Node, Any] = {}
    consts: list[torch.Tensor] = []
    nodes = list(ep.graph.nodes)
    phs = [n for n in nodes if n.op == "placeholder"]
    values = iter(ep.user_inputs)
    for n, spec in zip(phs, ep.input_specs):
        meta = next(values) if spec.kind == "user_input" else None
        env[n] = meta.value if meta is not None and meta.kind == "value" else graph.node_copy(n, lambda x: env[x])
    for n in nodes:
        if n.op == "get_attr":
            obj: Any = ep.graph_module
            for p in n.target.split("."):
                obj = getattr(obj, p)
            env[n] = graph.placeholder(f"const{len(consts)}")
            consts.append(obj)
    for n in nodes:
        if n.op not in ("placeholder", "get_attr"):
            env[n] = graph.node_copy(n, lambda x: env[x])
    return fx.GraphModule(torch.nn.Module(), graph), consts


def _dims(ep: ExportedProgram) -> tuple[list[dict], dict[str, int]]:
    """Per user leaf ``{dim: Dim}``, and a size per Dim for compiling that satisfies the program's relations."""
    from .dims import Dim
    from .relations import evaluate
    names = sorted({s for m in ep.user_inputs if m.kind == "tensor" for s in m.shape if isinstance(s, str)})
    hints = None
    for cand in _HINTS:         # one size for every Dim where the relations allow it (they may ask ``a == b``)
        trial = {n: _clamp(cand, *ep.range_constraints.get(n, (2, None))) for n in names}
        if all(evaluate(r, trial) for r in ep.relations):
            hints = trial
            break
    if hints is None:           # compiled at sizes the program refuses, the package would refuse every call
        raise PackageBuildError(f"ember.aot_compile: no size in {list(_HINTS)} satisfies the program's "
                                "constraints, so it cannot be compiled for them; export with fewer dynamic dims")
    dims = []
    for m in ep.user_inputs:
        d = {}
        if m.kind == "tensor":
            for i, s in enumerate(m.shape):
                if isinstance(s, str):
                    lo, hi = ep.range_constraints.get(s, (2, None))
                    d[i] = Dim(s, lo, hi)
        dims.append(d)
    return dims, hints


def _clamp(v: int, lo: int | None, hi: int | None) -> int:
    v = max(v, lo or 2, 2)
    return min(v, hi) if hi is not None else v


def _example_leaves(ep: ExportedProgram, hints: dict | None = None) -> list[torch.Tensor]:
    """A tensor per tensor user input, each Dim at its compile-time size."""
    hints = _dims(ep)[1] if hints is None else hints
    out = []
    for m in ep.user_inputs:
        if m.kind == "tensor":
            shape = tuple(hints[s] if isinstance(s, str) else s for s in m.shape)
            out.append(torch.zeros(shape, dtype=m.dtype, device=m.device))
    return out


def _prim_graph(ep: ExportedProgram, gm: fx.GraphModule, consts: list[torch.Tensor]) -> tuple[fx.GraphModule, Any]:
    """The program traced on fake inputs (symbolic for Dims), functional and decomposed to ember's prims."""
    from ..autograd.aot import decompose_graph
    from ..autograd.functionalize import functionalize
    from ..autograd.trace import trace_aten
    from .symbolic import symbolic_leaves
    dims, hints = _dims(ep)
    leaves = _example_leaves(ep, hints)
    state = list(ep.state.values())
    names = [s.name for s in ep.input_specs if s.kind == "user_input"]
    tensor = [m.kind == "tensor" for m in ep.user_inputs]
    dims = [d for d, t in zip(dims, tensor) if t]
    names = [n for n, t in zip(names, tensor) if t]
    sym = symbolic_leaves(leaves, dims, names) if any(dims) else None
    with torch.no_grad():
        if sym is None:
            traced = trace_aten(lambda *a: gm(*a), state + leaves + consts, training=False)
        else:
            traced = trace_aten(lambda *a: gm(*a), state + sym.fakes + consts, training=False, fake_mode=sym.mode)
    func = functionalize(traced)
    prim = func.gm
    if sym is not None:
        prim.meta["ember_symbols"] = sym.table
    prim = decompose_graph(prim)
    if sym is not None:
        prim.meta["ember_symbols"] = sym.table
    prim.meta["ember_write_backs"] = list(func.write_backs)
    return prim, sym


# writing ----------------------------------------------------------------------------------------------------
def _write(ep: ExportedProgram, consts: list[torch.Tensor], compiled: Any, relations: list, device: str,
           opts: Any, d: Path, recorded: dict) -> None:
    blobs: list[bytes] = []
    offset = [0]
    (d / F.KERNELS).mkdir()
    table = _Table(d, blobs, offset, device, recorded)
    bound = {name: table.describe(name, v, compiled.wrapper_origins) for name, v in compiled.wrapper_globals.items()}
    program = {
        "wrapper": {"name": _wrapper_name(compiled.source), "source": compiled.source, "globals": bound},
        "input_specs": [[s.kind, s.name] for s in ep.input_specs],
        "output_specs": [[s.kind, s.target] for s in ep.output_specs],
        "state": [[name, _tensor_record(t, blobs, offset)] for name, t in ep.state.items()],
        "constants": [_tensor_record(t, blobs, offset) for t in consts],
        "parameters": sorted(ep.parameter_names),
        "in_spec": treespec_dumps(ep.in_spec), "out_spec": treespec_dumps(ep.out_spec),
        "user_inputs": [_leaf_record(m) for m in ep.user_inputs],
        "range_constraints": {k: [lo, hi] for k, (lo, hi) in ep.range_constraints.items()},
        "relations": relations,
        "tensors": table.tensors,
    }
    (d / F.PROGRAM).write_text(json.dumps(program))
    (d / F.WEIGHTS).write_bytes(b"".join(blobs))
    files = {}
    for p in sorted(d.rglob("*")):
        if p.is_file():
            files[p.relative_to(d).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    manifest = {"format": F.FORMAT, "format_version": F.FORMAT_VERSION, **F.versions(device),
                "device": device, "target": F.target(device), "options": repr(opts), "files": files}
    (d / F.MANIFEST).write_text(json.dumps(manifest, indent=1))


def _wrapper_name(source: str) -> str:
    first = source.split("\n", 1)[0]
    return first[len("def "):first.index("(")]


class _Table:
    """Describes each name the wrapper's source uses as plain data (``package_load`` binds it again)."""

    def __init__(self, d: Path, blobs: list[bytes], offset: list[int], device: str, recorded: dict) -> None:
        self.d, self.blobs, self.offset, self.device, self.recorded = d, blobs, offset, device, recorded
        self.tensors: list[dict] = []
        self.files: dict[str, str] = {}

    def describe(self, name: str, v: Any, origins: dict[str, Any]) -> dict:
        if name in F.BUILTINS:
            return {"builtin": name}
        if name in origins:
            return _extern(*origins[name])
        if isinstance(v, torch.device):
            return {"device": str(v)}
        if isinstance(v, torch._ops.OpOverload):     # the op an ``aten_extern`` call runs (no decomposition)
            return {"op": _target_name(v)}
        if isinstance(v, torch.Tensor):
            self.tensors.append(_tensor_record(v, self.blobs, self.offset))
            return {"tensor": len(self.tensors) - 1}
        cpp = getattr(v, "ember_cpp", None)
        if cpp is not None:
            return {"cpp": {**cpp, "so": self._copy(Path(cpp["so"]), ".so")}}
        if self.device == "cuda":
            from .package_cuda import describe_triton
            desc = describe_triton(v, self._copy_bytes, self.recorded)
            if desc is not None:
                return desc
        try:
            return {"value": _enc(v, {})}
        except ValueError:
            raise PackageBuildError(f"ember.aot_compile: the generated wrapper uses {name} = {v!r} "
                                    f"({type(v).__name__}), which a package cannot store yet") from None

    def _copy(self, src: Path, suffix: str) -> str:
        data = src.read_bytes()
        return self._copy_bytes(data, suffix)

    def _copy_bytes(self, data: bytes, suffix: str) -> str:
        rel = f"{F.KERNELS}/{hashlib.sha256(data).hexdigest()[:32]}{suffix}"
        if rel not in self.files:
            (self.d / rel).write_bytes(data)
            self.files[rel] = rel
        return rel


def _extern(target: Any, prim: str) -> dict:
    """An extern call's target: a ``torch.ops`` overload, a prim's ATen implementation, or ``empty_strided``."""
    if isinstance(target, torch._ops.OpOverload):
        return {"op": _target_name(target)}
    from ..decomp.core import PRIMS
    p = PRIMS.get(prim)
    if p is None or p.impl is not target:
        p = next((q for q in PRIMS.values() if q.impl is target), None)
    if p is not None:
        name = getattr(p.impl, "__name__", "")
        if name.isidentifier() and getattr(torch, name, None) is p.impl:
            return {"torch_fn": name}       # torch.mm: bound without importing ember's prims (sympy) to load
        return {"prim_impl": p.name}
    if target is torch.empty_strided:
        return {"builtin": "empty_strided"}
    raise PackageBuildError(f"ember.aot_compile: the wrapper calls {target!r}, which a package cannot name yet")


def _replace_dir(tmp: Path, out: Path) -> None:
    """Move the finished package into place; an existing package there is replaced, anything else refused."""
    if out.exists():
        if not (out.is_dir() and (out / F.MANIFEST).is_file()):
            raise PackageBuildError(f"ember.aot_compile: {out} exists and is not an ember package; choose another "
                                    "path or remove it")
        old = out.with_name(f".{out.name}.old{os.getpid()}")
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
        return
    os.replace(tmp, out)
