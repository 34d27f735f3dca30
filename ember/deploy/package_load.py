"""``load_package(path)``: run a package written by ``aot_compile`` with no capture, tracing or compiling.

Checks, in order, each refusal a ``PackageError`` saying what, why and what to do: the manifest (format and
its version, ember's and torch's versions (and Triton's for CUDA), the device kind and the processor the kernels
were built for), then the SHA-256 of every file it lists (a missing, truncated or altered file is refused
before anything is loaded), then the wrapper's source against the grammar ember generates (``wrapper_check``).
The wrapper's free names are bound from ``program.json``'s table by this module only: ``torch.ops`` overloads,
ember's prims, devices, plain values, the package's tensors and its kernels (``ctypes`` for the C++ shared
objects, Triton's driver for cubins). Nothing is unpickled or imported from the package.

Trust: the kernels are native code, so a package is code (like a ``.so``): load only packages you trust.
The hashes catch corruption, not malice (whoever can write the package can rewrite the manifest).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from . import package_format as F
from .program import InputSpec, OutputSpec, check_inputs, lookup_state, state_owner
from .serialize import ProgramFormatError, _dec, load_spec, _leaf_from, _resolve, _tensor_from


class PackageError(ValueError):
    """The package cannot be loaded here (another format, versions or device; missing or corrupt files)."""


def _fail(path: Path, what: str, do: str) -> PackageError:
    return PackageError(f"ember.load_package: {path}: {what}; {do}")


def load_package(path: str | os.PathLike) -> "PackagedModule":
    """The package at ``path`` as a callable module (see the module docstring for what is checked)."""
    root = Path(path)
    manifest = _manifest(root)
    device = manifest["device"]
    _check_target(root, manifest, device)
    data = _verified_files(root, manifest)
    try:
        program = json.loads(data[F.PROGRAM])
    except (KeyError, ValueError) as e:
        raise _fail(root, f"{F.PROGRAM} is unreadable ({e})", "re-create the package with ember.aot_compile") from None
    try:
        return PackagedModule(root, program, data, device)
    except (KeyError, TypeError, IndexError, ProgramFormatError) as e:
        raise _fail(root, f"the package is malformed ({type(e).__name__}: {e})",
                    "re-create it with ember.aot_compile") from None


def _manifest(root: Path) -> dict:
    redo = "re-create it with ember.aot_compile from the exported program"
    if not root.is_dir():
        raise _fail(root, "not a directory (a package is the directory ember.aot_compile wrote)", redo)
    try:
        manifest = json.loads((root / F.MANIFEST).read_text())
    except FileNotFoundError:
        raise _fail(root, f"{F.MANIFEST} is missing, so this is not an ember package", redo) from None
    except (OSError, ValueError) as e:
        raise _fail(root, f"{F.MANIFEST} is unreadable or truncated ({e})", redo) from None
    if not isinstance(manifest, dict) or manifest.get("format") != F.FORMAT:
        raise _fail(root, f"{F.MANIFEST} is not an ember package manifest", redo)
    if manifest.get("format_version") != F.FORMAT_VERSION:
        raise _fail(root, f"the package has format version {manifest.get('format_version')!r}, this ember reads "
                    f"version {F.FORMAT_VERSION}", "re-create the package with this ember's aot_compile")
    if manifest.get("device") not in ("cpu", "cuda") or not isinstance(manifest.get("files"), dict):
        raise _fail(root, f"{F.MANIFEST} is malformed", redo)
    return manifest


def _check_target(root: Path, manifest: dict, device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        raise _fail(root, "the package was built for CUDA and this process has no CUDA device",
                    "load it on a machine with the GPU it was built for, or build a package with device='cpu'")
    here = F.loaded_versions(device)
    for k, v in here.items():
        if manifest.get(k) != v:
            raise _fail(root, f"the package was built with {k} {manifest.get(k)}, this process runs {k} {v}",
                        "re-create the package with these versions (packages hold compiled code for one set of "
                        "versions)")
    if manifest.get("target") != F.target(device):
        what = ("the kernels were built for another CPU (C++ kernels use the CPU's instruction set)" if device == "cpu"
                else f"the kernels were built for {manifest.get('target')}, this GPU is {F.target(device)}")
        raise _fail(root, what, "build the package on the kind of machine that runs it")


def _verified_files(root: Path, manifest: dict) -> dict[str, bytes]:
    """Every file the manifest lists, read once and checked against its SHA-256."""
    out = {}
    for rel, digest in manifest["files"].items():
        p = root / rel
        if not _safe_rel(rel):
            raise _fail(root, f"the manifest lists a path outside the package ({rel!r})", "do not load it")
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            raise _fail(root, f"{rel} is missing", "copy the whole package directory, or re-create it") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise _fail(root, f"{rel} does not match its SHA-256 in the manifest (truncated, corrupt or altered)",
                        "copy the package again, or re-create it with ember.aot_compile")
        out[rel] = data
    for rel in (F.PROGRAM, F.WEIGHTS):
        if rel not in out:
            raise _fail(root, f"the manifest does not list {rel}", "re-create the package with ember.aot_compile")
    return out


def _safe_rel(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts)


# the program ------------------------------------------------------------------------------------------------
class PackagedModule(torch.nn.Module):
    """Runs a package: checks the inputs against the exported specs (``ValueError`` outside them, as
    ``ep.module()``), calls the compiled wrapper with the weights, writes mutated buffers and inputs back and
    returns the outputs in the model's structure."""

    def __init__(self, root: Path, program: dict, data: dict[str, bytes], device: str) -> None:
        super().__init__()
        blob = memoryview(data[F.WEIGHTS])
        params = set(program["parameters"])
        self._names: list[str] = []
        for name, rec in program["state"]:
            t = _tensor_from(rec, blob)
            owner, leaf = state_owner(self, name)
            if name in params:
                owner.register_parameter(leaf, torch.nn.Parameter(t, requires_grad=False))
            else:
                owner.register_buffer(leaf, t)
            self._names.append(name)
        self._params = params
        self._state_list: list[torch.Tensor] | None = None
        self._consts = [_tensor_from(r, blob) for r in program["constants"]]
        self.spec = SimpleNamespace(
            input_specs=[InputSpec(k, n) for k, n in program["input_specs"]],
            output_specs=[OutputSpec(k, t) for k, t in program["output_specs"]],
            user_inputs=[_leaf_from(r) for r in program["user_inputs"]],
            range_constraints={k: (lo, hi) for k, (lo, hi) in program["range_constraints"].items()},
            relations=list(program["relations"]),
            in_spec=load_spec(program["in_spec"], root), out_spec=load_spec(program["out_spec"], root))
        self._n_user = sum(1 for s in self.spec.output_specs if s.kind == "user_output")
        tensors = [_tensor_from(r, blob) for r in program["tensors"]]
        self._fn = _wrapper(root, program["wrapper"], tensors, data, device)

    def _state(self) -> list[torch.Tensor]:
        """The parameters and buffers in the wrapper's order, looked up once (a lookup by dotted name costs
        microseconds per tensor and call); ``load_state_dict`` copies in place, so the list stays right, and
        ``_apply`` (``.to()``, ``.half()``) looks them up again."""
        if self._state_list is None:
            self._state_list = lookup_state(self, self._names, self._params)
        return self._state_list

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self._state_list = None
        return super()._apply(fn, *args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        spec = self.spec
        leaves, tree = tree_flatten((args, kwargs))
        if tree != spec.in_spec:
            raise ValueError(f"ember package: the inputs' structure differs from the exported one:\n"
                             f"  expected {spec.in_spec}\n  got      {tree}")
        check_inputs(spec, leaves)
        if torch.is_grad_enabled():
            self._refuse_backward(leaves)
        with torch.no_grad():
            tensors = [x for x, m in zip(leaves, spec.user_inputs) if m.kind == "tensor"]   # values: specialized
            outs = list(self._fn(*self._state(), *tensors, *self._consts))
            for s, new in zip(spec.output_specs[self._n_user:], outs[self._n_user:]):
                dst = self.get_buffer(s.target) if s.kind == "buffer_mutation" else leaves[int(s.target)]
                dst.copy_(new)
        return tree_unflatten(outs[:self._n_user], spec.out_spec)


    def _refuse_backward(self, leaves: list[Any]) -> None:
        """A package holds the forward's kernels only: a call whose output autograd would have to
        differentiate (an input or a parameter requires grad, grad mode on) is an error, not outputs that
        silently have no ``grad_fn`` (``backward()`` would fail later, far from the cause)."""
        names = [s.name for s in self.spec.input_specs if s.kind == "user_input"]
        what = next((f"input {n}" for n, x in zip(names, leaves) if isinstance(x, torch.Tensor) and x.requires_grad),
                    None)
        if what is None:
            what = next((f"parameter {n}" for n, t in zip(self._names, self._state()) if t.requires_grad), None)
        if what is not None:
            raise RuntimeError(
                f"ember package: {what} requires grad, but a package runs the forward only (it holds no backward "
                "kernels, so its outputs cannot be differentiated). To train, compile the model with "
                "ember.compile(model) (its whole-graph cache gives a warm start); to run the package, call it "
                "under torch.no_grad() or torch.inference_mode(), or pass inputs that do not require grad.")


def _restride(t: torch.Tensor, shape: tuple, stride: tuple) -> torch.Tensor:
    out = torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def _wrapper(root: Path, w: dict, tensors: list[torch.Tensor], data: dict[str, bytes], device: str) -> Callable:
    """The generated wrapper function, its source checked and its free names bound from the table."""
    from .wrapper_check import WrapperRejected, check_wrapper
    name, source, table = w["name"], w["source"], w["globals"]
    if not isinstance(source, str) or not isinstance(table, dict):
        raise ProgramFormatError("bad wrapper record")
    try:
        tree = check_wrapper(source, name, set(table))
    except WrapperRejected as e:
        raise _fail(root, f"its wrapper is not source ember generates ({e})", "do not load it") from None
    kernels = _Kernels(root, data, device)
    # __import__ for the interpreter, not the wrapper (check_wrapper refuses every dunder name): torch code the
    # wrapper calls may import lazily (ATen's argument parser, first call in a fresh process), and an import
    # looks __import__ up in the builtins of the frame running it
    ns: dict[str, Any] = {"__builtins__": {"max": max, "min": min, "abs": abs, "__import__": __import__}}
    for key, desc in table.items():
        ns[key] = _bind(desc, tensors, kernels)
    exec(compile(tree, f"<ember package wrapper {name}>", "exec"), ns)
    return ns[name]


_FIXED = {"torch": torch, "empty_strided": torch.empty_strided, "as_strided": torch.as_strided,
          "restride": _restride}


def _bind(desc: dict, tensors: list[torch.Tensor], kernels: "_Kernels") -> Any:
    if not isinstance(desc, dict) or len(desc) != 1:
        raise ProgramFormatError(f"bad wrapper global {desc!r}")
    (kind, v), = desc.items()
    if kind == "builtin" and v in _FIXED:
        return _FIXED[v]
    if kind == "op":
        op = _resolve(v)        # what an OpOverload's __call__ calls, as the wrapper binds it (codegen.wrapper)
        return op._op if isinstance(op, torch._ops.OpOverload) else op
    if kind == "torch_fn":
        fn = getattr(torch, v, None) if isinstance(v, str) and v.isidentifier() and not v.startswith("_") else None
        if not isinstance(fn, types.BuiltinFunctionType):
            raise ProgramFormatError(f"unknown torch function {v!r}")
        return fn
    if kind == "prim_impl":
        return _prim_impl(v)
    if kind == "device":
        return torch.device(v)
    if kind == "tensor":
        return tensors[int(v)]
    if kind == "value":
        return _dec(v, [])
    if kind == "cpp":
        return kernels.cpp(v)
    if kind in ("triton", "triton_first"):
        return kernels.triton(kind, v)
    raise ProgramFormatError(f"unknown wrapper global kind {kind!r}")


def _addmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, beta: Any = 1, alpha: Any = 1) -> torch.Tensor:
    return torch.addmm(bias, a, b, beta=beta, alpha=alpha)


