"""mode="reduce-overhead" and backend="cudagraphs" on CUDA: recorded graphs replayed, equal to eager (inference
and training), overwritten outputs detected, CPU tensors fall back.

Run on the device machine: ``python -m pytest -q tests/gpu/test_cudagraphs.py``.
"""
from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ember  # noqa: E402
from ember import logs  # noqa: E402
from ember.runtime import cudagraphs as cg  # noqa: E402
from tests.models import gpt_factory, gpt_loss, mlp_factory  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
              pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")]

BACKENDS = [{"mode": "reduce-overhead"}, {"backend": "cudagraphs"}]
IDS = ["reduce-overhead", "backend-cudagraphs"]


@pytest.fixture
def counts(monkeypatch):
    """How many graphs were recorded and replayed (through the real CudaOps)."""
    n = {"record": 0, "replay": 0}
    rec, rep = cg.CudaOps.record, cg.CudaOps.replay

    def record(self, *a, **k):
        n["record"] += 1
        return rec(self, *a, **k)

    def replay(self, g):
        n["replay"] += 1
        return rep(self, g)
    monkeypatch.setattr(cg.CudaOps, "record", record)
    monkeypatch.setattr(cg.CudaOps, "replay", replay)
    ember.reset()
    return n


@pytest.fixture
def hints(monkeypatch):
    got: list[str] = []
    real = logs.log
    monkeypatch.setattr(logs, "log", lambda kind, msg: got.append(msg) if kind == "perf_hints" else real(kind, msg))
    return got


@pytest.mark.parametrize("kw", BACKENDS, ids=IDS)
def test_inference_equals_eager_over_calls(kw, counts):
    model, _ = mlp_factory(0)
    model = model.cuda().eval()
    compiled = ember.compile(model, **kw)
    with torch.no_grad():
        for i in range(6):
            x = torch.randn(8, 16, device="cuda")
            out = compiled(x)
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
            out2 = compiled(x * 2).clone()          # clone: the next call overwrites pool outputs
            torch.testing.assert_close(out2, model(x * 2), rtol=1e-4, atol=1e-5)
    assert counts["record"] == 1 and counts["replay"] >= 10


def _train(model, loss_fn, batches, steps, lr=1e-2):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for s in range(steps):
        args, target = batches(s)
        opt.zero_grad()
        loss = loss_fn(model, args, target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _mlp_batches(s):
    g = torch.Generator(device="cuda").manual_seed(s)
    return (torch.randn(8, 16, device="cuda", generator=g),), torch.randn(8, 4, device="cuda", generator=g)


@pytest.mark.parametrize("kw", BACKENDS, ids=IDS)
def test_mlp_training_equals_eager(kw, counts):
    model, _ = mlp_factory(0)
    model = model.cuda()
    ref = copy.deepcopy(model)
    compiled = ember.compile(model, **kw)
    loss_fn = lambda m, a, t: torch.nn.functional.mse_loss(m(*a), t)  # noqa: E731
    got = _train(compiled, loss_fn, _mlp_batches, 10)
    want = _train(ref, loss_fn, _mlp_batches, 10)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    assert counts["record"] == 2 and counts["replay"] >= 16      # forward and backward, replayed


@pytest.mark.parametrize("kw", BACKENDS, ids=IDS)
def test_nanogpt_training_equals_eager(kw, counts):
    model, make_batch = gpt_factory(0)
    model = model.cuda()
    ref = copy.deepcopy(model)
    compiled = ember.compile(model, **kw)

    def batches(s):
        b = make_batch(s)
        return tuple(a.cuda() for a in b.args), b.target.cuda()
    got = _train(compiled, gpt_loss, batches, 10)
    want = _train(ref, gpt_loss, batches, 10)
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4)
    assert counts["record"] >= 2 and counts["replay"] >= 16


def test_holding_an_output_across_calls_is_detected(counts):
    f = ember.compile(lambda x: (x * 2).sin() + 1, mode="reduce-overhead")
    for _ in range(2):
        f(torch.randn(64, device="cuda"))
    x1, x2 = torch.randn(64, device="cuda"), torch.randn(64, device="cuda")
    a = f(x1)
    want_a = ((x1 * 2).sin() + 1).clone()
    b = f(x2)
    torch.testing.assert_close(b, (x2 * 2).sin() + 1)
    if cg.CudaOps().can_invalidate():
        with pytest.raises(RuntimeError, match="overwritten by a subsequent run"):
            (a + 1).sum().item()
    else:          # no invalidation in this torch build: outputs are copies, never overwritten
        torch.testing.assert_close(a, want_a)
    c = f(x1).clone()                             # clone: kept across calls
    f(x2)
    torch.testing.assert_close(c, want_a)
    assert counts["replay"] >= 3


def test_two_forwards_before_backward(counts):
    model, _ = mlp_factory(0)
    model = model.cuda()
    ref = copy.deepcopy(model)
    compiled = ember.compile(model, mode="reduce-overhead")
    for s in range(4):
        (xa,), _ = _mlp_batches(2 * s)
        (xb,), _ = _mlp_batches(2 * s + 1)
        for m in (compiled, ref):
            m.zero_grad()
            (m(xa).square().mean() + m(xb).sin().mean()).backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


