"""Triton kernels compiled in worker processes, while the compiler goes on.

Triton's compile is mostly Python (the AST-to-IR generator, the pass driver) and holds the GIL: compiled in
threads of this process, a graph's kernels kept about 2.5 cores busy on a 16-core host. Here each kernel is
compiled by one of a pool of worker processes (``triton_worker``) into Triton's disk cache; the kernel's first
launch in this process then loads it from there. Submitting does not wait: a kernel waits for its compile at
its first launch (``TritonKernel.pending``), so the forward graph's kernels compile while the backward graph
is lowered, and a graph's first kernels run while its last ones compile.

Workers are plain subprocesses started with this interpreter (not ``multiprocessing``, which would re-run an
unguarded user script in each child). ``EMBER_COMPILE_WORKERS`` sets their number (default: one less than the
CPU count, at least 2 and at most 16; 0 or 1 compiles in this process's threads instead). A worker that fails on
a kernel reports it and the kernel compiles here at its first launch, where any error is raised as it would be
without workers; so does a kernel whose worker takes longer than ``EMBER_COMPILE_TIMEOUT`` seconds (600). A
forked child does not use its parent's pool (whose serving threads it lacks).
"""
from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from ember import logs

from .triton_worker import backend_hash, read_message, request_env, write_message

RESTARTS = 3       # per worker
TIMEOUT_S = float(os.environ.get("EMBER_COMPILE_TIMEOUT", "600"))   # a first launch waits this long, then
                                                                    # compiles the kernel itself


def worker_count() -> int:
    env = os.environ.get("EMBER_COMPILE_WORKERS")
    if env is not None:
        try:
            return max(0, int(env))
        except ValueError:
            logs.log("perf_hints", f"ember: EMBER_COMPILE_WORKERS={env!r} is not an integer; using the default")
    return max(2, min((os.cpu_count() or 1) - 1, 16))     # a core left for this process's own work


class _Pool:
    def __init__(self, n: int) -> None:
        self.tasks: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        self.live = n
        self.compiled = self.failed = 0          # replies so far (tests and benchmarks read them)
        self.mismatched = 0                      # kernels this process compiled again under another cache key
        self.loaded = 0                          # kernels loaded by their worker's hash (no key computed here)
        self.variants = 0                        # first launches with other arguments than the worker's compile
        self.launchers: dict[int, Future] = {}     # argument count -> the compile that builds its C launcher
        self.inflight: dict[tuple, tuple] = {}      # (function text, options, dtypes) -> its compile's futures
        self.shared = 0                          # kernels that took another kernel's compile (same function)
        self.pids: set[int] = set()
        # timing (seconds since the pool started; bench/compile_breakdown.py (in git history) prints them)
        self.t0 = time.perf_counter()
        self.boot_s: list[float] = []            # each worker's start: spawn until it has imported torch and triton
        self.busy_s: list[float] = []            # each request's compile, as its worker served it
        self.first_submit = self.last_reply = 0.0
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])       # the directory holding the ember package
        env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env.pop("TRITON_INTERPRET", None)
        try:        # the workers warm up for this target (triton_worker.warm_up) before their first request
            env["EMBER_WORKER_TARGET"] = ",".join(map(str, _target()))
        except Exception:  # noqa: BLE001 - no target: the workers skip the throwaway compile
            env.pop("EMBER_WORKER_TARGET", None)
        for _ in range(n):
            threading.Thread(target=self._serve, args=(env,), daemon=True, name="ember-triton-worker").start()

    def _spawn(self, env: dict) -> subprocess.Popen:
        t = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "ember.codegen.triton_worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env)
        if read_message(proc.stdout) is None:
            proc.kill()
            raise OSError("the worker exited while starting")
        with self.lock:
            self.pids.add(proc.pid)
            self.boot_s.append(time.perf_counter() - t)
        return proc

    def _serve(self, env: dict) -> None:
        """One worker's requests, one at a time; a worker that dies on a request (which then compiles
        in-process) is replaced, up to RESTARTS times."""
        proc = None
        restarts = 0
        try:
            proc = self._spawn(env)
            while True:
                req, fut = self.tasks.get()
                if not fut.set_running_or_notify_cancel():
                    continue
                t = time.perf_counter()
                try:
                    write_message(proc.stdin, req)
                    reply = read_message(proc.stdout)
                except OSError:
                    reply = None
                done = time.perf_counter()
                if reply is None:
                    reply = ("error", f"the compile worker exited (status {proc.wait()})")
                    self.pids.discard(proc.pid)
                    restarts += 1
                    proc = self._spawn(env) if restarts <= RESTARTS else None
                status, text = reply
                with self.lock:
                    self.busy_s.append(done - t)
                    self.last_reply = done - self.t0
                    if status == "ok":
                        self.compiled += 1
                    else:
                        self.failed += 1
                if status == "ok":
                    fut.set_result(text)
                else:
                    fut.set_exception(RuntimeError(text))
                if proc is None:
                    raise OSError("it exited too often")
        except OSError as e:
            logs.log("perf_hints", f"ember: a Triton compile worker stopped ({e}); kernels compile in-process")
        finally:
            if proc is not None and proc.poll() is None:
                proc.kill()
            with self.lock:
                self.live -= 1
                last = self.live == 0
            if last:        # nobody left to serve the queue: its kernels compile at their first launch
                _drain(self.tasks)

    def submit(self, req: dict) -> Future | None:
        with self.lock:
            if self.live == 0:
                return None
        fut: Future = Future()
        with self.lock:
            self.first_submit = self.first_submit or time.perf_counter() - self.t0
        self.tasks.put((req, fut))
        return fut


