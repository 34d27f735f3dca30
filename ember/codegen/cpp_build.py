"""Building generated C++: the compiler command, the on-disk cache of shared objects, and loading with ctypes.

A translation unit is keyed by sha256(source, compiler identity, flags, CPU features); ``<key>.cpp`` and
``<key>.so`` live in ``$EMBER_CACHE_DIR/cpp`` (default ``~/.cache/ember/cpp``). A warm start finds the ``.so``
and loads it without running the compiler. Compilation runs in a subprocess (``start`` returns at once, so
several graphs can compile in parallel); the object is written under a temporary name and renamed, so
concurrent processes never load a half-written file. A compiler failure raises ``CppCompileError`` naming the
generated source file and the graph it came from.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shlex
import subprocess
import tempfile
from pathlib import Path
from ember.errors import EmberError

from .cpp_prelude import vector_math_decls

BASE_FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17",
              # no errno from math calls (lets sqrt/exp vectorize), FP exceptions never trap; NaN/inf kept exact
              "-fno-math-errno", "-fno-trapping-math",
              # no fused multiply-add contraction: results stay close to eager's rounding
              "-ffp-contract=off",
              # integer overflow wraps, as in torch
              "-fwrapv", "-fno-semantic-interposition")


class CppCompileError(EmberError):
    """The C++ compiler rejected a generated translation unit."""


def compiler() -> str:
    return os.environ.get("CXX") or "g++"


@functools.lru_cache(maxsize=None)
def compiler_identity(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CppCompileError(f"ember.codegen.cpp: cannot run the C++ compiler {cxx!r} ({e}); install g++ or "
                              "set $CXX, or compile with options={'cpu_backend': 'triton'}") from e
    return out.stdout.splitlines()[0] if out.stdout else cxx


@functools.lru_cache(maxsize=None)
def cpu_features() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        lines = [ln for ln in info.splitlines() if ln.startswith(("flags", "model name"))]
        return "\n".join(sorted(set(lines)))
    except OSError:
        return platform.processor() or platform.machine()


def flags() -> tuple[str, ...]:
    _, mvec = vector_math_decls()
    return BASE_FLAGS + (("-lmvec",) if mvec else ())


def default_dir() -> Path:
    from . import cache_root
    return cache_root() / "cpp"


class Build:
    """A compile in flight (or a cache hit); ``result()`` waits for it and loads the shared object."""

    def __init__(self, cache: "CppCache", key: str, graph: str, proc: subprocess.Popen | None,
                 tmp: Path | None, cmd: list[str]) -> None:
        self.cache, self.key, self.graph, self.proc, self.tmp, self.cmd = cache, key, graph, proc, tmp, cmd
        self.lib: ctypes.CDLL | None = None

    @property
    def source_path(self) -> Path:
        return self.cache.dir / f"{self.key}.cpp"

    def result(self) -> ctypes.CDLL:
        if self.lib is not None:
            return self.lib
        so = self.cache.dir / f"{self.key}.so"
        if self.proc is not None:
            _, err = self.proc.communicate()
            if self.proc.returncode != 0:
                if self.tmp is not None and self.tmp.exists():
                    self.tmp.unlink()
                tail = "\n".join(err.decode(errors="replace").splitlines()[-40:])
                raise CppCompileError(
                    f"ember.codegen.cpp: compiling the kernels of graph {self.graph} failed; generated source: "
                    f"{self.source_path}\ncommand: {shlex.join(self.cmd)}\n{tail}")
            os.replace(self.tmp, so)  # type: ignore[arg-type]
            self.proc = None
        self.lib = self.cache.load(self.key, so)
        return self.lib


class CppCache:
    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self.dir = Path(directory) if directory is not None else default_dir()
        self.compiler_runs = 0
        self.hits = 0
        self._libs: dict[str, ctypes.CDLL] = {}

    def key(self, source: str) -> str:
        cxx = compiler()
        h = hashlib.sha256()
        for part in (source, cxx, compiler_identity(cxx), " ".join(flags()), cpu_features()):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:40]

    def start(self, source: str, graph: str) -> Build:
        key = self.key(source)
        so = self.dir / f"{key}.so"
        if key in self._libs or so.exists():
            self.hits += 1
            return Build(self, key, graph, None, None, [])
        self.dir.mkdir(parents=True, exist_ok=True)
        src = self.dir / f"{key}.cpp"
        if not src.exists() or src.read_text() != source:
            _write_atomic(src, source)
        fd, tmp_name = tempfile.mkstemp(suffix=".so", prefix=f"{key}.", dir=self.dir)
        os.close(fd)
        cmd = [compiler(), *[f for f in flags() if f != "-lmvec"], str(src), "-o", tmp_name]
        if "-lmvec" in flags():
            cmd.append("-lmvec")
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as e:
            raise CppCompileError(f"ember.codegen.cpp: cannot run {cmd[0]!r} for graph {graph} ({e}); generated "
                                  f"source: {src}") from e
        self.compiler_runs += 1
        return Build(self, key, graph, proc, Path(tmp_name), cmd)

    def load(self, key: str, so: Path) -> ctypes.CDLL:
        lib = self._libs.get(key)
        if lib is None:
            lib = self._libs[key] = ctypes.CDLL(str(so))
        return lib


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(suffix=".tmp", prefix=path.name + ".", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


_CACHES: dict[Path, CppCache] = {}


def default_cache() -> CppCache:
    """The process-wide cache for the current ``$EMBER_CACHE_DIR`` (loaded libraries are kept per directory)."""
    d = default_dir()
    c = _CACHES.get(d)
    return c if c is not None else _CACHES.setdefault(d, CppCache(d))     # one per directory, also across threads
