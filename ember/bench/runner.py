"""The benchmark loop: for each model x task x dtype, run every engine side by side in this one process.

One *case* is a (model, task, dtype). Its engines each get a fresh copy of the same randomly initialised model
and the same inputs. In order:

1. cold compile: the first call of each engine, timed (eager runs first: its results are the reference);
2. warm-up calls; the last one's outputs (and gradients) are checked against eager's (``measure.compare``);
3. interleaved timing of every engine that ran, each call from an idle device; speedup = eager's median / the
   engine's median;
4. peak memory of one call per engine;
5. warm compile: where the engine has a disk cache, drop its in-memory caches and compile again.

Any exception an engine raises is recorded on its row (``status = "failed"``, the error's first line) and the
run goes on. A ``Result`` row is one case x engine.
"""
from __future__ import annotations

import contextlib
import copy
import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from . import measure
from .engines import Engine
from .measure import Verdict, compare, first_line, flatten, wall_time
from .workload import Inputs, Workload, ZooEntry

TASKS = ("infer", "train")
DTYPES = {"float32": None, "bf16": torch.bfloat16}
TOLERANCE = {("float32", "infer"): 1e-4, ("float32", "train"): 1e-4,
             ("bf16", "infer"): 1e-2, ("bf16", "train"): 1e-2}


@dataclass
class RunSettings:
    suite: str
    device: torch.device
    engines: list[Engine]
    warmup: int = 3              # calls after the cold one; the last is checked for correctness
    min_reps: int = 5
    max_reps: int = 50
    timing_budget_s: float = 1.0  # per case, all engines together
    seed: int = 0


@dataclass
class Result:
    model: str
    family: str
    task: str
    dtype: str
    engine: str
    device: str
    status: str = "ok"           # ok | incorrect | failed | skipped
    error: str = ""
    correct: bool | None = None
    max_err: float | None = None
    checked_against: str = ""
    tol: float | None = None
    time_ms: float | None = None      # median over interleaved calls
    spread: float | None = None       # interquartile range of those calls / median
    reps: int | None = None
    speedup: float | None = None
    compile_s: float | None = None
    warm_compile_s: float | None = None
    warm_cache: str = ""
    peak_mem_mb: float | None = None
    held_mem_mb: float | None = None  # device memory held between calls (the model's copy, CUDA graph pools)
    graphs: int | None = None
    graph_breaks: int | None = None
    params_m: float | None = None
    notes: str = ""

    def fail(self, error: str) -> Result:
        self.status, self.error = "failed", error
        return self


@dataclass
class EngineRun:
    """One engine's state inside a case."""
    engine: Engine
    row: Result
    step: Callable[[], Any] | None = None
    last: Any = None
    per_call_s: float = 0.0
    counters: dict[str, int] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------- steps
def autocast_ctx(dtype: str, device: torch.device):
    if DTYPES[dtype] is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[dtype])


def zoo_case(name: str, suite: str, device: torch.device, task: str, batch: int | None = None, seed: int = 0
             ) -> tuple[Workload, torch.nn.Module, Inputs]:
    """One zoo model built on ``device`` (seeded, in train or eval mode for ``task``, at ``batch`` when given)
    and its inputs: what the diagnosis scripts under bench/ start from."""
    from .zoo import select_models
    (entry,), _ = select_models(suite, [name])
    if batch:
        entry.configs[suite]["batch"] = batch
    torch.manual_seed(seed)
    w = entry.build(suite, device)
    model = w.model.to(device)
    model.train(task == "train")
    return w, model, w.make_inputs(seed, device)


def make_step(engine: Engine, model: torch.nn.Module, w: Workload, inputs: Inputs, task: str, dtype: str,
              device: torch.device) -> Callable[[], Any]:
    """A thunk running one inference call (the module compiled) or one training step (forward + loss compiled,
    then gradients of every parameter by autograd)."""
    if task == "infer":
        fn = engine.wrap(model)

        def infer():
            with torch.no_grad(), autocast_ctx(dtype, device):
                return fn(*inputs.args, **inputs.kwargs)
        infer.compiled = fn
        return infer
    params = [p for p in model.parameters() if p.requires_grad]
    loss_fn = w.loss

    def forward_loss(target, *args, **kwargs):
        return loss_fn(model(*args, **kwargs), target)
    compiled = engine.wrap(forward_loss)

    def train():
        with autocast_ctx(dtype, device):
            loss = compiled(inputs.target, *inputs.args, **inputs.kwargs)
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        return loss.detach(), grads
    train.compiled = compiled
    return train


