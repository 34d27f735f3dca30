"""A min-cut partition that fails is not silent: the graph still compiles, its forward saving every value the
backward reads (the baseline partition), ``ember.stats()["partition_fallbacks"]`` counts it, and
``EMBER_LOGS=perf_hints`` says why, once per reason. Before, the failure sent the graph to eager autograd,
uncounted. The failure is forced (the min cut raising); values and gradients still equal eager's."""
from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import ember
from ember.autograd import partition


class Mlp(torch.nn.Module):
    def __init__(self, d=16, p=0.0):
        super().__init__()
        self.l1, self.l2, self.p = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d), p

    def forward(self, x):
        return x + self.l2(F.dropout(F.gelu(self.l1(x)), self.p, self.training))


class Chain(torch.nn.Module):
    def __init__(self, n=3, ckpt=True, p=0.0):
        super().__init__()
        self.blocks, self.ckpt = torch.nn.ModuleList(Mlp(p=p) for _ in range(n)), ckpt

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False) if self.ckpt else b(x)
        return x.pow(2).mean()


MODELS = {"plain": lambda: Chain(ckpt=False), "checkpointed": lambda: Chain(),
          "checkpointed_dropout": lambda: Chain(p=0.3)}
FAILURES = {"no_cut": partition.PartitionError("no finite cut: forced by the test"),
            "bug": RuntimeError("min cut crashed: forced by the test")}


class _Logs(logging.Handler):
    def __init__(self):
        super().__init__()
        self.msgs = []

    def emit(self, record):
        self.msgs.append(record.getMessage())


@pytest.fixture
def logs():
    ember.reset()
    handler = _Logs()
    logging.getLogger("ember").addHandler(handler)
    ember.set_logs(perf_hints=True)
    yield handler.msgs
    ember.set_logs(perf_hints=False)
    logging.getLogger("ember").removeHandler(handler)
    ember.reset()


def _step(m, x):
    torch.manual_seed(7)
    x = x.clone().requires_grad_()
    loss = m(x)
    loss.backward()
    return [loss.detach(), x.grad] + [p.grad.clone() for p in m.parameters()]


def _fail_with(monkeypatch, exc, tag):
    def fail(*args, **kwargs):
        raise type(exc)(f"{exc} ({tag})")
    monkeypatch.setattr(partition, "_weighted_cut", fail)


# every model and failure through AOT autograd; one model through ember's kernels (the partition is the same)
CASES = [(m, f, "aot_eager") for m in MODELS for f in FAILURES] + \
    [("checkpointed_dropout", f, "ember") for f in FAILURES]


@pytest.mark.parametrize("model,failure,backend", CASES, ids=["-".join(c) for c in CASES])
def test_a_failed_min_cut_is_counted_logged_once_and_still_compiled(model, failure, backend, logs, monkeypatch):
    _fail_with(monkeypatch, FAILURES[failure], f"{model}-{failure}-{backend}")
    torch.manual_seed(0)
    ref = MODELS[model]()
    got = []
    for i in range(2):          # two graphs fail for the same reason: counted twice, said once
        ember.reset()
        m = MODELS[model]()
        m.load_state_dict(ref.state_dict())
        x = torch.randn(4, 8, 16)
        want = _step(ref, x)
        for p in ref.parameters():
            p.grad = None
        got = _step(ember.compile(m, backend=backend), x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        s = ember.stats()
        assert s["partition_fallbacks"] == 1 and s["graphs_compiled"] == 1 and s["fallbacks_to_eager"] == 0, s
    said = [msg for msg in logs if "min-cut partitioner failed" in msg]
    assert len(said) == 1 and f"{model}-{failure}-{backend}" in said[0], logs
    assert not [msg for msg in logs if "runs with eager autograd" in msg], logs


@pytest.mark.parametrize("model", list(MODELS))
def test_no_fallback_counted_when_the_min_cut_succeeds(model, logs):
    torch.manual_seed(0)
    _step(ember.compile(MODELS[model](), backend="aot_eager"), torch.randn(4, 8, 16))
    assert ember.stats()["partition_fallbacks"] == 0
    assert not [msg for msg in logs if "min-cut partitioner failed" in msg], logs
