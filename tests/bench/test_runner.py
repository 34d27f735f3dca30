"""The runner on one tiny model: rows carry correctness, timing, compile and graph fields; a failing engine is
a failed row, not a crash; the comparison falls back to fp64 when eager's own rounding is in doubt."""
import torch

from ember.bench import measure
from ember.bench.engines import Engine, parse_engines
from ember.bench.runner import RunSettings, plan, run_all
from ember.bench.zoo import HANDWRITTEN

CPU = torch.device("cpu")
MLP = HANDWRITTEN[0]


def _settings(engines):
    return RunSettings("quick", CPU, engines, warmup=1, min_reps=2, max_reps=3, timing_budget_s=0.01)


def _run(engines, tasks=("infer", "train"), budget_s=None):
    got = []
    rows = run_all(plan([MLP], list(tasks), ["float32"]), _settings(engines), lambda *a: None, got.extend,
                   budget_s=budget_s)
    assert got == rows
    return rows


def test_eager_and_ember_rows():
    rows = _run(parse_engines(["eager", "ember"], []))
    assert [(r.task, r.engine) for r in rows] == [("infer", "eager"), ("infer", "ember"),
                                                  ("train", "eager"), ("train", "ember")]
    for r in rows:
        assert r.status == "ok", r
        assert r.time_ms > 0 and r.speedup > 0 and r.reps >= 2 and r.params_m > 0
    for r in rows[1::2]:
        assert r.correct is True and r.checked_against == "eager" and r.max_err <= 1e-4
        assert r.graphs == 1 and r.graph_breaks == 0 and r.compile_s > 0
        # ember's kernel cache on disk (C++ .so): a warm compile is measured (here the "cold" compile may hit the
        # cache of an earlier run too: this runner does not point the caches at a fresh folder, the CLI does)
        assert r.warm_compile_s is not None and r.warm_compile_s > 0 and r.warm_cache.startswith("ember")
    assert rows[0].compile_s is None and rows[0].speedup == 1.0


class Boom(Engine):
    def wrap(self, target):
        raise RuntimeError("boom\nsecond line")


def test_a_failing_engine_is_recorded_not_raised():
    rows = _run([Engine("eager"), Boom("ember", "eager")], tasks=("infer",))
    assert rows[0].status == "ok"
    assert rows[1].status == "failed" and rows[1].error == "RuntimeError: boom" and rows[1].time_ms is None


def test_budget_skips_cases_that_would_not_fit():
    rows = _run([Engine("eager")], budget_s=1e-9)
    assert [r.status for r in rows] == ["skipped", "skipped"] and "budget" in rows[1].error


def test_compare_uses_fp64_when_eager_is_in_doubt():
    exact = torch.linspace(0, 1, 100, dtype=torch.float64)
    eager = exact + 1e-3                                     # eager is off by 1e-3
    res_good = exact - 1e-3                                  # as far from fp64 as eager: fine
    res_bad = exact + 1e-1
    assert measure.compare(eager.clone(), eager, 1e-4).correct
    v = measure.compare(res_good, eager, 1e-4, lambda: exact)
    assert v.correct and v.against == "fp64"
    v = measure.compare(res_bad, eager, 1e-4, lambda: exact)
    assert not v.correct and "further from fp64" in v.detail
    assert not measure.compare((eager,), (eager, eager), 1e-4).correct


def test_flatten_outputs():
    t = torch.ones(2)
    assert len(measure.flatten({"a": t, "b": (t, None, [t]), "c": 3})) == 3


def test_peak_memory_is_measured_on_cpu():
    mb = measure.peak_memory_mb(lambda: torch.ones(64, 1024, 1024).sum(), CPU)
    assert mb is None or mb > 100  # 256 MB allocated and touched; None only where /proc cannot be reset