def _drain(tasks: queue.Queue) -> None:
    while True:
        try:
            _, fut = tasks.get_nowait()
        except queue.Empty:
            return
        if fut.set_running_or_notify_cancel():
            fut.set_exception(RuntimeError("no compile worker is running"))


_POOL: _Pool | None = None
_POOL_PID = 0
_POOL_LOCK = threading.Lock()


def _usable() -> bool:
    try:
        import torch

        from .triton_helpers import interpreting
        return torch.cuda.is_available() and not interpreting()
    except ImportError:
        return False


def start() -> _Pool | None:
    """The pool, started on first use (workers take a few seconds to import torch and triton, so the backend
    starts it as soon as it sees a graph with CUDA inputs); None when compiling in-process."""
    global _POOL, _POOL_PID
    from .triton_cache import install
    install()           # before any worker starts: they inherit the environment
    with _POOL_LOCK:
        if _POOL is not None and _POOL_PID != os.getpid():
            _POOL = None        # a forked child: the parent's serving threads did not come along
        if _POOL is None:
            n = worker_count()
            if n <= 1 or not _usable():
                return None
            _POOL, _POOL_PID = _Pool(n), os.getpid()
        return _POOL


def _target() -> tuple:
    from triton.runtime.driver import driver
    t = driver.active.get_current_target()
    return (t.backend, t.arch, t.warp_size)


def submit(kernel: Any, dtypes: list) -> bool:
    """Compile ``kernel`` (a ``TritonKernel``) for arguments of ``dtypes`` in a worker; its first launch waits
    for it. False when there is no pool (the caller compiles it)."""
    pool = start()
    if pool is None or kernel.empty:
        return False
    n = len(dtypes)
    src = kernel.source
    target = _target()
    env = request_env()
    # the same function text, options, dtypes and settings (another layer's kernel): one compile for all
    same = (src[src.find("@triton.jit"):], tuple(sorted(kernel.meta.items())), tuple(dtypes), target, repr(env))
    with pool.lock:
        shared = pool.inflight.get(same)
        builder = pool.launchers.get(n)
    if shared is not None:
        kernel.pending, kernel.worker_dtypes = shared, tuple(dtypes)
        with pool.lock:
            pool.shared += 1
        return True
    req = {"src": src, "fname": kernel.fname, "dtypes": [str(d).removeprefix("torch.") for d in dtypes],
           "grid": kernel.grid, "meta": kernel.meta, "launcher": builder is None, "target": target,
           "backend_hash": backend_hash(target), **env}
    fut = pool.submit(req)
    if fut is None:
        return False
    if builder is None:
        with pool.lock:
            builder = pool.launchers.setdefault(n, fut)
    kernel.pending = (fut, builder)     # its launch also needs the launcher of its argument count
    kernel.worker_dtypes = tuple(dtypes)
    with pool.lock:
        pool.inflight[same] = kernel.pending
    return True


def wait(kernel: Any) -> dict | None:
    """Wait for ``kernel``'s worker compile (called before its first launch): what the worker compiled it as
    (``triton_worker.compiled_info``: its Triton cache hash and specialization), or None when it failed (it
    then compiles here)."""
    futs, kernel.pending = kernel.pending, None
    try:
        for fut in futs[1:]:        # the launcher's builder: a failure there only means the launch builds it
            fut.exception(timeout=TIMEOUT_S)
        return futs[0].result(timeout=TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - the in-process compile at launch raises any real error
        logs.log("perf_hints", f"ember: Triton kernel {kernel.name} did not compile in a worker "
                               f"({type(e).__name__}: {e}); compiling it in-process")
        return None


def note_variant(kernel: Any, args: tuple) -> None:
    """A first launch whose arguments are not what the worker compiled for (a pointer not 16-byte aligned, or
    another dtype than the kernel's buffer): this variant compiles here. Counted, and said per kernel."""
    if _POOL is not None:
        with _POOL.lock:
            _POOL.variants += 1
    odd = [f"#{i} {a.dtype} at +{a.data_ptr() & 15}" for i, a in enumerate(args)
           if (a.data_ptr() & 15) or (i < len(kernel.worker_dtypes) and a.dtype != kernel.worker_dtypes[i])]
    logs.log("perf_hints", f"ember: Triton kernel {kernel.name} compiled here for its first launch's arguments "
                           f"({', '.join(odd)}; its worker compiled for {len(kernel.worker_dtypes)} aligned "
                           "pointers of its buffers' dtypes)")


def count_loaded() -> None:
    if _POOL is not None:
        with _POOL.lock:
            _POOL.loaded += 1


_WARNED: list[bool] = [False]


def check_hit(kernel: Any, worker_hash: str | None, compiled: Any) -> None:
    """After a kernel's first launch: it should have loaded what the worker compiled (same cache hash); if
    not, something in this process changed Triton's settings after the workers took theirs, and every
    kernel is compiled twice. Counted, and said once."""
    got = getattr(compiled, "hash", None)
    if worker_hash is None or got is None or got == worker_hash or _POOL is None:
        return
    with _POOL.lock:
        _POOL.mismatched += 1
    if not _WARNED[0]:
        _WARNED[0] = True
        logs.log("perf_hints", f"ember: Triton kernel {kernel.name} compiled again in-process under another "
                               "cache key than its worker's: a Triton setting of this process that the workers "
                               "do not see (an environment variable or knob set outside TRITON_*)")
