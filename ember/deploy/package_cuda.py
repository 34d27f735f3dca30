"""CUDA packages: Triton kernels stored as compiled binaries (cubin) with their launch metadata, and loaded
with Triton's driver, without importing the kernels' Python source or compiling anything.

Triton specializes a compiled kernel on its arguments: each pointer 16-byte aligned or not, each int divisible
by 16 or not (or equal to 1). ``record_launches`` runs the compiled wrapper once on example inputs and notes
each kernel's arguments; ``describe_triton`` then compiles, besides the variant that run used, a variant whose
ints are not divisible by 16 and one whose pointers are not aligned either (valid for any arguments), and
stores each variant's cubin, Triton's metadata JSON, its specialization (signature, constants, attributes) and,
where Triton built one, the C launcher module for its signature. At load a kernel picks, per call, the most
specialized variant whose assumptions hold for the arguments. Tied to the Triton version the manifest records.
"""
from __future__ import annotations

import ast
import json
from types import SimpleNamespace
from typing import Any, Callable

import torch

_GRID_NODES = (ast.Expression, ast.Tuple, ast.BinOp, ast.UnaryOp, ast.Name, ast.Load, ast.Constant, ast.Call,
               ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub)


# building ---------------------------------------------------------------------------------------------------
def _kernel_of(v: Any) -> Any:
    from ..codegen.triton import TritonKernel
    from ..codegen.wrapper import FirstLaunch
    if isinstance(v, FirstLaunch):
        v = v.kernel
    return v if isinstance(v, TritonKernel) else None


def record_launches(compiled: Any, inputs: list) -> dict[int, tuple]:
    """Run ``compiled`` once on ``inputs``; each Triton kernel's arguments (by the kernel's id)."""
    ns = compiled.__globals__
    seen: dict[int, tuple] = {}
    saved = dict(ns)
    for name, v in saved.items():
        k = _kernel_of(v)
        if k is None:
            continue

        def proxy(*args: Any, _v: Any = v, _k: Any = k) -> None:
            seen.setdefault(id(_k), args)
            _v(*args)
        ns[name] = proxy
    try:
        with torch.no_grad():
            compiled(*inputs)
        torch.cuda.synchronize()
    finally:
        ns.update(saved)
    return seen


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    base = torch.empty(t.numel() + 16, dtype=t.dtype, device=t.device)
    return base[1:1 + t.numel()].view(t.shape) if t.element_size() < 16 else t


def _variants(k: Any, args: tuple) -> list:
    """The compiled kernels for: ``args`` as recorded, ints not divisible by 16, and pointers not aligned."""
    n = getattr(k, "nsyms", 0)
    tensors, ints = list(args[:len(args) - n]), list(args[len(args) - n:])
    odd = [v if v % 16 else v + 1 for v in ints]
    odd = [v + 2 if v == 1 else v for v in odd]
    out = []
    for call in (tensors + ints, tensors + odd, [_misaligned(t) for t in tensors] + odd):
        grid = k.grid_fn(*call[len(call) - n:]) if n else k.grid
        out.append(k.fn.run(*call, grid=grid, warmup=True, **k.meta))
    return out


def _enc_keys(d: dict) -> list:
    return [[list(k) if isinstance(k, tuple) else k, v] for k, v in d.items()]


def _launcher_bytes(ck: Any) -> bytes | None:
    """The C launcher module Triton built for ``ck``'s signature (from Triton's cache), or None."""
    try:
        import sysconfig

        from triton.backends.nvidia.driver import make_launcher
        from triton.runtime.build import platform_key
        from triton.runtime.cache import get_cache_manager
        import hashlib
        src = ck.src
        arg_idx = lambda x: (src.fn.arg_names.index(x),) if isinstance(x, str) else x  # noqa: E731
        constants = {arg_idx(i): v for i, v in src.constants.items()}
        text = make_launcher(constants, dict(src.signature), getattr(ck.metadata, "tensordesc_meta", None))
        key = hashlib.sha256((text + platform_key()).encode()).hexdigest()
        path = get_cache_manager(key).get_file(f"__triton_launcher{sysconfig.get_config_var('EXT_SUFFIX')}")
        return open(path, "rb").read() if path else None
    except Exception:  # noqa: BLE001 - another Triton's internals: the loader lets Triton build the launcher
        return None


