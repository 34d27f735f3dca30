"""``save``/``load``: an ``ExportedProgram`` as one file of plain data.

Layout: a text line ``EMBER-PROGRAM v<N>``, an 8-byte little-endian header length, the header (JSON: graph,
specs, tensor table), the tensors' raw bytes, and a SHA-256 of everything before it. Loading checks the version
line, then the hash (a truncated or altered file is refused), then rebuilds the graph: op names resolve only to
``torch.ops`` overloads, ember's prims or a short list of ``operator`` functions; node and attribute names are
regenerated, never taken from the file; tensors are rebuilt from bytes with their dtype and shape. Nothing from
the file is unpickled, evaluated or imported.
"""
from __future__ import annotations

import hashlib
import json
import operator
import os
import re
import struct
from typing import Any

import torch
from torch import fx
from torch.utils._pytree import treespec_dumps, treespec_loads

from .program import ExportedProgram, InputSpec, LeafMeta, OutputSpec

FORMAT_VERSION = 1
_MAGIC = b"EMBER-PROGRAM v"
_IDENT = re.compile(r"^(?!__)[A-Za-z_][A-Za-z0-9_]*$")   # identifiers, no dunders
_PY_TARGETS = {f"operator.{n}": getattr(operator, n) for n in (
    "getitem", "add", "sub", "mul", "floordiv", "truediv", "mod", "neg", "pow", "eq", "ne", "lt", "le", "gt",
    "ge", "and_", "or_", "not_")}
_PY_NAMES = {v: k for k, v in _PY_TARGETS.items()}


class ProgramFormatError(ValueError):
    """The file is not an ember program this version can load (corrupt, truncated, or another format)."""


class UnregisteredTypeError(ProgramFormatError):
    """The program's inputs or outputs are a container type (a transformers ``ModelOutput``, a dataclass) that
    is not registered in this process: its module was not imported. ember imports nothing a file names."""


def load_spec(text: str, path: Any) -> Any:
    """A pytree spec from ``treespec_dumps`` text; a container type this process does not know yet is a clear
    error that names the module to import first (the file is data: no module it names is imported)."""
    from torch.utils._pytree import SUPPORTED_SERIALIZED_TYPES
    try:
        return treespec_loads(text)
    except NotImplementedError:
        known = {v.serialized_type_name for v in SUPPORTED_SERIALIZED_TYPES.values()}
        missing = sorted(n for n in _spec_types(json.loads(text)[1]) if n not in known)
        if not missing:
            raise
        mods = sorted({n.rpartition(".")[0] for n in missing})
        raise UnregisteredTypeError(
            f"{os.fspath(path)}: the program's inputs or outputs contain {', '.join(missing)}, a type not "
            f"registered in this process; import {', '.join(mods)} before loading it (ember imports no module "
            "that a file names)") from None


def _spec_types(node: dict) -> set[str]:
    out = {node["type"]} if node.get("type") else set()
    for c in node.get("children_spec", []):
        out |= _spec_types(c)
    return out


def spec_modules(spec: Any) -> list[str]:
    """The modules (other than builtins and collections) whose types appear in ``spec``: what a process must
    import before it loads a program with that spec."""
    names = _spec_types(json.loads(treespec_dumps(spec))[1])
    return sorted({n.rpartition(".")[0] for n in names} - {"builtins", "collections"})


# values -------------------------------------------------------------------------------------------------------
def _enc(v: Any, index: dict[fx.Node, int]) -> Any:
    if isinstance(v, fx.Node):
        return {"node": index[v]}
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return {"int": str(v)}
    if isinstance(v, float):
        return {"float": v.hex()}
    if isinstance(v, complex):
        return {"complex": [v.real.hex(), v.imag.hex()]}
    if isinstance(v, (list, tuple)):
        return {"list" if isinstance(v, list) else "tuple": [_enc(x, index) for x in v]}
    if isinstance(v, dict) and all(isinstance(k, str) for k in v):
        return {"dict": {k: _enc(x, index) for k, x in v.items()}}
    for kind, cls in (("dtype", torch.dtype), ("device", torch.device), ("layout", torch.layout),
                      ("memory_format", torch.memory_format)):
        if isinstance(v, cls):
            return {kind: str(v).replace("torch.", "")}
    raise ValueError(f"ember.save: cannot save a graph argument of type {type(v).__name__} ({v!r})")