# prims whose ATen implementation is not one torch function, written again here so that loading a package does not
# import ember's prims (and sympy with them); tests/export/test_package.py checks each against ember.decomp's
PRIM_IMPLS: dict[str, Callable[..., Any]] = {"addmm": _addmm}


def _prim_impl(name: Any) -> Callable[..., Any]:
    if name in PRIM_IMPLS:
        return PRIM_IMPLS[name]
    from ..decomp.core import PRIMS
    import ember.decomp  # noqa: F401  (registers the prims)
    if name not in PRIMS:
        raise ProgramFormatError(f"unknown prim {name!r}")
    return PRIMS[name].impl


class _Kernels:
    """Loads the package's kernel files (verified bytes) once each."""

    def __init__(self, root: Path, data: dict[str, bytes], device: str) -> None:
        self.root, self.data, self.device = root, data, device
        self.libs: dict[str, ctypes.CDLL] = {}
        self.cuda: Any = None

    def cpp(self, d: dict) -> Callable[..., None]:
        rel = d["so"]
        if rel not in self.data:
            raise ProgramFormatError(f"kernel file {rel!r} is not in the manifest")
        lib = self.libs.get(rel)
        if lib is None:
            lib = self.libs[rel] = _dlopen(self.data[rel])
        sym = str(d["symbol"])
        if not sym.isidentifier():
            raise ProgramFormatError(f"bad kernel symbol {sym!r}")
        fn = lib[sym]
        n, n_sym, checked = int(d["buffers"]), int(d["symbols"]), bool(d["checked"])
        fn.argtypes = [ctypes.c_void_p] * n + [ctypes.c_int64] * n_sym + [ctypes.c_int]
        fn.restype = ctypes.c_int if checked else None
        return _cpp_caller(fn, n, bool(d["parallel"]), checked, n_sym)

    def triton(self, kind: str, d: dict) -> Any:
        if self.cuda is None:
            from .package_cuda import CudaKernels
            self.cuda = CudaKernels(self.data)
        return self.cuda.bind(kind, d)


