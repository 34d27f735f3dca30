"""The differential fuzzer (tools/fuzz) as a CI test: a fixed range of generated programs must behave the same
compiled as eager (values, dtypes, shapes, side effects on inputs, grads, printed text, exceptions), with the
"eager" backend (capture + guards + glue only) and with the default "ember" backend (the whole compiler).
On failure the message lists the minimized reproducers (standalone .py files, also written to the tmp dir).

Budget: in CI (pytest -n 2) the two campaigns run side by side; each is sized to stay under ~150 s on a
2-core machine with a cold kernel cache. The harness tests plant bugs (a backend that perturbs outputs, one
that raises) and check that the fuzzer reports them with a short reproducer.
"""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.fuzz.__main__ import summarize, write_reproducers  # noqa: E402
from tools.fuzz.compare import diff, stdout_diff  # noqa: E402
from tools.fuzz.driver import Campaign, Config  # noqa: E402
from tools.fuzz.gen import generate  # noqa: E402
from tools.fuzz.run import check, snapshot  # noqa: E402

# (backend, first seed, count). Sized for CI's budget: measured ~0.06 CPU-s per program with "eager" and
# ~1.1 CPU-s with "ember" (cold kernel cache), so ~130 CPU-s in all, ~70 s wall under pytest -n 2.
# The seed ranges pass on main except for known bugs being fixed in parallel: eager seeds 323, 440, 488, 578
# hit "a local unbound on one path, read at a later graph break's resume -> KeyError" (the zero-trip
# loop-variable KeyError's class). The ember ranges were picked where the campaign found no failure; the
# failures it found elsewhere are triaged in the fuzz report (extend these ranges as those get fixed).
# 300091-300130: from the issue-31 campaign (seeds 300000-300149 fail only at 300016 and 300090: a saved
# tensor vs an in-place write after a graph break, autograd's version check).
CAMPAIGNS = [("eager", 0, 600), ("ember", 1004, 47), ("ember", 1111, 37), ("ember", 300091, 40)]


def _campaign(backend, seed, count, tmp_path, minimize=True, max_minimized=3):
    cfg = Config(seed=seed, count=count, backends=(backend,), jobs=1, minimize=minimize, timeout=60.0,
                 minimize_seconds=60.0, max_minimized=max_minimized)
    done = Campaign(cfg).run()
    summary = summarize(done, (backend,))
    paths = write_reproducers(summary["classes"], str(tmp_path))
    return summary, paths


def _report(summary, paths) -> str:
    lines = []
    for (b, kind, aspect), items in summary["classes"].items():
        seeds = [s for _l, s, _d, _t in items]
        lines.append(f"{b} {kind} [{aspect}]: {len(items)} program(s), seeds {seeds}")
        lines.append(f"  {items[0][2]}")
    lines += [f"reproducer: {p}" for p in paths]
    first = sorted(paths, key=lambda p: os.path.getsize(p))[:3]
    for p in first:
        lines.append(f"---- {p}\n" + Path(p).read_text().split("\nINPUTS")[0])
    return "\n".join(lines)


@pytest.mark.parametrize("backend,seed,count", CAMPAIGNS, ids=[f"{b}-{s}" for b, s, _n in CAMPAIGNS])
def test_fuzz_campaign(backend, seed, count, tmp_path):
    summary, paths = _campaign(backend, seed, count, tmp_path)
    assert not summary["classes"], "compiled != eager on generated programs:\n" + _report(summary, paths)


# Single programs that once failed on the "ember" backend, each fixed at the root of its class (see the tests
# named): 320090, 320256, 320385 (backward), 330002 (call): writes into expanded tensors
# (tests/autograd/test_expanded_writes.py); 320314: a view output updated in place after a graph break
# (tests/autograd/test_view_outputs_inplace.py); 341232: zeros for a gradient with symbolic sizes
# (tests/autograd/test_unused_outputs_grads.py); 350265, 350314, 350820, 351005, 351044, 341019, 341059,
# 370485: a saved tensor's version checked where eager's backward never reads it (dead value, unused output,
# value the compiled forward saved that aliases an input or output: tests/autograd/test_saved_versions.py);
# 360755: the backward reached the history of an input no output depends on (same file); 380041: ``x[:]``
# returned as the input itself (tests/autograd/test_identity_views.py); 380329: a chunk of an input without
# grad, returned across a graph break, then its base updated in place with grad (eager raises:
# tests/autograd/test_view_outputs_inplace.py); 436867: a scalar view of a strided view output, clamped after
# a graph break (tests/capture/test_output_views.py); 431809: an input that is a view of another input, at another
# place in the storage on a later call (tests/autograd/test_aliased_input_views.py); 434911: two equal values
# stored once and returned as one buffer, one updated after a graph break (tests/capture/test_output_views.py);
# 475687: an expanded result with interleaved strides, written through after a graph break
# (tests/capture/test_expanded_outputs.py); 471969: a dead local across a graph break whose backward made nan
# (tests/capture/test_dead_locals.py); 472396: gradient reach through an in-place write of a value that requires
# grad into one that does not (tests/autograd/test_written_reach.py); 471320: an indirect index in a column
# reduction's per-point statements (tests/codegen/test_indirect_colred.py); 472024: an expanded result of a
# reduction, passed across a graph break and updated in place there (eager raises: elements share memory).
# 430626: memory eager saved for one output's gradient, read by the backward for another's; 431329: a
# compiled node no gradient reaches, called by autograd with none (tests/autograd/test_saved_versions.py);
# 432322, 434662: an input updated in place whose dims of size 1 have other strides than the traced layout's
# (tests/autograd/test_size_one_writes.py); 435416: a kernel body walked as a tree of 2**depth objects
# (compile timeout: tests/loopir/test_shared_chains.py); 450184: an amin's input recomputed in the backward, a
# last bit away from the forward's (tests/autograd/test_extremum_recompute.py); 510421: sympy's Mod of a product
# with a Mod factor (tests/loopir/test_mod_of_mod_indices.py). 520243 and 520367 (torch 2.11's meta kernel of
# linalg_vector_norm) are in tests/autograd/test_meta_fixups.py: this torch's kernel is right.
REGRESSION_SEEDS = [320090, 320256, 320385, 330002, 320314, 341232,
                    350265, 350314, 350820, 351005, 351044, 341019, 341059, 370485, 360755, 380041, 380329,
                    436867, 431809, 434911, 475687, 471969, 472396, 471320, 472024,
                    430626, 431329, 432322, 434662, 435416, 450184, 510421, 542337, 544349, 540421, 541379, 544811]