def _torch_attr(kind: str, name: str) -> Any:
    if kind == "device":
        return torch.device(name)
    if not _IDENT.match(name):
        raise ProgramFormatError(f"ember.load: bad {kind} name {name!r}")
    value = getattr(torch, name, None)
    cls = {"dtype": torch.dtype, "layout": torch.layout, "memory_format": torch.memory_format}[kind]
    if not isinstance(value, cls):
        raise ProgramFormatError(f"ember.load: unknown {kind} {name!r}")
    return value


def _dec(v: Any, nodes: list[fx.Node]) -> Any:
    if v is None or isinstance(v, (bool, str)):
        return v
    if not isinstance(v, dict) or len(v) != 1:
        raise ProgramFormatError(f"ember.load: bad value {v!r}")
    (kind, x), = v.items()
    if kind == "node":
        return nodes[int(x)]
    if kind == "int":
        return int(x)
    if kind == "float":
        return float.fromhex(x)
    if kind == "complex":
        return complex(float.fromhex(x[0]), float.fromhex(x[1]))
    if kind in ("list", "tuple"):
        items = [_dec(i, nodes) for i in x]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {str(k): _dec(i, nodes) for k, i in x.items()}
    if kind in ("dtype", "device", "layout", "memory_format"):
        return _torch_attr(kind, x)
    raise ProgramFormatError(f"ember.load: unknown value kind {kind!r}")


# targets ------------------------------------------------------------------------------------------------------
def _target_name(t: Any) -> str:
    from ember.decomp.core import Prim
    from ember.decomp.interp import _getitem
    if t is _getitem:           # a decomposed graph's item of a multi-output prim (var_mean): operator.getitem
        t = operator.getitem
    if isinstance(t, torch._ops.OpOverload):
        return "op:" + t.name() + ("" if "." in t.name() else ".default")
    if isinstance(t, Prim):
        return "prim:" + t.name
    if t in _PY_NAMES:
        return "py:" + _PY_NAMES[t]
    raise ValueError(f"ember.save: cannot save a call to {t!r}: only torch.ops overloads, ember prims and "
                     "operator functions are saved")


def _resolve(name: str) -> Any:
    kind, _, rest = name.partition(":")
    if kind == "py" and rest in _PY_TARGETS:
        return _PY_TARGETS[rest]
    if kind == "prim":
        from ember.decomp.core import PRIMS
        import ember.decomp  # noqa: F401  (registers the prims)
        if rest in PRIMS:
            return PRIMS[rest]
    if kind == "op":
        ns, _, qual = rest.partition("::")
        op, _, overload = qual.partition(".")
        if all(_IDENT.match(p) for p in (ns, op, overload)):
            packet = getattr(getattr(torch.ops, ns, None), op, None)
            if isinstance(packet, torch._ops.OpOverloadPacket):
                ov = getattr(packet, overload, None)
                if isinstance(ov, torch._ops.OpOverload):
                    return ov
    raise ProgramFormatError(f"ember.load: unknown operation {name!r} (not a torch.ops overload in this "
                             f"PyTorch {torch.__version__}, nor an ember prim)")


# graph --------------------------------------------------------------------------------------------------------
def _tensor_meta(v: Any) -> dict | None:
    if isinstance(v, torch.Tensor):
        return {"dtype": str(v.dtype).replace("torch.", ""), "shape": [int(s) for s in v.shape]}
    return None