def _dlopen(data: bytes) -> ctypes.CDLL:
    """Load the verified bytes themselves from a private copy (``memfile``), never the package's or the kernel
    store's file, which may change (or be rewritten in place under the running process) after the check."""
    from .memfile import load_private
    return load_private(data, "ember-kernel.so", ctypes.CDLL)


def _cpp_caller(fn: Any, n: int, parallel: bool, checked: bool, symbols: int) -> Callable[..., None]:
    """``call(*buffers, *sizes)``, as ``codegen.cpp`` makes it; generated here from counts only (the code once
    per signature: a graph's kernels share a few, and compiling each took a graph-cache hit 0.5 ms a kernel)."""
    ns: dict[str, Any] = {"fn": fn, "get_num_threads": torch.get_num_threads, "raise_index": _raise_index}
    return types.FunctionType(_caller_code(n, parallel, checked, symbols), ns, "call")


@functools.lru_cache(maxsize=None)
def _caller_code(n: int, parallel: bool, checked: bool, symbols: int) -> types.CodeType:
    names = [f"a{i}" for i in range(n)]
    syms = [f"s{i}" for i in range(symbols)]
    ptrs = ", ".join([f"{a}.data_ptr()" for a in names] + syms)
    nt = "get_num_threads()" if parallel else "1"
    call = f"fn({ptrs}{', ' if n + symbols else ''}{nt})"
    body = f"    if {call}:\n        raise_index()\n" if checked else f"    {call}\n"
    module = compile(f"def call({', '.join(names + syms)}):\n{body}", "<ember package kernel call>", "exec")
    return next(c for c in module.co_consts if isinstance(c, types.CodeType))


def _raise_index() -> None:
    from ..codegen.cpp import IndexOutOfRange
    raise IndexOutOfRange("index out of range: an index tensor holds a value outside the dimension it indexes")
