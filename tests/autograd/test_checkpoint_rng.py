"""Random ops inside activation-checkpoint regions (issue 34 part 1): eager's checkpoint replays the RNG state,
so its recomputed dropout mask is the forward's; ember draws once, in the forward, and keeps what the backward
needs of the draws (never redrawn: the backward sees the forward's mask). Checked per kind of random op:

- values and gradients equal eager checkpointing's with the same seed, through ember's compiled kernels;
- the forward keeps the regions' inputs and, of each region, only its random values in their smallest form
  (a dropout mask as bool, one byte an element: CPU's bernoulli draws the same 0/1 values whatever dtype it
  fills; a hand-made mask ``rand_like(h) > p`` as the comparison, not the float uniforms); no activation.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import ember
from ember.autograd.aot import aot_compile

B, T, D, H = 4, 8, 16, 2


def _attention_dropout(blk, x):
    q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in blk.qkv(x).split(D, 2))
    probs = F.dropout((q @ k.transpose(-1, -2) / 3.0).softmax(-1), 0.2, True)
    return x + (probs @ v).transpose(1, 2).reshape(B, T, D)


def _drop_path(blk, x):                     # stochastic depth, as timm writes it: one draw per sample
    keep = x.new_empty(B, 1, 1).bernoulli_(0.8).div_(0.8)
    return x + blk.mlp(x) * keep


# kind -> (block body, bytes of random values a region may keep: elements x bytes per element)
KINDS = {
    "dropout": (lambda b, x: x + b.l2(F.dropout(F.gelu(b.l1(x)), 0.5, True)), B * T * 4 * D),
    "dropout_twice": (lambda b, x: x + b.l2(F.dropout(F.dropout(F.gelu(b.l1(x)), 0.3, True).tanh(), 0.2,
                                                       True)), 2 * B * T * 4 * D),
    "bernoulli_inplace": (lambda b, x: x + b.l2(F.gelu(b.l1(x)) * torch.empty(B, T, 4 * D).bernoulli_(0.7)),
                          B * T * 4 * D),
    "rand_mask": (lambda b, x: x + b.l2(F.gelu(b.l1(x)) * (torch.rand_like(b.l1(x)) > 0.3)), B * T * 4 * D),
    "randn_noise": (lambda b, x: x + b.l2(F.gelu(b.l1(x)) + 0.1 * torch.randn(B, T, 4 * D)), 4 * B * T * 4 * D),
    "attention_dropout": (_attention_dropout, B * H * T * T),
    "drop_path": (_drop_path, 4 * B),
}


class Block(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.l1, self.l2, self.qkv = torch.nn.Linear(D, 4 * D), torch.nn.Linear(4 * D, D), torch.nn.Linear(D, 3 * D)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(D, D), torch.nn.GELU())
        self.kind = kind

    def forward(self, x):
        return KINDS[self.kind][0](self, x)


class Chain(torch.nn.Module):
    def __init__(self, kind, n=3):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(kind) for _ in range(n))

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False)
        return x.pow(2).mean()


@pytest.fixture(autouse=True)
def _fresh():
    ember.reset()
    yield
    ember.reset()


def _step(m, x, seed):
    torch.manual_seed(seed)
    x = x.clone().requires_grad_()
    loss = m(x)
    loss.backward()
    return [loss.detach(), x.grad] + [p.grad.clone() if p.grad is not None else None for p in m.parameters()]


@pytest.mark.parametrize("kind", list(KINDS))
def test_gradients_equal_eager_checkpointing_with_the_same_seed(kind):
    torch.manual_seed(0)
    ref, m = Chain(kind), Chain(kind)
    m.load_state_dict(ref.state_dict())
    c = ember.compile(m)
    for seed in (3, 4):             # a second step draws new masks (nothing of the first is replayed)
        x = torch.randn(B, T, D)
        want = _step(ref, x, seed)
        got = _step(c, x, seed)
        for p, q in zip(ref.parameters(), m.parameters()):
            p.grad = q.grad = None
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    s = ember.stats()
    assert s["graph_breaks"] == 0 and s["fallbacks_to_eager"] == 0 and s["graphs_compiled"] == 1, s
    assert s["partition_fallbacks"] == 0, s


def _saved_activation_bytes(kind, n):
    seen = []

    def backend(gm, inputs):
        compiled = aot_compile(gm, inputs, None, decompose=True)
        seen.append(compiled.__ember_aot__)
        return compiled
    torch.manual_seed(0)
    ember.compile(Chain(kind, n), backend=backend)(torch.randn(B, T, D, requires_grad=True)).backward()
    (built, _, _), = [v for v in seen[0].values()]
    assert hasattr(built, "fwd"), "AOT autograd fell back to eager autograd"
    outs = next(o for o in built.fwd.graph.nodes if o.op == "output").args[0]
    saved = [s.meta["val"] for s in outs[len(outs) - built.num_saved:]
             if isinstance(s, torch.fx.Node) and s.op != "placeholder"]
    return sum(int(v.numel()) * v.dtype.itemsize for v in saved if hasattr(v, "numel"))


@pytest.mark.parametrize("kind", list(KINDS))
def test_regions_keep_their_inputs_and_their_draws_in_the_smallest_form(kind):
    n = 4
    inputs = (n - 1) * B * T * D * 4        # the regions' inputs but the first (the graph's input)
    draws = KINDS[kind][1]
    got = _saved_activation_bytes(kind, n)
    assert inputs <= got <= inputs + n * draws, (got, inputs, n * draws)