def _encode_graph(gm: fx.GraphModule, consts: dict[str, int]) -> list[dict]:
    index: dict[fx.Node, int] = {}
    out = []
    for i, n in enumerate(gm.graph.nodes):
        index[n] = i
        rec: dict[str, Any] = {"op": n.op, "name": n.name}
        if n.op == "call_function":
            rec["target"] = _target_name(n.target)
        elif n.op == "get_attr":
            rec["target"] = consts[n.target]
        elif n.op not in ("placeholder", "output"):
            raise ValueError(f"ember.save: cannot save a graph node of kind {n.op!r}")
        rec["args"] = _enc(tuple(n.args), index)
        rec["kwargs"] = _enc(dict(n.kwargs), index)
        meta = _tensor_meta(n.meta.get("val"))
        if meta:
            rec["meta"] = meta
        out.append(rec)
    return out


def _decode_graph(recs: list[dict], consts: list[torch.Tensor]) -> fx.GraphModule:
    root = torch.nn.Module()
    graph = fx.Graph()
    nodes: list[fx.Node] = []
    for i, rec in enumerate(recs):
        op = rec.get("op")
        if op == "placeholder":
            n = graph.placeholder(f"arg{i}")
        elif op == "get_attr":
            name = f"const{int(rec['target'])}"
            setattr(root, name, consts[int(rec["target"])])
            n = graph.get_attr(name)
        elif op == "call_function":
            n = graph.call_function(_resolve(rec["target"]), _dec(rec["args"], nodes), _dec(rec["kwargs"], nodes))
        elif op == "output":
            n = graph.output(_dec(rec["args"], nodes)[0])
        else:
            raise ProgramFormatError(f"ember.load: bad node kind {op!r}")
        if isinstance(rec.get("meta"), dict):
            n.meta["ember_tensor_meta"] = rec["meta"]
        nodes.append(n)
    return fx.GraphModule(root, graph)


# tensors ------------------------------------------------------------------------------------------------------
def _tensor_record(t: torch.Tensor, blobs: list[bytes], offset: list[int]) -> dict:
    c = t.detach().contiguous().cpu()
    data = c.reshape(-1).view(torch.uint8).numpy().tobytes() if c.numel() else b""
    rec = {"dtype": str(t.dtype).replace("torch.", ""), "shape": [int(s) for s in t.shape],
           "device": str(t.device), "offset": offset[0], "nbytes": len(data), "requires_grad": t.requires_grad}
    blobs.append(data)
    offset[0] += len(data)
    return rec


def _tensor_from(rec: dict, blob: memoryview) -> torch.Tensor:
    dtype = _torch_attr("dtype", rec["dtype"])
    shape = [int(s) for s in rec["shape"]]
    start, n = int(rec["offset"]), int(rec["nbytes"])
    if start < 0 or n < 0 or start + n > len(blob):
        raise ProgramFormatError("ember.load: a tensor lies outside the file's data")
    numel = 1
    for s in shape:
        numel *= s
    if n != numel * torch.empty((), dtype=dtype).element_size():
        raise ProgramFormatError("ember.load: a tensor's byte size does not match its dtype and shape")
    flat = torch.frombuffer(bytearray(blob[start:start + n]), dtype=torch.uint8) if n else torch.empty(0, dtype=torch.uint8)
    t = flat.view(dtype).reshape(shape)
    device = torch.device(rec["device"])
    return t.to(device) if device.type != "cpu" else t


# program ------------------------------------------------------------------------------------------------------
def _leaf_record(m: LeafMeta) -> dict:
    if m.kind == "value":
        return {"kind": "value", "value": _enc(m.value, {})}
    return {"kind": "tensor", "dtype": str(m.dtype).replace("torch.", ""), "device": m.device,
            "shape": [s if isinstance(s, str) else int(s) for s in m.shape]}


def _leaf_from(rec: dict) -> LeafMeta:
    if rec["kind"] == "value":
        return LeafMeta("value", value=_dec(rec["value"], []))
    return LeafMeta("tensor", _torch_attr("dtype", rec["dtype"]), str(torch.device(rec["device"])),
                    tuple(s if isinstance(s, str) else int(s) for s in rec["shape"]))


