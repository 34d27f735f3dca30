"""Building generated C++: the compiler command, the on-disk cache of shared objects, and loading with ctypes.

A translation unit is keyed by sha256(source, compiler identity, flags, CPU features); ``<key>.cpp`` and
``<key>.so`` live in the ``diskcache`` store ``$EMBER_CACHE_DIR/cpp`` (default ``~/.cache/ember/cpp``). A warm
start finds the ``.so``, verifies its signature and loads it without running the compiler; a corrupt or foreign
one is deleted and rebuilt. Compilation runs in a subprocess (``start`` returns at once, so several graphs can
compile in parallel) into a temporary file of the store, which this process loads and then publishes (signed,
renamed atomically), so concurrent processes never load a half-written file. A compiler failure raises
``CppCompileError`` naming the generated source file and the graph it came from.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shlex
import subprocess
from pathlib import Path

from ember import counters, diskcache, logs
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
    """A compile in flight (or a verified cache hit); ``result()`` waits for it and loads the shared object."""

    def __init__(self, cache: "CppCache", key: str, source: str, graph: str, proc: subprocess.Popen | None,
                 tmp: Path | None, cmd: list[str]) -> None:
        self.cache, self.key, self.source, self.graph = cache, key, source, graph
        self.proc, self.tmp, self.cmd = proc, tmp, cmd
        self.lib: ctypes.CDLL | None = None
        self.verified: bytes | None = None      # a cache hit's verified content, until it is loaded

    @property
    def source_path(self) -> Path:
        return self.cache.dir / f"{self.key}.cpp"

    def result(self) -> ctypes.CDLL:
        if self.lib is not None:
            return self.lib
        if self.proc is None:
            self.lib = self.cache.load(self.key, self.verified)
            self.verified = None
            if self.lib is None:        # verified but not loadable: rebuild it once, now
                rebuilt = self.cache.compile(self.key, self.source, self.graph)
                self.proc, self.tmp, self.cmd = rebuilt.proc, rebuilt.tmp, rebuilt.cmd
        if self.lib is None:
            self.lib = self._finish()
        return self.lib

    def _finish(self) -> ctypes.CDLL:
        assert self.proc is not None and self.tmp is not None
        _, err = self.proc.communicate()
        if self.proc.returncode != 0:
            self.tmp.unlink(missing_ok=True)
            tail = "\n".join(err.decode(errors="replace").splitlines()[-40:])
            raise CppCompileError(
                f"ember.codegen.cpp: compiling the kernels of graph {self.graph} failed; generated source: "
                f"{self.source_path}\ncommand: {shlex.join(self.cmd)}\n{tail}")
        # load what this process built (a concurrent process may replace or reject the published file), then
        # publish a copy of it (signed, renamed atomically): the loaded file itself is never in the cache
        # (``_dlopen_private``)
        data = self.tmp.read_bytes()
        try:
            lib = _dlopen_private(self.tmp)
        except OSError as e:
            raise CppCompileError(f"ember.codegen.cpp: the shared object built for graph {self.graph} does not "
                                  f"load ({e}); generated source: {self.source_path}") from e
        self.cache.store.write(f"{self.key}.so", data)
        self.cache._libs[self.key] = lib
        self.proc = None
        return lib


class CppCache:
    """Shared objects keyed by their translation unit, in a ``diskcache.Store`` (verified before ``dlopen``)."""

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self.store = diskcache.store_at(directory) if directory is not None else diskcache.store("cpp")
        self.dir = self.store.path          # the directory asked for, or a private one where it is unsafe
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
        if key in self._libs:
            self.hits += 1
            return Build(self, key, source, graph, None, None, [])
        data = self.store.read(f"{key}.so")
        if data is not None:        # verified: what is loaded is a private copy of these very bytes
            self.hits += 1
            build = Build(self, key, source, graph, None, None, [])
            build.verified = data
            return build
        return self.compile(key, source, graph)

    def compile(self, key: str, source: str, graph: str) -> Build:
        """Start the compiler on ``source`` into a temporary file of the store (``Build.result`` publishes it)."""
        name = f"{key}.cpp"
        if self.store.read(name) != source.encode():
            self.store.write(name, source.encode())
        src = self.store.entry(name)
        tmp = self.store.temp(".so")
        cmd = [compiler(), *[f for f in flags() if f != "-lmvec"], str(src), "-o", str(tmp)]
        if "-lmvec" in flags():
            cmd.append("-lmvec")
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise CppCompileError(f"ember.codegen.cpp: cannot run {cmd[0]!r} for graph {graph} ({e}); generated "
                                  f"source: {src}") from e
        self.compiler_runs += 1
        counters.bump("kernel_compiles")
        return Build(self, key, source, graph, proc, tmp, cmd)

    def load(self, key: str, data: bytes | None = None) -> ctypes.CDLL | None:
        """The loaded shared object ``key`` from ``data``, its content verified by ``start`` (None: read and
        verified now); None when it is missing or the loader rejects it (then it is deleted)."""
        lib = self._libs.get(key)
        if lib is None:
            data = data if data is not None else self.store.read(f"{key}.so")
            if data is None:
                return None
            tmp = self.store.temp(".so")
            try:
                tmp.write_bytes(data)
                lib = self._libs[key] = _dlopen_private(tmp)
            except OSError as e:
                tmp.unlink(missing_ok=True)
                logs.log("cache", f"ember cache: cannot load {self.store.entry(f'{key}.so')} ({e}); rebuilding it")
                self.store.discard(f"{key}.so")
                return None
        return lib


def _dlopen_private(path: Path) -> ctypes.CDLL:
    """Load the shared object at ``path``, a file of this process's own, then unlink it (also when loading
    fails). The mapping keeps the unlinked file alive, and no one can open it again: a cache entry is never
    the loaded file. A file loaded from the cache and then rewritten in place (truncated, overwritten: by
    another tool, or by a test that damages an entry) would lose the pages the process runs from, and the
    process would die of SIGBUS when it next called a kernel or at exit, when the loader runs the library's
    destructors; and what is loaded is exactly what was verified, with no window between the check and the
    ``dlopen``. Each path is new (the loader knows a library by its path)."""
    try:
        return ctypes.CDLL(str(path))
    finally:
        path.unlink(missing_ok=True)


_CACHES: dict[Path, CppCache] = {}


def default_cache() -> CppCache:
    """The process-wide cache for the current ``$EMBER_CACHE_DIR`` (loaded libraries are kept per directory)."""
    d = default_dir()
    c = _CACHES.get(d)
    return c if c is not None else _CACHES.setdefault(d, CppCache(d))     # one per directory, also across threads
