"""Triton kernel objects of a generated wrapper as plain data (``graphcache``'s entries) and back.

A wrapper compiled for Triton (CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``) binds its kernel
names to objects of ``ember.codegen``: ``TritonKernel``/``SymbolicTritonKernel`` (a kernel's source, the name of
its ``@triton.jit`` function and its launch configuration: grid, block sizes, ``num_warps``, ``num_stages``),
``FirstLaunch`` (the launcher name rebound at the first aligned call), and under max-autotune ``Autotuned``
(candidates, each a kernel, a ``_Reordered`` kernel, a matmul ``_Template`` or the ATen ``_Fallback``). Each is
described by a small function of ``DESCRIBE`` (keyed by its class) as a record in one list per wrapper; a
record refers to others by index (``{"obj": i}``), so that a kernel shared by two names stays one object.

Reading (``Objects.bind``) makes the objects again from the records: a kernel from its source through
``triton_modules.load_module`` (Triton's own cache, keyed by the source, then supplies the binary at its first
launch); no lowering, code generation or tuning runs. An ``Autotuned`` whose choice the entry records
(``graphcache`` rewrites the entry once every choice of the graph is made) is bound to that choice itself;
without one it is rebuilt with all its candidates (its choice is then looked up in the autotune store, or timed).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from . import NotCacheable

# (module, class name) -> describe(v, objects) -> record; looked up by name, so a wrapper of C++ kernels never
# imports Triton
DESCRIBE: dict[tuple[str, str], Callable[[Any, "Objects"], dict]] = {}
BIND: dict[str, Callable[[dict, "Objects"], Any]] = {}


def _describes(module: str, *classes: str) -> Callable:
    def put(fn: Callable) -> Callable:
        for c in classes:
            DESCRIBE[(module, c)] = fn
        return fn
    return put


def _binds(kind: str) -> Callable:
    def put(fn: Callable) -> Callable:
        BIND[kind] = fn
        return fn
    return put


class Objects:
    """The kernel objects of one wrapper: ``describe`` (writing) or ``bind`` (reading) by index."""

    def __init__(self, records: list | None = None) -> None:
        self.records: list[dict] = [] if records is None else records
        self.index: dict[int, int] = {}
        self.keep: list[Any] = []           # described objects stay alive while their ids are keys
        self.built: dict[int, Any] = {}
        self.untuned: list[Any] = []        # Autotuned objects whose choice is not made yet

    @staticmethod
    def handles(v: Any) -> bool:
        t = type(v)
        return (t.__module__, t.__name__) in DESCRIBE

    def ref(self, v: Any) -> dict:
        """``{"obj": i}`` for ``v`` (described once); ``NotCacheable`` for an object no function describes."""
        i = self.index.get(id(v))
        if i is None:
            t = type(v)
            fn = DESCRIBE.get((t.__module__, t.__name__))
            if fn is None:
                raise NotCacheable(f"a Triton wrapper holds a {t.__name__}, which the cache cannot write")
            rec = fn(v, self)
            i = self.index[id(v)] = len(self.records)
            self.records.append(rec)
            self.keep.append(v)
        return {"obj": i}

    def bind(self, ref: Any) -> Any:
        i = int(ref["obj"])
        if i not in self.built:
            rec = self.records[i]
            self.built[i] = BIND[str(rec["kind"])](rec, self)
        return self.built[i]


# kernels ----------------------------------------------------------------------------------------------------
@_describes("ember.codegen.triton", "TritonKernel", "SymbolicTritonKernel")
def _kernel(k: Any, objs: Objects) -> dict:
    from ember.codegen.triton import SymbolicTritonKernel
    from ember.shapes import to_python
    cfg = k.cfg
    rec = {"kind": "triton", "source": k.source, "fname": k.fname, "name": k.name,
           "grid": list(cfg.grid), "xblock": cfg.xblock, "rblock": cfg.rblock, "num_warps": cfg.num_warps,
           "persistent": cfg.persistent, "int64": cfg.int64, "num_stages": cfg.num_stages,
           "checked": None if k.checked is None else list(k.checked)}
    if isinstance(k, SymbolicTritonKernel):
        rec.update(symbols=list(cfg.symbols), grid_expr=to_python(cfg.grid_expr), hints=list(k.hints))
    return rec


@_binds("triton")
def _bind_kernel(rec: dict, objs: Objects) -> Any:
    from ember.codegen.triton import SymbolicTritonKernel, TritonKernel
    from ember.codegen.triton_gen import LaunchConfig
    from ember.codegen.triton_helpers import interpreting
    cfg = LaunchConfig(tuple(int(g) for g in rec["grid"]), int(rec["xblock"]), int(rec["rblock"]),
                       int(rec["num_warps"]), bool(rec["persistent"]), bool(rec["int64"]), int(rec["num_stages"]),
                       tuple(str(s) for s in rec.get("symbols", ())))
    src, fname, name = str(rec["source"]), str(rec["fname"]), str(rec["name"])
    if not fname.isidentifier():
        raise NotCacheable(f"bad kernel function name {fname!r}")
    if cfg.symbols:
        import sympy
        # made with a constant grid expression, then given the entry's grid function (checked, not evaluated
        # as sympy): the program count over the symbols
        cfg = dataclasses.replace(cfg, grid_expr=sympy.Integer(1))
        k: Any = SymbolicTritonKernel(src, fname, cfg, name, interpreting(), tuple(int(h) for h in rec["hints"]))
        k.grid_fn = _grid_fn(cfg.symbols, str(rec["grid_expr"]))
    else:
        k = TritonKernel(src, fname, cfg, name, interpreting())
    if rec["checked"] is not None:
        k.set_checked([int(i) for i in rec["checked"]])
    return k


def _grid_fn(symbols: tuple[str, ...], expr: str) -> Callable[..., tuple]:
    """The grid function over the kernel's size symbols; the expression is checked as ``ember.deploy``'s
    packages check theirs (names, integer constants, arithmetic, max/min/abs only)."""
    from ember.deploy.package_cuda import _grid_fn as checked
    try:
        return checked({"symbols": list(symbols), "grid": expr})
    except ValueError as e:
        raise NotCacheable(str(e)) from None


@_describes("ember.codegen.wrapper", "FirstLaunch")
def _first(v: Any, objs: Objects) -> dict:
    return {"kind": "first", "kernel": objs.ref(v.kernel), "name": v.name}


@_binds("first")
def _bind_first(rec: dict, objs: Objects) -> Any:
    from ember.codegen.wrapper import FirstLaunch
    return FirstLaunch(objs.bind(rec["kernel"]), str(rec["name"]))        # its ``ns``: set after the exec


# max-autotune -----------------------------------------------------------------------------------------------
@_describes("ember.codegen.autotune", "Autotuned")
def _autotuned(v: Any, objs: Objects) -> dict:
    choice = None if v.chosen is None else next(i for i, c in enumerate(v.choices) if c is v.chosen)
    if choice is None:
        objs.untuned.append(v)
    return {"kind": "autotuned", "choices": [objs.ref(c) for c in v.choices], "key": v.key, "name": v.name,
            "scratch": list(v.scratch), "labels": list(v.labels), "choice": choice}


@_binds("autotuned")
def _bind_autotuned(rec: dict, objs: Objects) -> Any:
    choice = rec["choice"]
    if choice is not None:          # tuned before: that candidate alone, nothing timed or loaded for the others
        return objs.bind(rec["choices"][int(choice)])
    from ember.codegen.autotune import Autotuned
    return Autotuned([objs.bind(c) for c in rec["choices"]], str(rec["key"]), str(rec["name"]),
                     [int(i) for i in rec["scratch"]], [str(s) for s in rec["labels"]])


@_describes("ember.codegen.triton", "_Reordered")
def _reordered(v: Any, objs: Objects) -> dict:
    return {"kind": "reordered", "kernel": objs.ref(v.kernel), "perm": list(v.perm)}


@_binds("reordered")
def _bind_reordered(rec: dict, objs: Objects) -> Any:
    from ember.codegen.triton import _Reordered
    return _Reordered(objs.bind(rec["kernel"]), [int(i) for i in rec["perm"]])


@_describes("ember.codegen.triton_mm", "_Template")
def _template(v: Any, objs: Objects) -> dict:
    return {"kind": "template", "kernel": objs.ref(v.kernel), "shape": list(v.shape), "stride": list(v.stride),
            "dtype": str(v.dtype).replace("torch.", ""), "device": str(v.device), "store_mm": bool(v.store_mm),
            "nops": v.nops}


@_binds("template")
def _bind_template(rec: dict, objs: Objects) -> Any:
    from ember.codegen.triton_mm import _Template
    t = _Template.__new__(_Template)
    t.kernel = objs.bind(rec["kernel"])
    t.warmup = t.kernel.warmup
    t.shape, t.stride = tuple(int(s) for s in rec["shape"]), tuple(int(s) for s in rec["stride"])
    t.dtype, t.device = _dtype(rec["dtype"]), torch.device(str(rec["device"]))
    t.store_mm, t.nops, t.unused = bool(rec["store_mm"]), int(rec["nops"]), None
    return t


@_describes("ember.codegen.triton_mm", "_Fallback", "_PaddedFallback")
def _fallback(v: Any, objs: Objects) -> dict:
    from ember.deploy.package import PackageBuildError, _extern
    from ember.deploy.serialize import _enc
    try:
        target, extra, kwargs = _extern(v.target, ""), _enc(list(v.extra), {}), _enc(dict(v.kwargs), {})
    except (PackageBuildError, ValueError) as e:
        raise NotCacheable(f"a matmul choice cannot be written ({e})") from None
    rec = {"kind": "fallback", "target": target, "extra": extra, "kwargs": kwargs, "nops": v.nops,
           "kernel": None if v.kernel is None else objs.ref(v.kernel), "mm": v.mm, "bias_first": v.bias_first,
           "order": list(v.order)}
    if hasattr(v, "kp"):
        rec["padded"] = [v.k, v.n, v.kp, v.np]
    return rec


@_binds("fallback")
def _bind_fallback(rec: dict, objs: Objects) -> Any:
    from ember.codegen.triton_mm import _Fallback, _PaddedFallback
    from ember.deploy.package_load import _bind
    from ember.deploy.serialize import _dec
    padded = rec.get("padded")
    f = (_PaddedFallback if padded is not None else _Fallback).__new__(
        _PaddedFallback if padded is not None else _Fallback)
    f.target = _bind(rec["target"], [], None)
    f.extra, f.kwargs = tuple(_dec(rec["extra"], [])), _dec(rec["kwargs"], [])
    f.nops, f.mm, f.bias_first = int(rec["nops"]), str(rec["mm"]), bool(rec["bias_first"])
    f.kernel = None if rec["kernel"] is None else objs.bind(rec["kernel"])
    f.order = [str(x) for x in rec["order"]]
    if padded is not None:
        f.k, f.n, f.kp, f.np = (int(x) for x in padded)
    return f


def _dtype(name: str) -> torch.dtype:
    d = getattr(torch, name, None) if name.isidentifier() else None
    if not isinstance(d, torch.dtype):
        raise NotCacheable(f"bad dtype {name!r}")
    return d


__all__ = ["Objects", "DESCRIBE", "BIND"]
