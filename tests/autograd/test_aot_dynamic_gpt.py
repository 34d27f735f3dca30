"""Training quality with symbolic sizes: a 2-layer GPT block (causal attention, layer norm, MLP) trained with a
random sequence length per step.

- Through ``ember.compile`` (backend ``aot_eager``): losses and gradients equal eager's at every step, at most
  2 graphs compiled (static first, then one symbolic graph), no fallback to eager.
- The min-cut with symbolic sizes saves as many values for the backward as the static compile at the same
  (hint) sizes, and no more bytes at the hints: hints weigh sizes, so the choice is the static one."""
from __future__ import annotations

import random

import torch
import torch.nn.functional as F

import ember
from ember.autograd.aot import aot_compile
from tests.autograd.test_aot_dynamic import symbolic_graph

C, H, LAYERS = 16, 2, 2


def _weights(seed=0):
    g = torch.Generator().manual_seed(seed)
    ws = []
    for _ in range(LAYERS):
        ws += [torch.ones(C), torch.zeros(C), torch.randn(3 * C, C, generator=g) * 0.2,
               torch.randn(C, C, generator=g) * 0.2, torch.ones(C), torch.zeros(C),
               torch.randn(4 * C, C, generator=g) * 0.2, torch.randn(C, 4 * C, generator=g) * 0.2]
    return [w.requires_grad_() for w in ws]


def gpt(x, *ws):
    b, t = x.size(0), x.size(1)
    mask = x.new_ones(t, t, dtype=torch.bool).tril()
    for i in range(LAYERS):
        ln1w, ln1b, wqkv, wo, ln2w, ln2b, w1, w2 = ws[8 * i: 8 * i + 8]
        h = F.layer_norm(x, (C,), ln1w, ln1b)
        q, k, v = F.linear(h, wqkv).split(C, dim=-1)
        q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (C // H) ** -0.5
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, C)
        x = x + F.linear(y, wo)
        x = x + F.linear(F.gelu(F.linear(F.layer_norm(x, (C,), ln2w, ln2b), w1)), w2)
    return x.pow(2).mean()


_NAMES = ", ".join(f"w{i}" for i in range(8 * LAYERS))
_ns: dict = {"gpt": gpt}
exec(f"def gpt_flat(x, {_NAMES}):\n    return gpt(x, {_NAMES})", _ns)   # named inputs for fx.symbolic_trace
gpt_flat = _ns["gpt_flat"]


def test_gpt_training_random_lengths():
    ember.reset()
    rng = random.Random(0)
    ours, ref = _weights(), _weights()
    step = ember.compile(gpt, backend="aot_eager")
    for i in range(8):
        t = rng.randint(4, 24)
        x = torch.randn(2, t, C, generator=torch.Generator().manual_seed(i))
        got, want = step(x, *ours), gpt(x, *ref)
        got.backward()
        want.backward()
        torch.testing.assert_close(got, want, msg=f"loss at step {i} (t={t})")
        for a, b in zip(ours, ref):
            torch.testing.assert_close(a.grad, b.grad, msg=f"gradient at step {i} (t={t})")
            a.grad = b.grad = None
    stats = ember.stats()
    assert stats["graphs_compiled"] <= 2 and stats["fallbacks_to_eager"] == 0, stats
    assert stats["symbolic_graphs"] == 1, stats


def _saved(compiled):
    (built, *_), = compiled.__ember_aot__.values()
    bwd_in = [n for n in built.bwd.graph.nodes if n.op == "placeholder"]
    return built.num_saved, bwd_in


def _bytes_at_hints(nodes):
    from ember.shapes import hint_of
    total = 0
    for n in nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor):
            numel = 1
            for d in v.shape:
                numel *= hint_of(d)
            total += numel * v.element_size()
    return total


def test_saved_values_match_static_compile():
    for t in (7, 12):
        x = torch.randn(2, t, C)
        example = [x, *_weights()]
        gm, table = symbolic_graph(gpt_flat, example, [(2, "t", C)] + [None] * (8 * LAYERS))
        symbolic = aot_compile(gm, example)
        static = aot_compile(symbolic_graph(gpt_flat, example, [None] * len(example))[0], example)
        (n_sym, in_sym), (n_static, in_static) = _saved(symbolic), _saved(static)
        tensors = lambda nodes: [n for n in nodes if isinstance(n.meta.get("val"), torch.Tensor)]  # noqa: E731
        # symbolic sizes may add int placeholders (symbol values for the backward), never more tensors
        assert len(tensors(in_sym)) == len(tensors(in_static)), (t, n_sym, n_static)
        assert _bytes_at_hints(tensors(in_sym)) == _bytes_at_hints(tensors(in_static)), t
