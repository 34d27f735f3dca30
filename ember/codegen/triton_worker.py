"""A Triton compile worker process (``python -m ember.codegen.triton_worker``), started by ``triton_pool``.

Requests come on stdin and replies go out on the process's original stdout (fd 1 is pointed at stderr at start,
so that nothing Triton or ptxas prints can corrupt the stream); each message is a pickled object behind an
8-byte little-endian length. A request compiles one kernel as the parent process would (its source imported
through ``ember.codegen.triton_modules.load_module``, then ``JITFunction.warmup`` with the argument dtypes and launch
options), so the parent's own compile of it is a hit in Triton's disk cache; with ``launcher`` set it also
builds the kernel's C launcher (one per argument signature), which Triton otherwise compiles with the C
compiler at the kernel's first launch. The GPU target comes with the request: a worker never creates a CUDA
context. The request also carries the parent's Triton environment (``request_env``), applied before compiling,
so that both processes compile the same code, and the parent's backend hash, which Triton computes once per
process (the ptxas version is cached at its first use: torch.compile's ptxas, set in ``TRITON_PTXAS_PATH`` after
that, changes the compile but not the parent's key). The reply is the kernel's cache hash and specialization:
the parent loads the compiled kernel by them (``triton.load_compiled``), without importing the kernel's module
or computing its cache key. Before it says it is ready, a worker warms up (``warm_up``: the imports and one
throwaway compile for the target the pool passes in ``EMBER_WORKER_TARGET``), which its first request would
otherwise pay: on the H100 host a first request took about 3 s against a fraction of that for later ones. A
worker exits when its stdin closes.
"""
from __future__ import annotations

import os
import pickle
import struct
import sys
from typing import IO, Any

_LEN = struct.Struct("<Q")
_TARGET: tuple | None = None


def read_message(f: IO[bytes]) -> Any:
    head = f.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    (n,) = _LEN.unpack(head)
    return pickle.loads(f.read(n))