def describe_triton(v: Any, store: Callable[[bytes, str], str], recorded: dict[int, tuple]) -> dict | None:
    """The table entry of a Triton kernel global (None: not one)."""
    from ..shapes import to_python
    k = _kernel_of(v)
    if k is None:
        return None
    if id(k) not in recorded:
        raise ValueError(f"ember.aot_compile: kernel {k.name} did not run on the example inputs")
    variants = []
    for ck in _variants(k, recorded[id(k)]):
        ck._init_handles()          # the launcher is built now, so its module is in Triton's cache
        meta_path = next(p for n, p in ck.metadata_group.items() if n.endswith(".json"))
        launcher = _launcher_bytes(ck)
        variants.append({
            "cubin": store(ck.asm["cubin"], ".cubin"), "metadata": store(open(meta_path, "rb").read(), ".json"),
            "launcher": store(launcher, ".launcher.so") if launcher else None, "name": ck.src.name,
            "signature": _enc_keys(dict(ck.src.signature)), "constants": _enc_keys(dict(ck.src.constants)),
            "attrs": _enc_keys(dict(ck.src.attrs))})
    rec = {"name": k.name, "variants": variants, "nsyms": getattr(k, "nsyms", 0)}
    if rec["nsyms"]:
        rec["symbols"] = list(k.symbols)
        rec["grid"] = to_python(k.cfg.grid_expr)
    else:
        rec["grid"] = list(k.grid)
    return {"triton": rec}


# loading ----------------------------------------------------------------------------------------------------
def _grid_fn(rec: dict) -> Callable[..., tuple]:
    syms = [str(s) for s in rec["symbols"]]
    tree = ast.parse(rec["grid"], mode="eval")
    for node in ast.walk(tree):
        ok = isinstance(node, _GRID_NODES) and not (isinstance(node, ast.Name) and node.id not in syms + [
            "max", "min", "abs"]) and not (isinstance(node, ast.Call) and not (
                isinstance(node.func, ast.Name) and node.func.id in ("max", "min", "abs")))
        if not ok or (isinstance(node, ast.Constant) and type(node.value) is not int):
            raise ValueError(f"bad grid expression {rec['grid']!r}")
    if not all(s.isidentifier() for s in syms):
        raise ValueError("bad symbol names")
    return eval(f"lambda {', '.join(syms)}: ({rec['grid']}, 1, 1)", {"__builtins__": {}, "max": max, "min": min,
                                                                     "abs": abs})


def _dec_keys(items: list) -> dict:
    return {tuple(k) if isinstance(k, list) else k: v for k, v in items}


class _Variant:
    """One compiled specialization: its assumptions and its launch function."""

    def __init__(self, v: dict, data: dict[str, bytes], loaded: "CudaKernels") -> None:
        from collections import namedtuple

        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend
        from triton.runtime.driver import driver
        meta = json.loads(data[v["metadata"]])
        t = meta["target"]
        meta["target"] = GPUTarget(t["backend"], t["arch"], t["warp_size"])
        self.metadata = namedtuple("KernelMetadata", sorted(meta))(**meta)
        self.packed = make_backend(self.metadata.target).pack_metadata(self.metadata)
        dev = driver.active.get_current_device()
        self.function = driver.active.utils.load_binary(self.metadata.name, data[v["cubin"]], self.metadata.shared,
                                                        dev)[1]
        attrs, self.constants = _dec_keys(v["attrs"]), _dec_keys(v["constants"])
        self.divisible = {k[0] for k, a in attrs.items() if any(x[0] == "tt.divisibility" for x in a)}
        self.ones = {k[0] for k, c in self.constants.items() if c == 1 and len(k) == 1}
        sig = _dec_keys(v["signature"])        # what CudaLauncher reads of the kernel's source
        src = SimpleNamespace(fn=SimpleNamespace(arg_names=list(sig)), signature=sig, constants=self.constants)
        self.run = loaded.launcher(v.get("launcher"), src, self.metadata)

    def holds(self, args: tuple) -> bool:
        for i in self.divisible:
            a = args[i]
            if (a.data_ptr() if isinstance(a, torch.Tensor) else a) % 16:
                return False
        return all(args[i] == 1 for i in self.ones if i < len(args))


