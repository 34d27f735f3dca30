"""Fuzz campaign driver: worker processes (spawned, so a crashing kernel or a hang kills only a worker),
per-program deadlines enforced by the parent, minimization in the worker, reproducers and a summary.

A worker reports ``("start", seed)`` / ``("minimize", seed)`` / ``("done", seed, result)``. The parent kills a
worker whose current program outlives its deadline (class ``timeout``) and records a worker that exits
mid-program as ``died``; both are respawned and the campaign goes on.
"""
from __future__ import annotations

import collections
import dataclasses
import multiprocessing as mp
import os
import queue
import time

from .compare import Failure


@dataclasses.dataclass(frozen=True)
class Config:
    seed: int = 0
    count: int = 100
    backends: tuple = ("ember", "eager")
    jobs: int = 1
    out: str | None = None
    minimize: bool = False
    timeout: float = 60.0              # per backend run of one program (in the worker)
    minimize_seconds: float = 300.0    # per failure
    max_minimized: int = 50            # minimize at most this many failures (the rest keep their full source)
    minimize_per_class: int = 2        # ... and at most this many of one class (backend, kind, aspect)


def _work_one(seed: int, cfg: Config, minimize_ok: bool, report, skip=frozenset()) -> dict:
    from .gen import generate
    from .repro import render
    from .run import check
    prog = generate(seed)
    res = check(prog, cfg.backends, cfg.timeout)
    ill = sum(1 for v in res["soft"].values() if v and str(v[0]).startswith("ill-conditioned"))
    out = {"seed": seed, "failures": [], "soft": sum(bool(v) for v in res["soft"].values()) - ill, "ill": ill,
           "eager_timeout": res["eager_timeout"], "eager_raised": res["eager_raised"]}
    for backend, f in res["failures"].items():
        if f is None:
            continue
        small = prog
        if minimize_ok and f.kind not in ("timeout",) and (backend,) + f.key not in skip:
            report(("minimize", seed))
            from .minimize import minimize
            small = minimize(prog, backend, f, cfg.timeout, max_seconds=cfg.minimize_seconds)
        out["failures"].append((backend, f, render(small, backend, f), small.source.count("\n")))
    return out


def worker(wid, tasks, results, cfg: Config):
    import warnings
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRITON_INTERPRET", "1")
    while True:
        item = tasks.get()
        if item is None:
            return
        seed, minimize_ok, skip = item
        try:
            out = _work_one(seed, cfg, minimize_ok, lambda msg: results.put((wid,) + msg), skip)
        except BaseException as e:     # the harness itself: report, keep going
            out = {"seed": seed, "failures": [("harness", Failure("crash", f"harness {type(e).__name__}",
                                                                   str(e)[:200]), "", 0)], "soft": 0}
        results.put((wid, "done", seed, out))


class Campaign:
    """Each worker has its own task queue, so the parent always knows which seed a worker is on."""

    def __init__(self, cfg: Config, progress=None):
        self.cfg, self.progress = cfg, progress
        self.ctx = mp.get_context("spawn")
        self.results = self.ctx.Queue()
        self.workers: dict[int, list] = {}      # id -> [process, task queue, seed, started, minimizing]
        self.done: dict[int, dict] = {}

    def _spawn(self, wid: int):
        q = self.ctx.Queue()
        p = self.ctx.Process(target=worker, args=(wid, q, self.results, self.cfg), daemon=True)
        p.start()
        self.workers[wid] = [p, q, None, 0.0, False]

    def _deadline(self, w) -> float:
        base = self.cfg.timeout * (1 + len(self.cfg.backends)) + 60
        return base + (self.cfg.minimize_seconds + 120 if w[4] else 0)

    def _on_message(self, msg):
        w = self.workers.get(msg[0])
        if msg[1] == "done":
            self.done[msg[2]] = msg[3]
            if self.progress:
                self.progress(len(self.done), msg[3])
            if w is not None and w[2] == msg[2]:
                w[2] = None
        elif msg[1] == "minimize" and w is not None:
            w[4] = True

    def _reap(self):
        for wid, w in list(self.workers.items()):
            p, _, seed, started, _ = w
            dead = not p.is_alive()
            late = seed is not None and time.monotonic() - started > self._deadline(w)
            if (dead or late) and seed is not None and seed not in self.done:
                if late and not dead:
                    p.kill()
                    p.join(timeout=5)
                kind = "timeout" if late else "died"
                self.done[seed] = {"seed": seed, "soft": 0, "failures": [
                    ("?", Failure(kind, kind, f"worker exit code {p.exitcode}"), _unminimized(seed, kind),
                     0)]}
            if dead or late:
                self._spawn(wid)

    def _minimized_so_far(self) -> int:
        return sum(len(d["failures"]) for d in self.done.values())

    def _skip(self) -> frozenset:
        """Failure classes (backend, kind, aspect) already seen ``per_class`` times: not minimized again."""
        seen = collections.Counter((str(b),) + f.key for d in self.done.values()
                                   for b, f, _t, _n in d["failures"])
        return frozenset(k for k, n in seen.items() if n >= self.cfg.minimize_per_class)

    def run(self) -> dict:
        seeds = list(range(self.cfg.seed, self.cfg.seed + self.cfg.count))
        for wid in range(max(1, self.cfg.jobs)):
            self._spawn(wid)
        pending = collections.deque(seeds)
        while len(self.done) < len(seeds):
            for w in self.workers.values():
                if w[2] is None and pending:
                    seed = pending.popleft()
                    w[2], w[3], w[4] = seed, time.monotonic(), False
                    w[1].put((seed, self.cfg.minimize and self._minimized_so_far() < self.cfg.max_minimized,
                              self._skip()))
            try:
                self._on_message(self.results.get(timeout=1.0))
            except queue.Empty:
                pass
            self._reap()
        for w in self.workers.values():
            w[1].put(None)
        for w in self.workers.values():
            w[0].join(timeout=10)
            if w[0].is_alive():
                w[0].kill()
        return self.done


def _unminimized(seed: int, kind: str) -> str:
    from .gen import generate
    from .repro import render
    prog = generate(seed)
    return render(prog, "ember", Failure(kind, kind, "the whole generated program (not minimized)"))
