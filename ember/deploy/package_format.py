"""What an ember package directory holds and what it must match to load (shared by ``package`` and
``package_load``): file names, the format version, the versions and the device identity it records."""
from __future__ import annotations

import functools
import hashlib

FORMAT = "ember-package"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
PROGRAM = "program.json"
WEIGHTS = "weights.bin"
KERNELS = "kernels"
# names every wrapper's source may use, bound by the loader itself (codegen.wrapper's fixed globals)
BUILTINS = ("torch", "empty_strided", "as_strided", "restride")


def versions(device: str) -> dict[str, str]:
    """The versions a package must match to load (and the C++ compiler's, recorded for the reader)."""
    import torch

    import ember
    out = {"ember": ember.__version__, "torch": torch.__version__}
    if device == "cuda":
        import triton
        out["triton"] = triton.__version__
    else:
        from ember.codegen.cpp_build import compiler, compiler_identity
        out["compiler"] = compiler_identity(compiler())
    return out


def loaded_versions(device: str) -> dict[str, str]:
    """``versions`` as the loading process sees them, without running the compiler (loading needs none)."""
    import torch

    import ember
    out = {"ember": ember.__version__, "torch": torch.__version__}
    if device == "cuda":
        import triton
        out["triton"] = triton.__version__
    return out


@functools.lru_cache(maxsize=None)
def target(device: str) -> str:
    """The identity of the processor the kernels were built for: C++ kernels are built with ``-march=native``
    (a hash of the CPU's model and flags), Triton's binaries for one GPU architecture (``sm_90``)."""
    if device == "cuda":
        import torch
        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}"
    return "cpu-" + hashlib.sha256(_cpu_identity().encode()).hexdigest()[:16]


def _cpu_identity() -> str:
    """The CPU's model and instruction-set flags (read here rather than through ``codegen.cpp_build``, so that
    loading a package imports no compiler module)."""
    import platform
    try:
        with open("/proc/cpuinfo") as f:
            lines = {ln for ln in f.read().splitlines() if ln.startswith(("flags", "model name"))}
        return "\n".join(sorted(lines))
    except OSError:
        return platform.processor() or platform.machine()