class PackagedTriton:
    """A packaged Triton kernel: ``kernel(*tensors, *sizes)`` launches the best variant for the arguments."""

    def __init__(self, rec: dict, data: dict[str, bytes], loaded: "CudaKernels") -> None:
        from triton.runtime.driver import driver
        self.name = rec["name"]
        self.variants = [_Variant(v, data, loaded) for v in rec["variants"]]
        self.variants.sort(key=lambda v: -(len(v.divisible) + len(v.ones)))
        self.nsyms = int(rec["nsyms"])
        self.grid = _grid_fn(rec) if self.nsyms else (lambda *_, g=tuple(rec["grid"]): g)
        self.stream = driver.active.get_current_stream
        self.cache: dict[tuple, _Variant] = {}

    def __call__(self, *args: Any) -> None:
        n = self.nsyms
        grid = self.grid(*args[len(args) - n:])
        if grid[0] <= 0:
            return
        key = tuple((a.data_ptr() & 15) == 0 if isinstance(a, torch.Tensor) else (a % 16 == 0, a == 1)
                    for a in args)
        v = self.cache.get(key)
        if v is None:
            v = next((v for v in self.variants if v.holds(args)), None)
            if v is None:
                raise RuntimeError(f"ember package: no compiled variant of kernel {self.name} fits these arguments")
            self.cache[key] = v
        dev = args[0].device.index if isinstance(args[0], torch.Tensor) and args[0].device.index is not None else 0
        v.run(grid[0], grid[1], grid[2], self.stream(dev), v.function, v.packed, None, None, None, *args)


class CudaKernels:
    """The package's Triton kernels, loaded once each; launchers from the package where it holds them."""

    def __init__(self, data: dict[str, bytes]) -> None:
        self.data = data
        self.kernels: dict[str, PackagedTriton] = {}

    def bind(self, kind: str, rec: dict) -> PackagedTriton:
        key = json.dumps(rec, sort_keys=True)
        k = self.kernels.get(key)
        if k is None:
            k = self.kernels[key] = PackagedTriton(rec, self.data, self)
        return k

    def launcher(self, rel: str | None, src: Any, metadata: Any) -> Any:
        from triton.runtime.driver import driver
        cls = driver.active.launcher_cls
        if rel is None:
            return cls(src, metadata)           # Triton builds it (or finds it in its cache)
        mod = _load_extension("__triton_launcher", self.data[rel])
        from triton.backends.nvidia.driver import wrap_handle_tensordesc
        run = cls.__new__(cls)      # what CudaLauncher.__init__ sets, with the packaged module
        tdm = getattr(metadata, "tensordesc_meta", None)
        run.num_ctas = getattr(metadata, "num_ctas", 1)
        run.launch = wrap_handle_tensordesc(mod.launch, src.signature, tdm)
        for f in ("global_scratch_size", "global_scratch_align", "profile_scratch_size", "profile_scratch_align",
                  "launch_cooperative_grid", "launch_pdl"):
            setattr(run, f, getattr(metadata, f))
        return run


def _load_extension(name: str, data: bytes) -> Any:
    """A C extension module from verified bytes (``memfile``), never from a path that may change."""
    import importlib.machinery
    import importlib.util

    from .memfile import load_private

    def load(path: str) -> Any:
        loader = importlib.machinery.ExtensionFileLoader(name, path)
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        return mod
    return load_private(data, f"{name}.so", load)