def _to64(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.double() if x.is_floating_point() else x
    if isinstance(x, dict):
        return {k: _to64(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_to64(v) for v in x)
    return x


def fp64_reference(base: torch.nn.Module, w: Workload, inputs: Inputs, task: str,
                   device: torch.device) -> Callable[[], Any]:
    """A thunk computing the eager fp64 result once (lazily: only a failed comparison needs it)."""
    memo: list[Any] = []

    def get():
        if not memo:
            m = copy.deepcopy(base).double()
            inp = Inputs(_to64(inputs.args), _to64(inputs.kwargs), inputs.target)
            memo.append(make_step(Engine("eager"), m, w, inp, task, "float32", device)())
        return memo[0]
    return get


def _note(row: Result, text: str) -> None:
    row.notes = f"{row.notes}; {text}" if row.notes else text


_WORKER_MISMATCHES = [0]


def _note_compile_workers(r: EngineRun) -> None:
    """Note on an ember row when Triton kernels its compile workers built were compiled again in this process
    (another cache key: a Triton setting the workers did not see), which makes its cold compile slow."""
    if r.engine.frontend != "ember":
        return
    import sys
    pool_mod = sys.modules.get("ember.codegen.triton_pool")
    pool = getattr(pool_mod, "_POOL", None)
    if pool is None:
        return
    new = pool.mismatched - _WORKER_MISMATCHES[0]
    _WORKER_MISMATCHES[0] = pool.mismatched
    if new:
        _note(r.row, f"{new} Triton kernels compiled twice (worker and in-process cache keys differ)")


def first_line_of(text: str) -> str:
    text = str(text).strip()
    return (text.splitlines()[0] if text else "")[:240]


def count_params(model: torch.nn.Module) -> float:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()) / 1e6


# ------------------------------------------------------------------------------------------- one case
class Case:
    def __init__(self, entry: ZooEntry, task: str, dtype: str, s: RunSettings,
                 progress: Callable[[str], None]):
        self.entry, self.task, self.dtype, self.s, self.progress = entry, task, dtype, s, progress
        self.runs = [EngineRun(e, Result(entry.name, entry.family, task, dtype, e.name, s.device.type,
                                         tol=TOLERANCE[(dtype, task)])) for e in s.engines]

    def run(self) -> list[Result]:
        try:
            self.progress("building")
            w = self.entry.build(self.s.suite, self.s.device, self.s.seed)
            w.model.train(self.task == "train")
            inputs = w.make_inputs(self.s.seed + 1, self.s.device)
        except Exception as e:  # noqa: BLE001 - recorded on the row, never fatal
            return [r.row.fail(f"building the model failed: {first_line(e)}") for r in self.runs]
        for r in self.runs:
            r.row.params_m = round(count_params(w.model), 3)
        try:
            self._run(w, inputs)
        finally:
            self._cleanup()
        return [r.row for r in self.runs]

    def _run(self, w: Workload, inputs: Inputs) -> None:
        eager = self.runs[0]
        for r in self.runs:  # one engine after the other, so each one's counter differences are its own
            base = measure.held_memory_mb(self.s.device)
            self._cold(r, w, inputs)
            if r.row.status != "failed":
                self._warm_up(r)
                held = measure.held_memory_mb(self.s.device)
                if base is not None and held is not None:
                    r.row.held_mem_mb = round(held - base, 1)
            if r is eager and r.row.status == "failed":
                for other in self.runs[1:]:
                    other.row.fail(f"eager failed: {r.row.error}")
                return
        ref64 = fp64_reference(w.model, w, inputs, self.task, self.s.device)
        for r in self._ok()[1:]:
            self._check(r, eager, ref64)
        self._time()
        for r in self._ok():
            self._memory(r)
        for r in self._ok()[1:]:
            self._warm_compile(r, w, inputs)

    def _ok(self) -> list[EngineRun]:
        return [r for r in self.runs if r.row.status != "failed"]

    def _cold(self, r: EngineRun, w: Workload, inputs: Inputs) -> None:
        self.progress(f"compiling {r.engine.name}" if r.engine.compiles else "eager")
        before = r.engine.counters()
        try:
            model = copy.deepcopy(w.model)
            r.step = make_step(r.engine, model, w, inputs, self.task, self.dtype, self.s.device)
            secs, r.last = wall_time(r.step, self.s.device)
        except Exception as e:  # noqa: BLE001 - recorded on the row, never fatal
            r.row.fail(first_line(e))
            return
        if r.engine.compiles:
            r.row.compile_s = secs
        r.counters = before
        _note_compile_workers(r)

    def _warm_up(self, r: EngineRun) -> None:
        times = []
        try:
            for _ in range(max(1, self.s.warmup)):
                t, r.last = wall_time(r.step, self.s.device)
                times.append(t)
        except Exception as e:  # noqa: BLE001 - recorded on the row, never fatal
            r.row.fail(f"call after compiling: {first_line(e)}")
            return
        r.per_call_s = statistics.median(times)
        # a copy: later calls may reuse output memory (CUDA graphs), and the check comes after all engines ran
        r.last = [t.detach().clone() for t in flatten(r.last)]
        if r.engine.compiles:
            self._record_graphs(r)

    def _record_graphs(self, r: EngineRun) -> None:
        """Graphs and breaks since this engine's cold call (recompiles during warm-up included), and why."""
        after = r.engine.counters()
        r.row.graphs = after["graphs"] - r.counters["graphs"]
        r.row.graph_breaks = after["graph_breaks"] - r.counters["graph_breaks"]
        fallbacks = after["fallbacks"] - r.counters["fallbacks"]
        if fallbacks:
            _note(r.row, f"{fallbacks} fallback(s) to eager")
        if r.row.graphs == 0:
            _note(r.row, "ran eagerly (no graph)")
        reasons = [first_line_of(x) for x in r.engine.break_reasons(r.step.compiled, r.counters)]
        if reasons:
            more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
            _note(r.row, f"break: {reasons[0]}{more}")

    def _check(self, r: EngineRun, eager: EngineRun, ref64: Callable[[], Any]) -> None:
        self.progress(f"checking {r.engine.name}")
        try:
            v = compare(r.last, eager.last, r.row.tol, ref64)
        except Exception as e:  # noqa: BLE001 - recorded on the row, never fatal
            v = Verdict(False, float("nan"), "eager", f"comparison raised {first_line(e)}")
        r.row.correct, r.row.max_err, r.row.checked_against = v.correct, v.max_err, v.against
        if not v.correct:
            r.row.status = "incorrect"
            r.row.error = v.detail
        r.last = None

    def _time(self) -> None:
        runs = self._ok()
        self.progress(f"timing {len(runs)} engines")
        reps = measure.choose_reps(sum(r.per_call_s for r in runs), self.s.timing_budget_s, self.s.min_reps,
                           self.s.max_reps)
        timings, errors = measure.time_interleaved({r.engine.name: r.step for r in runs}, self.s.device, reps,
                                                   idle_start=True)
        for r in runs:
            if r.engine.name in errors:
                r.row.fail(f"while timing: {errors[r.engine.name]}")
            else:
                t = timings[r.engine.name]
                r.row.time_ms, r.row.spread, r.row.reps = t.median_ms, round(t.spread, 4), t.samples
        eager_ms = self.runs[0].row.time_ms
        for r in self._ok():
            if eager_ms and r.row.time_ms:
                r.row.speedup = eager_ms / r.row.time_ms

    def _memory(self, r: EngineRun) -> None:
        try:
            r.row.peak_mem_mb = measure.peak_memory_mb(r.step, self.s.device)
        except Exception as e:  # noqa: BLE001 - recorded on the row, never fatal
            _note(r.row, f"memory: {first_line(e)}")

    def _warm_compile(self, r: EngineRun, w: Workload, inputs: Inputs) -> None:
        cache = r.engine.disk_cache()
        if cache is None:
            return
        self.progress(f"warm compile {r.engine.name}")
        try:
            r.engine.reset()
            model = copy.deepcopy(w.model)
            step = make_step(r.engine, model, w, inputs, self.task, self.dtype, self.s.device)
            r.row.warm_compile_s, _ = wall_time(step, self.s.device)
            r.row.warm_cache = cache
        except Exception as e:  # noqa: BLE001 - recorded on the row, never fatal
            _note(r.row, f"warm compile: {first_line(e)}")

    def _cleanup(self) -> None:
        for r in self.runs:
            r.step = r.last = None
            if r.engine.compiles:
                with contextlib.suppress(Exception):
                    r.engine.reset()  # also keeps torch.compile's per-code recompile limit from filling up
        gc.collect()
        if self.s.device.type == "cuda":
            torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------- the loop
def plan(entries: list[ZooEntry], tasks: list[str], dtypes: list[str]) -> list[tuple[ZooEntry, str, str]]:
    return [(e, t, d) for e in entries for t in tasks for d in dtypes]


def skipped_rows(entry: ZooEntry, task: str, dtype: str, s: RunSettings, why: str) -> list[Result]:
    return [Result(entry.name, entry.family, task, dtype, e.name, s.device.type, status="skipped", error=why)
            for e in s.engines]


def _estimate(durations: dict[str, list[float]], task: str) -> float:
    """Expected seconds of the next case of ``task``: the mean of earlier ones (of that task when any ran)."""
    same = durations.get(task) or [d for ds in durations.values() for d in ds]
    return sum(same) / len(same) if same else 0.0


def run_all(cases: list[tuple[ZooEntry, str, str]], s: RunSettings, progress, on_rows: Callable,
            budget_s: float | None = None) -> list[Result]:
    """Run every case; ``progress(i, n, label)`` is told what runs, ``on_rows(rows)`` gets each case's rows.
    With ``budget_s``, a case that would likely end past the budget is skipped (and says so)."""
    start, rows, durations = time.perf_counter(), [], {}
    progress(0, len(cases), "starting the compilers")
    for e in s.engines:
        try:
            e.warm_up(s.device)
        except Exception:  # noqa: BLE001, S110 - the engine's own rows will show what fails
            pass
    for i, (entry, task, dtype) in enumerate(cases):
        label = f"{entry.name} {task} {dtype}"
        t0 = time.perf_counter()
        if budget_s and t0 - start + _estimate(durations, task) > budget_s:
            new = skipped_rows(entry, task, dtype, s, f"would not finish within --budget-s {budget_s:g}")
        else:
            new = Case(entry, task, dtype, s, lambda what, i=i, label=label: progress(i, len(cases),
                                                                                    f"{label}: {what}")).run()
            durations.setdefault(task, []).append(time.perf_counter() - t0)
        rows += new
        on_rows(new)
        progress(i + 1, len(cases), label)
    return rows