def write_message(f: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(_LEN.pack(len(data)) + data)
    f.flush()


def _use_target(target: tuple) -> None:
    """Make Triton compile for ``target`` (backend, arch, warp size) without asking the driver (no CUDA
    context in the worker)."""
    global _TARGET
    if _TARGET == target:
        return
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver
    active = driver.active
    gpu = GPUTarget(*target)
    active.get_current_target = lambda: gpu
    active.get_current_device = lambda: 0
    active.get_current_stream = lambda device=None: 0
    _TARGET = target


def _invalidating_env() -> dict:
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars
        return dict(get_cache_invalidating_env_vars())
    except ImportError:
        return {}


def request_env() -> dict:
    """What a request carries of the parent's environment: every ``TRITON_*`` variable (torch.compile sets
    ``TRITON_PTXAS_PATH`` in the process it runs in, and a different ptxas is a different cache key), the
    variables Triton's cache key depends on, ember's cache root, and the libdevice knob torch.compile may set
    without an environment variable."""
    env = {k: v for k, v in os.environ.items() if k.startswith("TRITON_") and k != "TRITON_INTERPRET"}
    env |= {k: os.environ[k] for k in _invalidating_env() if k in os.environ}
    # the directory this process caches in (a private temporary one where $EMBER_CACHE_DIR is unsafe), so that a
    # worker neither warns again nor caches elsewhere
    from ember import diskcache
    env["EMBER_CACHE_DIR"] = str(diskcache.root())
    knobs: dict = {}
    try:
        from triton import knobs as tk
        knobs["libdevice_path"] = tk.nvidia.libdevice_path
    except (ImportError, AttributeError):
        pass
    return {"env": env, "knobs": knobs}


def apply_env(req: dict) -> None:
    """Make this process's environment what ``request_env`` saw in the parent."""
    env = req["env"]
    stale = [k for k in os.environ if (k.startswith("TRITON_") or k == "EMBER_CACHE_DIR") and k not in env
             and k != "TRITON_INTERPRET"]
    stale += [k for k in _invalidating_env() if k not in env]
    for k in stale:
        os.environ.pop(k, None)
    os.environ.update(env)
    if "libdevice_path" in req["knobs"]:
        from triton import knobs as tk
        tk.nvidia.libdevice_path = req["knobs"]["libdevice_path"]


def backend_hash(target: tuple) -> str | None:
    """This process's Triton backend hash for ``target`` (part of every kernel's cache key)."""
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend
        return make_backend(GPUTarget(*target)).hash()
    except (ImportError, AttributeError, RuntimeError):
        return None


def _pin_backend_hash(target: tuple, value: str | None) -> None:
    """Make this process's backend hash the parent's: Triton caches the ptxas version in it at its first use, so
    a process that started later (after torch.compile set ``TRITON_PTXAS_PATH``) would otherwise key every
    kernel differently from its parent."""
    if value is None:
        return
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    cls = type(make_backend(GPUTarget(*target)))
    if getattr(cls, "_ember_pinned", None) != value:
        cls.hash = lambda self, v=value: v
        cls._ember_pinned = value


def compile_request(req: dict) -> dict:
    """Compile the request's kernel; what the parent loads it by (``compiled_info``)."""
    import torch
    apply_env(req)
    from ember.codegen.triton_modules import load_module
    fn = getattr(load_module(req["src"]), req["fname"])
    _use_target(req["target"])
    _pin_backend_hash(req["target"], req.get("backend_hash"))
    dtypes = [getattr(torch, d) for d in req["dtypes"]]
    kernel = fn.warmup(*dtypes, grid=req["grid"], **req["meta"])
    if req["launcher"]:
        from triton.runtime.driver import driver
        driver.active.launcher_cls(kernel.src, kernel.metadata)
    return compiled_info(kernel)


def compiled_info(kernel: Any) -> dict:
    """What the parent needs to load ``kernel`` (a ``CompiledKernel``) from Triton's cache without computing its
    cache key again: the hash, and the specialization its launcher is built from; only the hash where the
    specialization does not pickle."""
    src = kernel.src
    info = {"hash": kernel.hash, "name": src.name, "signature": dict(src.signature),
            "constants": dict(src.constants), "attrs": dict(src.attrs)}
    try:
        pickle.dumps(info)
    except Exception:  # noqa: BLE001 - an odd constant: the parent takes the JIT path
        return {"hash": kernel.hash}
    return info


_WARM_SRC = """
@triton.jit
def ember_worker_warm_up(p0, p1, n, XBLOCK: tl.constexpr):
    x = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    m = x < n
    v = tl.load(p0 + x, mask=m, other=0.0).to(tl.float32)
    tl.store(p1 + x, (libdevice.exp(v) + tl.sum(v, 0)).to(p1.dtype.element_ty), mask=m)
"""


def warm_up(target: tuple | None) -> None:
    """What a worker's first request would otherwise pay before its compile: the imports a request makes
    (ember's kernel loader and device helpers, Triton's compiler, the CUDA driver's utilities, built into
    Triton's cache on a fresh machine) and one throwaway compile, into a scratch cache directory so that it
    runs Triton's whole pipeline (MLIR, LLVM, ptxas) once."""
    import tempfile

    import torch

    from ember.codegen.triton_modules import load_module
    from ember.codegen.triton_gen import HEADER
    if target is None:
        return
    _use_target(target)
    saved = os.environ.get("TRITON_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="ember-warm-") as d:
        os.environ["TRITON_CACHE_DIR"] = d
        try:
            fn = load_module(HEADER + _WARM_SRC).ember_worker_warm_up
            fn.warmup(torch.bfloat16, torch.bfloat16, 1, grid=(1,), XBLOCK=128, num_warps=4)
        finally:
            if saved is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = saved


def main() -> None:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = sys.stdin.buffer
    target = os.environ.get("EMBER_WORKER_TARGET")
    try:
        warm_up(tuple(int(p) if p.isdigit() else p for p in target.split(",")) if target else None)
    except Exception as e:  # noqa: BLE001 - a request compiles as before; say why the warm-up did not
        print(f"ember: Triton compile worker warm-up failed: {type(e).__name__}: {e}", file=sys.stderr)
    write_message(out, ("ready", None))
    while True:
        req = read_message(inp)
        if req is None:
            return
        try:
            write_message(out, ("ok", compile_request(req)))
        except BaseException as e:  # noqa: BLE001 - reported to the parent, which compiles it itself
            write_message(out, ("error", f"{type(e).__name__}: {e}"))


if __name__ == "__main__":
    try:
        main()
    except (BrokenPipeError, EOFError):     # the parent exited (or closed the pipe) first: nothing to report
        os._exit(0)
