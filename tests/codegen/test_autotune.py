"""max-autotune for generated Triton kernels (``ember.codegen.autotune``), under Triton's interpreter here.

Every candidate configuration must compute what eager computes: the table's cases run with the choice forced to
the first, a middle and the last candidate (fake timings), so looped forms of persistent reductions, other block
sizes and masks all run. The choice is recorded on disk and a second compile reuses it without timing anything;
values stored in place are timed on copies, so the real tensors see one run.
"""
from __future__ import annotations

import json

import pytest
import torch

from ember.codegen import autotune
from ember.options import CompileOptions
from tests.codegen.test_triton import HAVE_TRITON, _bodies, _rn, check_case

pytestmark = [
    pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed (pip install triton)"),
    pytest.mark.skipif(HAVE_TRITON and torch.cuda.is_available(),
                       reason="CUDA machine: Triton compiles here; tests/gpu covers max-autotune"),
]

TUNED = CompileOptions(cpu_backend="triton", max_autotune=True)

CASES = ["pointwise_chain", "broadcast", "softmax", "layer_norm", "reductions_inner_outer_all", "looped_inner",
         "looped_outer", "cross_entropy", "uneven_sizes", "offset_inputs", "var_mean"]


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "_CHOICES", {})
    return tmp_path


def _force(monkeypatch, which: str) -> list[int]:
    """Fake timings that make ``which`` ('first', 'middle', 'last') candidate the fastest; returns the number of
    candidates each tuned kernel had."""
    seen: list[int] = []

    def tune(self, args):
        n = len(self.choices)
        seen.append(n)
        best = {"first": 0, "middle": n // 2, "last": n - 1}[which]
        autotune._save(self.key, {"choice": best, "name": self.name, "labels": self.labels})
        return best
    monkeypatch.setattr(autotune.Autotuned, "tune", tune)
    return seen


@pytest.mark.parametrize("which", ["middle", "last"])  # "first" is the default table
@pytest.mark.parametrize("name", CASES)
def test_every_candidate_matches_eager(name, which, fresh_cache, monkeypatch):
    seen = _force(monkeypatch, which)
    check_case(name, opts=TUNED)
    assert seen and max(seen) > 1, f"{name}: nothing was tuned"


def test_reductions_try_the_looped_form(fresh_cache):
    from ember.codegen import triton as tb
    (body,) = _bodies(lambda x: torch.softmax(x, -1), [_rn(8, 1024)])
    labels = [lab for lab, _ in tb._candidates(body)]
    assert labels[0].startswith("persistent") and any(lab.startswith("looped") for lab in labels), labels
    assert len(set(labels)) == len(labels)


def test_choice_recorded_and_reused(fresh_cache, monkeypatch):
    timed: list[str] = []
    real = autotune.time_calls

    def counting(fns, device):
        timed.append("x")
        return real(fns, device)
    monkeypatch.setattr(autotune, "time_calls", counting)
    check_case("softmax", opts=TUNED)
    records = [json.loads(p.read_text()) for p in (fresh_cache / "autotune").glob("*.json")]
    assert records and all(0 <= r["choice"] < len(r["labels"]) for r in records)
    assert all(len(r["times_us"]) == len(r["labels"]) for r in records)
    n = len(timed)
    assert n >= 1
    monkeypatch.setattr(autotune, "_CHOICES", {})       # a new process: only the disk remembers
    check_case("softmax", opts=TUNED)
    assert len(timed) == n, "a recorded choice was timed again"


def test_in_place_arguments_are_timed_on_copies(fresh_cache):
    calls: list[torch.Tensor] = []

    def add_one(x: torch.Tensor) -> None:
        calls.append(x)
        x.add_(1)
    x = torch.zeros(4)
    tuned = autotune.Autotuned([add_one, add_one], "k" * 32, "add_one", scratch=[0])
    tuned(x)
    assert torch.equal(x, torch.ones(4)), "the real tensor was written more than once"
    assert sum(c is x for c in calls) == 1


def test_failing_candidate_is_skipped(fresh_cache):
    def bad(x):
        raise RuntimeError("does not compile")

    def good(x):
        x.fill_(3)
    x = torch.zeros(2)
    tuned = autotune.Autotuned([bad, good], "b" * 32, "k", labels=["bad", "good"])
    tuned(x)
    assert tuned.chosen is good and torch.equal(x, torch.full((2,), 3.0))


def test_a_reduction_stored_in_place_still_tries_the_looped_form(fresh_cache):
    """A kernel taking one pointer for a value stored over its input (``share_pointers``) builds its looped
    candidates with the same parameters, so they are tried, and compute what the persistent form does."""
    from ember.codegen import triton as tb
    from ember.loopir.kernel import share_pointers
    (body,) = _bodies(lambda x: torch.softmax(x, -1), [_rn(2, 512)])
    (x_name, _), (out_name, _) = body.buffers.items()
    body.aliased = {x_name, out_name}           # the probabilities written over the scores they are made from
    body.memory = {x_name: x_name, out_name: x_name}
    share_pointers(body)
    assert list(body.buffers) == [x_name] and body.shared == [out_name]
    cands = tb._candidates(body)
    assert any(lab.startswith("looped") for lab, _ in cands), [lab for lab, _ in cands]
    x = _rn(2, 512)
    want = torch.softmax(x, -1)
    for lab, kernel in cands:
        y = x.clone()
        kernel(y)
        torch.testing.assert_close(y, want, msg=lab)