@pytest.mark.parametrize("seed", REGRESSION_SEEDS)
def test_fuzz_regression_seed(seed, tmp_path):
    summary, paths = _campaign("ember", seed, 1, tmp_path, minimize=False)
    assert not summary["classes"], "compiled != eager on a fixed fuzz seed:\n" + _report(summary, paths)


@pytest.mark.parametrize("planted,kind", [("tools.fuzz.selftest:perturb_backend", "wrong"),
                                          ("tools.fuzz.selftest:raising_backend", "crash")])
def test_harness_reports_a_planted_bug(planted, kind, tmp_path):
    summary, paths = _campaign(planted, 0, 6, tmp_path, max_minimized=1)
    kinds = {k for (_b, k, _a) in summary["classes"]}
    assert kind in kinds, summary
    assert paths, "no reproducer written"
    assert "def fn(" in _report(summary, paths)
    bodies = [Path(p).read_text().split("\nINPUTS")[0].split("def fn")[1] for p in paths]
    smallest = min(len(b.splitlines()) for b in bodies)
    assert smallest <= 6, "the minimizer left a long reproducer"


@pytest.mark.parametrize("seed", [307386])
def test_ill_conditioned_program_is_soft_not_wrong(seed):
    """A backend whose outputs are one ulp off (as accurate as eager, rounded differently) on a program that
    amplifies the last bit to percents (307386: ``t * tanh(sin(t))`` iterated at t ~ 1e3): eager itself moves as
    much under a 2-ulp change of its inputs, so this is no wrong result (the planted 0.5 error above still is)."""
    backend = "tools.fuzz.selftest:ulp_backend"
    res = check(generate(seed), (backend,))
    assert res["failures"][backend] is None, res["failures"][backend]
    assert res["soft"][backend] and res["soft"][backend][0].startswith("ill-conditioned"), res["soft"]


def test_generator_is_deterministic_and_mostly_valid():
    assert generate(7).source == generate(7).source
    assert generate(7).source != generate(8).source
    raised = [check(generate(seed), [])["eager_raised"] for seed in range(60)]     # eager only
    assert "timeout" not in raised
    assert sum(r is not None for r in raised) <= 15, raised      # most programs are valid


@pytest.mark.parametrize("a,b,differs", [
    ((1.0, 2), (1.0, 2), False), ((1.0,), (1.001,), False), ((1.0,), (1.1,), True), ([1], (1,), True),
    ({"a": 1}, {"b": 1}, True), (float("nan"), float("nan"), False), ((True,), (1,), True),
])
def test_compare_python_values(a, b, differs):
    assert bool(diff(snapshot(a), snapshot(b))) == differs


def test_compare_tensors_and_stdout():
    import torch
    t = torch.randn(3, 4)
    assert diff(snapshot(t), snapshot(t + 1e-6)) is None
    assert "values" in diff(snapshot(t), snapshot(t + 0.1))
    assert "shape" in diff(snapshot(t), snapshot(t.reshape(4, 3)))
    assert "dtype" in diff(snapshot(t), snapshot(t.double()))
    assert stdout_diff("s 1.23456\n", "s 1.234561\n") is None
    assert stdout_diff("s 1.2\n", "s 1.5\n")
    assert stdout_diff("a\n", "b\n")


@pytest.mark.parametrize("needed", [[3], [0, 9], [2, 5, 7], []])
def test_ddmin_finds_the_needed_statements(needed):
    from tools.fuzz.minimize import _Budget, ddmin
    items = list(range(10))
    got = ddmin(items, lambda sub: set(needed) <= set(sub), _Budget(500, 60.0))
    assert got == needed


@pytest.mark.parametrize("planted,kind", [("tools.fuzz.selftest:hanging_backend", "timeout"),
                                          ("tools.fuzz.selftest:dying_backend", "died")])
def test_harness_survives_hangs_and_dead_workers(planted, kind, tmp_path):
    cfg = Config(seed=0, count=2, backends=(planted,), jobs=1, timeout=3.0)
    done = Campaign(cfg).run()
    assert sorted(done) == [0, 1]
    assert all(kind in {f.kind for _b, f, _t, _n in d["failures"]} for d in done.values()), done