def save(ep: ExportedProgram, path: str | os.PathLike) -> None:
    """Write ``ep`` to ``path`` (one file; see the module docstring)."""
    import ember
    blobs: list[bytes] = []
    offset = [0]
    consts = {n.target: i for i, n in enumerate(n for n in ep.graph.nodes if n.op == "get_attr")}
    const_recs = [None] * len(consts)
    for target, i in consts.items():
        const_recs[i] = _tensor_record(_get_attr(ep.graph_module, target), blobs, offset)
    header = {
        "format_version": FORMAT_VERSION, "ember": ember.__version__, "torch": torch.__version__,
        "graph": _encode_graph(ep.graph_module, consts),
        "input_specs": [[s.kind, s.name] for s in ep.input_specs],
        "output_specs": [[s.kind, s.target] for s in ep.output_specs],
        "state": [[name, _tensor_record(t, blobs, offset)] for name, t in ep.state.items()],
        "parameters": sorted(ep.parameter_names), "constants": const_recs,
        "in_spec": treespec_dumps(ep.in_spec), "out_spec": treespec_dumps(ep.out_spec),
        "user_inputs": [_leaf_record(m) for m in ep.user_inputs],
        "range_constraints": {k: [lo, hi] for k, (lo, hi) in ep.range_constraints.items()},
        "relations": ep.relations,
    }
    head = json.dumps(header).encode()
    body = _MAGIC + str(FORMAT_VERSION).encode() + b"\n" + struct.pack("<Q", len(head)) + head + b"".join(blobs)
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(body + hashlib.sha256(body).digest())
    os.replace(tmp, path)


def _get_attr(gm: fx.GraphModule, target: str) -> torch.Tensor:
    obj: Any = gm
    for p in target.split("."):
        obj = getattr(obj, p)
    return obj


def _read(path: str | os.PathLike) -> tuple[dict, memoryview]:
    with open(path, "rb") as f:
        data = f.read()
    line, nl, rest = data.partition(b"\n")
    if not line.startswith(_MAGIC) or not nl:
        raise ProgramFormatError(f"ember.load: {os.fspath(path)} is not an ember program file")
    version = line[len(_MAGIC):].decode(errors="replace")
    if version != str(FORMAT_VERSION):
        raise ProgramFormatError(f"ember.load: {os.fspath(path)} has format version {version}; this ember "
                                 f"({__import__('ember').__version__}) reads version {FORMAT_VERSION}: re-export "
                                 "the model with this version")
    if len(data) < len(line) + 1 + 8 + 32 or hashlib.sha256(data[:-32]).digest() != data[-32:]:
        raise ProgramFormatError(f"ember.load: {os.fspath(path)} is truncated or corrupt (its checksum does not "
                                 "match)")
    (n,) = struct.unpack("<Q", rest[:8])
    try:
        header = json.loads(rest[8:8 + n])
    except ValueError as e:
        raise ProgramFormatError(f"ember.load: {os.fspath(path)} has an unreadable header: {e}") from None
    return header, memoryview(rest)[8 + n:len(rest) - 32]


def load(path: str | os.PathLike) -> ExportedProgram:
    """Read a program written by ``save``; runs no code from the file."""
    header, blob = _read(path)
    try:
        consts = [_tensor_from(r, blob) for r in header["constants"]]
        gm = _decode_graph(header["graph"], consts)
        state = {}
        params = set(header["parameters"])
        for name, rec in header["state"]:
            t = _tensor_from(rec, blob)
            state[name] = torch.nn.Parameter(t, requires_grad=bool(rec["requires_grad"])) if name in params else t
        ranges = {k: (lo, hi) for k, (lo, hi) in header["range_constraints"].items()}
        return ExportedProgram(
            gm, [InputSpec(k, n) for k, n in header["input_specs"]],
            [OutputSpec(k, t) for k, t in header["output_specs"]], state,
            load_spec(header["in_spec"], path), load_spec(header["out_spec"], path),
            [_leaf_from(r) for r in header["user_inputs"]], ranges, frozenset(params),
            list(header.get("relations", [])))
    except (KeyError, TypeError, IndexError) as e:
        raise ProgramFormatError(f"ember.load: {os.fspath(path)} is malformed: {type(e).__name__}: {e}") from None