def test_changing_shapes_re_record(counts):
    f = ember.compile(lambda x: x.relu() * 3, mode="reduce-overhead", dynamic=False)
    for n in (8, 8, 8, 16, 16, 16, 8):
        x = torch.randn(n, device="cuda")
        torch.testing.assert_close(f(x), x.relu() * 3)
    assert counts["record"] == 2


def test_cpu_scalar_input_under_reduce_overhead(counts):
    """A 0-dim CPU tensor feeding a Triton kernel: the wrapper gives the kernel a device copy; values equal eager
    whether or not the graph could be recorded."""
    f = ember.compile(lambda x, s: x * s + 1, mode="reduce-overhead")
    for v in (2.5, 2.5, 2.5, -1.0, -1.0):
        x, s = torch.randn(32, device="cuda"), torch.tensor(v)
        torch.testing.assert_close(f(x, s), x * s + 1)


_TABLE = torch.tensor([0.5, -1.5, 2.0])


@pytest.mark.parametrize("fn", [lambda x, y: x * y.sum() + 1,            # from a CPU input: plain launches
                                lambda x, y: x * y[1, 2],
                                lambda x, y: x * _TABLE.sum() - 1])     # from a CPU constant only: may record
def test_computed_cpu_scalar_under_reduce_overhead(fn, counts):
    """A 0-dim CPU value computed in the graph feeding a Triton kernel (a CPU kernel computes it, the CUDA kernel
    reads a device copy made after it): values equal eager's on every call, recorded or not (a replay must never
    reuse a host value computed while recording from inputs that changed)."""
    f = ember.compile(fn, mode="reduce-overhead")
    for _ in range(5):
        x, y = torch.randn(32, device="cuda"), torch.randn(3, 3)
        torch.testing.assert_close(f(x, y), fn(x, y))


def test_cpu_scalar_inputs_key_recordings(counts):
    """backend="cudagraphs" (ATen ops read a CPU scalar on the host while recording): the scalar's value is part
    of the signature, so a new value records again and an old one replays its recording."""
    f = ember.compile(lambda x, s: x * s + 1, backend="cudagraphs")
    for v in (2.5, 2.5, 2.5, 3.0, 3.0, 3.0, 2.5):
        x, s = torch.randn(32, device="cuda"), torch.tensor(v)        # s: a CPU scalar tensor
        torch.testing.assert_close(f(x, s), x * s + 1)
    assert counts["record"] == 2 and counts["replay"] >= 5


def test_cpu_tensors_fall_back(counts, hints):
    g = ember.compile(lambda x: x.cos() * 2, mode="reduce-overhead")
    for _ in range(3):
        x = torch.randn(32)
        torch.testing.assert_close(g(x), x.cos() * 2)
    assert counts["record"] == 0
    assert any("cpu" in h.lower() for h in hints), hints


def test_bf16_transformer_inference(counts):
    model, make_batch = gpt_factory(0)
    model = model.cuda().to(torch.bfloat16).eval()
    compiled = ember.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for s in range(4):
            (idx,) = make_batch(s).args
            got, _ = compiled(idx.cuda())
            want, _ = model(idx.cuda())
            torch.testing.assert_close(got.float(), want.float(), rtol=5e-2, atol=5e-2)
    assert counts["record"] >= 1


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_transformers_gpt2_training_equals_eager(mode, counts, tmp_path, monkeypatch):
    """transformers GPT-2 (from config, random weights): 10 AdamW steps with the forward and backward graphs
    replayed as CUDA graphs give eager's losses and parameters."""
    from transformers import GPT2Config, GPT2LMHeadModel
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).cuda()
    ref = copy.deepcopy(model)
    compiled = ember.compile(model, mode=mode)

    def run(m):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        losses = []
        for s in range(10):
            g = torch.Generator(device="cuda").manual_seed(s)
            idx = torch.randint(0, 1000, (4, 64), device="cuda", generator=g)
            opt.zero_grad()
            loss = m(input_ids=idx, labels=idx).loss
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses
    got, want = run(compiled), run(ref)
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
    assert counts["record"] >= 2 and counts["replay"] >= 16      # forward and backward graphs, replayed


class _KVCache(torch.nn.Module):
    """A decoder's static cache: each step writes its keys at ``pos`` (an index_put into the buffer, which
    ember scatters into the buffer itself) and attends over the cache."""

    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.zeros(4, 128, 64, device="cuda"))

    def forward(self, pos, new, q):
        self.k[:, pos] = new
        return torch.softmax(q @ self.k.transpose(1, 2), -1)


@pytest.mark.parametrize("kw", [{}, {"mode": "reduce-overhead"}], ids=["default", "reduce-overhead"])
def test_static_cache_written_in_place_over_steps(kw, counts):
    """The cache buffer equals eager's after every step, replayed or not, and so do the outputs."""
    m, ref = _KVCache(), _KVCache()
    f = ember.compile(m, **kw)
    with torch.no_grad():
        for step in range(6):
            pos = torch.tensor([step], device="cuda")
            new, q = torch.randn(4, 1, 64, device="cuda"), torch.randn(4, 1, 64, device="cuda")
            torch.testing.assert_close(f(pos, new, q), ref(pos, new, q))
            torch.testing.assert_close(m.k, ref.k)
    if kw:
        assert counts["replay"] >= 3
