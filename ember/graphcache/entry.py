"""A whole-graph cache entry as plain data (``graphcache``'s format) and back.

Layout: ``MAGIC``, the JSON header's length (8 bytes, little endian), the JSON header, then the raw bytes of the
wrapper's constant tensors. The header names the variant's kind (``inference``/``training``), each compiled
graph (``fwd``, and ``bwd`` for training: wrapper source, its function's name, the table of its free names as
``ember.deploy.package`` describes them, and the backend's ``info`` for finishing it: CUDA graphs), the runtime
metadata, the output structure (``treespec_dumps``) and the relations tracing added (sympy trees as JSON, over
the table's symbol names). Nothing is unpickled; the only code run is the wrapper source ember generated.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Callable

import sympy
import torch

from .. import diskcache
from ..deploy.package import _Table
from . import MAGIC, FORMAT_VERSION, NotCacheable, table_delta
from .kernels import Objects

_KINDS = {"inference": ("fwd",), "training": ("fwd", "bwd")}
_RAW = {"inference": "inference", "forward": "fwd", "backward": "bwd"}


# writing ----------------------------------------------------------------------------------------------------
def dump_entry(built: Any, spec: Any, recorded: list, binder: Any, snap: Any, training: bool,
               untuned: list | None = None, rebuildable: Callable[[], Any] | None = None) -> bytes:
    """The entry's bytes; ``untuned`` (when given) receives the ``Autotuned`` kernels whose choice is not made
    yet (the entry is written again once they are: ``graphcache``)."""
    untuned = [] if untuned is None else untuned
    from torch.utils._pytree import treespec_dumps

    from ember.autograd.runtime import CompiledGraphs
    kind = "training" if training else "inference"
    if training != isinstance(built, CompiledGraphs):
        raise NotCacheable("the build is not of the expected kind")
    if training and len(built.diff_outputs) > 1 and rebuildable is not None:
        # a call whose loss leaves some of them unused runs a backward variant compiled from the backward's
        # FX graph, which an entry does not hold: a hit builds it again when needed (``rebuild.py``)
        rebuildable()
    raw = {}
    for k, fn, info in recorded:
        slot = "fwd" if k in ("inference", "forward") else "bwd"
        if slot in raw:
            raise NotCacheable(f"the build compiled more than one {k} graph")
        raw[slot] = (fn, info)
    if set(raw) != set(_KINDS[kind]):
        raise NotCacheable("the build did not compile its graphs through the kernel compiler")
    blobs: list[bytes] = []
    offset = [0]
    graphs = {slot: _describe(fn, info, blobs, offset, untuned) for slot, (fn, info) in raw.items()}
    try:
        out_spec = treespec_dumps(spec)
    except Exception as e:      # noqa: BLE001 - an output structure pytree cannot write
        raise NotCacheable(f"the output structure cannot be written ({e})") from None
    relations = [_enc_expr(e) for e in table_delta(binder, snap)]
    header = {"format": "ember-graph", "version": FORMAT_VERSION, "kind": kind, "graphs": graphs,
              "meta": _meta(built), "out_spec": out_spec, "relations": relations}
    head = json.dumps(header).encode()
    return MAGIC + struct.pack("<Q", len(head)) + head + b"".join(blobs)


def _meta(built: Any) -> dict:
    aliases = []
    for a in built.aliases:
        if a.dynamic is not None:
            raise NotCacheable("an output views an input with a symbolic layout")
        aliases.append([a.output, a.input, list(a.size), list(a.stride), a.offset, a.requires_grad,
                        None if a.base_layout is None else [list(a.base_layout[0]), list(a.base_layout[1])],
                        bool(a.view)])
    m = {"num_user_outputs": built.num_user_outputs, "write_backs": [list(w) for w in built.write_backs],
         "aliases": aliases, "grad_after": bool(built.grad_after)}
    if hasattr(built, "diff_outputs"):
        m.update(num_saved=built.num_saved, diff_outputs=list(built.diff_outputs),
                 non_diff_outputs=list(built.non_diff_outputs), tangent_contiguous=list(built.tangent_contiguous),
                 grad_tangents=[sorted(g) for g in built.grad_tangents], dynamic=bool(built.dynamic),
                 multi_output_views=sorted(built.multi_output_views), version_inputs=list(built.version_inputs),
                 version_outputs=list(built.version_outputs), unconnected=list(built.unconnected))
    return json.loads(json.dumps(m))        # fails here (not cached) on anything that is not plain data


def _describe(fn: Any, info: Any, blobs: list[bytes], offset: list[int], untuned: list) -> dict:
    from ember.deploy.package import PackageBuildError
    source, table = getattr(fn, "source", None), getattr(fn, "wrapper_globals", None)
    if not isinstance(source, str) or table is None:
        raise NotCacheable("a graph is not a generated wrapper (it runs as an FX graph or another backend's code)")
    refs = _Refs(blobs, offset)
    try:
        bound = {name: refs.describe(name, v, fn.wrapper_origins) for name, v in table.items()}
    except PackageBuildError as e:
        raise NotCacheable(str(e).replace("ember.aot_compile: ", "")) from None
    untuned.extend(refs.objects.untuned)
    return {"name": fn.__name__, "source": source, "globals": bound, "steal": hasattr(fn, "call_list"),
            "info": info, "tensors": refs.tensors, "objects": refs.objects.records}


class _Refs(_Table):
    """``ember.deploy.package``'s description of a wrapper's free names, with C++ kernels referenced by their
    entry in the kernel store (not copied) and tensors keeping their strides."""

    def __init__(self, blobs: list[bytes], offset: list[int]) -> None:
        super().__init__(Path("."), blobs, offset, "cpu", {})
        self.store = diskcache.store("cpp")
        self.objects = Objects()

    def describe(self, name: str, v: Any, origins: dict) -> dict:
        if Objects.handles(v):          # a Triton kernel (or an autotuned choice between kernels)
            return self.objects.ref(v)
        if isinstance(v, torch.Tensor):
            if any(st == 0 and n > 1 for st, n in zip(v.stride(), v.shape)):
                raise NotCacheable(f"the constant {name} is an expanded tensor")
            desc = super().describe(name, v, origins)
            self.tensors[-1]["stride"] = list(v.stride())
            return desc
        return super().describe(name, v, origins)

    def _copy(self, src: Path, suffix: str) -> str:
        if src.parent != self.store.path or not self.store.check(src.name):
            raise NotCacheable(f"the kernel {src} is not a valid entry of the kernel store")
        return src.name


# reading ----------------------------------------------------------------------------------------------------
def load_entry(data: bytes, binder: Any, finish: Callable[[Any, str, Any], Any],
               rebuild: Callable[[], Any] | None = None) -> tuple:
    """``(built, out_spec)`` as AOT autograd's build returns them; ``NotCacheable`` when unusable.
    ``rebuild()``: the ``rebuild.Rebuilder`` a training graph with several differentiable outputs needs."""
    try:
        header, blob = _split(data)
        kind = header["kind"]
        graphs = {slot: _wrapper(header["graphs"][slot], blob) for slot in _KINDS[kind]}
        sources = [(header["graphs"][slot]["name"], header["graphs"][slot]["source"]) for slot in _KINDS[kind]]
        built = _built(kind, header["meta"], graphs, finish, rebuild, sources)
        from torch.utils._pytree import treespec_loads
        spec = treespec_loads(header["out_spec"])
        relations = [_dec_expr(r, binder) for r in header["relations"]]
    except NotCacheable:
        raise
    except Exception as e:      # noqa: BLE001 - a malformed entry (or a kernel gone) is a miss, never a crash
        raise NotCacheable(f"{type(e).__name__}: {e}") from None
    for fact in relations:
        if not bool(binder.table.hint(fact)):
            raise NotCacheable(f"the relation {fact} does not hold at this call's sizes")
    for fact in relations:      # the guards of a symbolic graph check what its compile relied on
        binder.table.decide(fact)
    return built, spec


def _split(data: bytes) -> tuple[dict, memoryview]:
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
        raise NotCacheable("not a graph cache entry")
    (n,) = struct.unpack_from("<Q", data, len(MAGIC))
    start = len(MAGIC) + 8
    header = json.loads(data[start:start + n])
    if header.get("format") != "ember-graph" or header.get("version") != FORMAT_VERSION:
        raise NotCacheable(f"format {header.get('format')} version {header.get('version')}")
    return header, memoryview(data)[start + n:]


def _wrapper(rec: dict, blob: memoryview) -> tuple[Any, Any]:
    from ember.deploy.package_load import _bind, _Kernels
    from ember.deploy.serialize import _tensor_from
    tensors = []
    for r in rec["tensors"]:
        t = _tensor_from(r, blob)
        stride = tuple(int(s) for s in r.get("stride", t.stride()))
        if stride != t.stride():
            t = torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device).copy_(t)
        tensors.append(t)
    store = diskcache.store("cpp")
    so = {d["cpp"]["so"] for d in rec["globals"].values() if isinstance(d, dict) and "cpp" in d}
    files = {}
    for name in so:
        b = store.read(str(name)) if "/" not in str(name) else None
        if b is None:
            raise NotCacheable(f"its kernel {name} is missing or invalid in the kernel store")
        files[name] = b
    kernels = _Kernels(store.path, files, "cpu")
    objects = Objects(list(rec.get("objects", [])))
    name, source = str(rec["name"]), rec["source"]
    ns: dict[str, Any] = {}
    for key, desc in rec["globals"].items():
        ns[key] = objects.bind(desc) if isinstance(desc, dict) and "obj" in desc else _bind(desc, tensors, kernels)
    exec(compile(source, f"<ember wrapper {name}>", "exec"), ns)       # noqa: S102 - ember's generated source
    for v in objects.built.values():
        if hasattr(v, "ns") and hasattr(v, "kernel"):      # a FirstLaunch rebinds its name in this namespace
            v.ns = ns
    fn = ns[name]
    fn.source, fn.kernel_sources = source, []
    if rec.get("steal"):
        fn.call_list = ns[f"{name}__list"]
    return fn, rec.get("info")


def _built(kind: str, m: dict, graphs: dict, finish: Callable[[Any, str, Any], Any],
           rebuild: Callable[[], Any] | None = None, sources: list | None = None) -> Any:
    from ember.autograd.runtime import AliasInfo, CompiledGraphs
    aliases = [AliasInfo(o, i, tuple(sz), tuple(st), off, rg,
                         None if bl is None else (tuple(bl[0]), tuple(bl[1])), view=view)
               for o, i, sz, st, off, rg, bl, view in m["aliases"]]
    write_backs = [tuple(w) for w in m["write_backs"]]
    if kind == "inference":
        from ember.autograd.aot import _Inference
        fwd = finish(graphs["fwd"][0], "inference", graphs["fwd"][1])
        return _Inference(fwd, m["num_user_outputs"], write_backs, aliases, m["grad_after"])
    fwd = finish(graphs["fwd"][0], "forward", graphs["fwd"][1])
    bwd = finish(graphs["bwd"][0], "backward", graphs["bwd"][1])
    cls, extra = CompiledGraphs, {}
    if len(m["diff_outputs"]) > 1:
        if rebuild is None:
            raise NotCacheable("a training graph with several differentiable outputs cannot be built again here")
        from .rebuild import LazyBackward
        cls, extra = LazyBackward, {"rebuild": rebuild(), "sources": sources}
    g = cls(fwd, bwd, m["num_user_outputs"], write_backs, m["num_saved"], m["diff_outputs"],
            m["non_diff_outputs"], m["tangent_contiguous"], aliases, m["grad_after"],
            grad_tangents=[frozenset(x) for x in m["grad_tangents"]], dynamic=m["dynamic"],
            multi_output_views=frozenset(m["multi_output_views"]), **extra)
    g.version_inputs, g.version_outputs = list(m["version_inputs"]), list(m["version_outputs"])
    g.unconnected = list(m["unconnected"])
    return g


# relations: sympy trees as JSON -----------------------------------------------------------------------------
_FUNCS = {c.__name__: c for c in (sympy.Add, sympy.Mul, sympy.Pow, sympy.Mod, sympy.Max, sympy.Min, sympy.floor,
                                  sympy.ceiling, sympy.Abs, sympy.Eq, sympy.Ne, sympy.Lt, sympy.Le, sympy.Gt,
                                  sympy.Ge, sympy.And, sympy.Or, sympy.Not)}
_FUNCS.update({"StrictLessThan": sympy.Lt, "LessThan": sympy.Le, "StrictGreaterThan": sympy.Gt,
               "GreaterThan": sympy.Ge, "Equality": sympy.Eq, "Unequality": sympy.Ne})


def _enc_expr(e: Any) -> Any:
    if isinstance(e, sympy.Symbol):
        return {"sym": e.name}
    if isinstance(e, sympy.Integer):
        return {"int": str(int(e))}
    if isinstance(e, sympy.Rational):
        return {"rat": [str(int(e.p)), str(int(e.q))]}
    if isinstance(e, sympy.logic.boolalg.BooleanAtom):
        return {"bool": bool(e)}
    name = type(e).__name__
    if name not in _FUNCS:
        raise NotCacheable(f"the relation {e} uses {name}, which the cache cannot write")
    return {"op": name, "args": [_enc_expr(a) for a in e.args]}


def _dec_expr(t: Any, binder: Any) -> Any:
    if "sym" in t:
        by_name = {s.name: s for s in binder.table.symbols}
        return by_name[str(t["sym"])]
    if "int" in t:
        return sympy.Integer(int(t["int"]))
    if "rat" in t:
        return sympy.Rational(int(t["rat"][0]), int(t["rat"][1]))
    if "bool" in t:
        return sympy.true if t["bool"] else sympy.false
    return _FUNCS[str(t["op"])](*[_dec_expr(a, binder) for a in t["args"]])
