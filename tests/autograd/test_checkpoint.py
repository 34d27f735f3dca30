"""torch.utils.checkpoint inside compiled code (issue 34 part 1): captured into the graph, values and gradients
equal eager's, and the forward saves what eager checkpointing saves (the regions' inputs), not the
activations inside the regions."""
from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import (CheckpointPolicy, checkpoint, checkpoint_sequential,
                                   create_selective_checkpoint_contexts)

import ember
from ember.autograd.aot import aot_compile


class Block(torch.nn.Module):
    def __init__(self, d=16, p=0.0):
        super().__init__()
        self.l1, self.l2, self.p = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d), p

    def forward(self, x, scale=1.0):
        h = F.gelu(self.l1(x))
        if self.p:
            h = F.dropout(h, self.p, self.training)
        return x + self.l2(h) * scale


def _save_matmuls(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in MATMULS else CheckpointPolicy.PREFER_RECOMPUTE


def _recompute_all(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_RECOMPUTE


MATMULS = [torch.ops.aten.mm.default, torch.ops.aten.addmm.default]
# selective checkpointing: mode -> context_fn
POLICIES = {"sac_list": functools.partial(create_selective_checkpoint_contexts, MATMULS),
            "sac_fn": functools.partial(create_selective_checkpoint_contexts, _save_matmuls),
            "sac_recompute": functools.partial(create_selective_checkpoint_contexts, _recompute_all)}


class Stack(torch.nn.Module):
    def __init__(self, n=3, mode="nonreentrant", p=0.0):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(p=p) for _ in range(n))
        self.mode = mode

    def forward(self, x):
        if self.mode == "sequential":
            return checkpoint_sequential(torch.nn.Sequential(*self.blocks), 2, x, use_reentrant=False).sum()
        for b in self.blocks:
            if self.mode == "none":
                x = b(x)
            elif self.mode == "reentrant":
                x = checkpoint(b, x, use_reentrant=True)
            elif self.mode == "kwargs":
                x = checkpoint(b, x, use_reentrant=False, scale=0.5)
            elif self.mode in POLICIES:
                x = checkpoint(b, x, use_reentrant=False, context_fn=POLICIES[self.mode])
            elif self.mode == "nested":
                x = checkpoint(lambda y: checkpoint(b, y, use_reentrant=False) * 2, x, use_reentrant=False)
            else:
                x = checkpoint(b, x, use_reentrant=False)
        return x.sum()


def _fn_ckpt(x, w):
    def inner(a):
        return torch.tanh(a @ w).sin()
    return checkpoint(inner, x, use_reentrant=False).pow(2).mean()


MODES = ["nonreentrant", "reentrant", "kwargs", "nested", "sequential", *POLICIES]


@pytest.fixture(autouse=True)
def _fresh():
    ember.reset()
    yield
    ember.reset()


def _grads(m, x):
    loss = m(x)
    loss.backward()
    return loss.detach(), x.grad.clone(), [p.grad.clone() for p in m.parameters()]


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("mode", MODES)
def test_values_and_gradients_equal_eager_in_one_graph(mode, backend):
    torch.manual_seed(0)
    ref = Stack(mode=mode)
    m = Stack(mode=mode)
    m.load_state_dict(ref.state_dict())
    x = torch.randn(8, 16)
    out_ref = _grads(ref, x.clone().requires_grad_())
    out = _grads(ember.compile(m, backend=backend), x.clone().requires_grad_())
    torch.testing.assert_close(out, out_ref, rtol=1e-4, atol=1e-5)
    s = ember.stats()
    assert s["graph_breaks"] == 0 and s["fallbacks_to_eager"] == 0 and s["graphs_compiled"] == 1, s


def test_function_with_a_captured_weight():
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    ref = torch.autograd.grad(_fn_ckpt(x, w), (x, w))
    got = torch.autograd.grad(ember.compile(_fn_ckpt)(x, w), (x, w))
    torch.testing.assert_close(got, ref)


def test_dropout_inside_a_region_matches_eager_with_the_same_seed():
    torch.manual_seed(1)
    ref = Stack(mode="nonreentrant", p=0.5).train()
    m = Stack(mode="nonreentrant", p=0.5).train()
    m.load_state_dict(ref.state_dict())
    x = torch.randn(8, 16)
    torch.manual_seed(5)
    out_ref = _grads(ref, x.clone().requires_grad_())
    c = ember.compile(m, backend="aot_eager")
    torch.manual_seed(5)
    out = _grads(c, x.clone().requires_grad_())
    torch.testing.assert_close(out, out_ref)


def _saved_bytes(mode: str) -> int:
    """Bytes of activations the compiled forward saves for the backward (AOT autograd without prims): saved
    values that are not inputs (parameters and inputs cost no memory of their own)."""
    seen = []

    def backend(gm, inputs):
        compiled = aot_compile(gm, inputs, None, decompose=False)
        seen.append(compiled.__ember_aot__)
        return compiled
    m = Stack(n=4, mode=mode)
    ember.compile(m, backend=backend)(torch.randn(64, 16, requires_grad=True)).backward()
    (built, _, _), = [v for v in seen[0].values()]
    fwd = built.fwd
    outs = next(n for n in fwd.graph.nodes if n.op == "output").args[0]
    saved = outs[len(outs) - built.num_saved:]
    return sum(n.meta["val"].numel() * n.meta["val"].element_size() for n in saved
               if isinstance(n, torch.fx.Node) and n.op != "placeholder"
               and isinstance(n.meta.get("val"), torch.Tensor))


def test_forward_saves_only_what_eager_checkpointing_saves():
    plain, ckpt = _saved_bytes("none"), _saved_bytes("nonreentrant")
    # without checkpointing each block keeps its 64x64 hidden activation (and more); with it, each region
    # keeps only its 64x16 input (and the parameters, which are inputs anyway)
    assert plain >= 4 * 64 * 64 * 4, plain
    assert ckpt <= 4 * 64 * 16 * 4, ckpt


def test_reentrant_without_inputs_requiring_grad_keeps_eager_semantics():
    torch.manual_seed(0)
    ref, m = Stack(mode="reentrant"), Stack(mode="reentrant")
    m.load_state_dict(ref.state_dict())
    x = torch.randn(8, 16)         # no input requires grad: eager computes no gradient through the region
    assert ref(x).requires_grad is False
    assert ember.compile(m, backend="aot_eager")(x).requires_grad is False


def test_selective_policy_is_a_graph_break_with_a_reason():
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    def fn(x):
        return checkpoint(torch.sin, x, use_reentrant=False,
                          context_fn=lambda: create_selective_checkpoint_contexts([torch.ops.aten.mm.default]))
    x = torch.randn(3, requires_grad=True)
    explained = ember.explain(fn)(x)
    assert any("context_fn" in str(b) for b in explained.break_reasons), explained.break_reasons
    torch.testing.assert_close(ember.compile(fn)(x), fn(x))


@pytest.mark.parametrize("mode", ["sac_list", "sac_fn"])
def test_selective_policy_saves_the_matmuls_and_recomputes_the_rest(mode):
    plain, ckpt, sac = _saved_bytes("none"), _saved_bytes("nonreentrant"), _saved_bytes(mode)
    # each block's two matmul results are saved (64x64 and 64x16 floats) beside its 64x16 input; the gelu of
    # the 64x64 hidden value is recomputed from the saved matmul (plain autograd saves it too)
    per_block = (64 * 64 + 64 * 16) * 4
    assert sac >= 4 * 64 * 64 * 4, (sac, ckpt)
    assert sac <= 4 * (per_block + 64 * 16 * 4), sac
    assert sac < plain, (sac, plain)


def test_selective_policy_that_recomputes_everything_saves_what_checkpoint_saves():
    assert _saved_bytes("sac_recompute") <= 4 * 64 * 16 * 4
    assert ember.stats()["graph_breaks"] == 0 and ember.stats()["graphs_compiled"] == 1


# --- what the forward saves, across the kinds of ops a transformer block puts inside a region ---------------
# Each block maps a (B, T, D) activation to one of the same shape, so 3-D inputs go through F.linear's views.
B, T, D = 4, 8, 16


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(D, 4 * D), torch.nn.Linear(4 * D, D)

    def forward(self, x):
        return x + self.l2(F.gelu(self.l1(x)))


class Attention(torch.nn.Module):      # scaled_dot_product_attention: a tuple-valued op tagged "seeded"
    def __init__(self):
        super().__init__()
        self.ln, self.qkv, self.proj = torch.nn.LayerNorm(D), torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D)

    def forward(self, x):
        q, k, v = self.qkv(self.ln(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, 2, D // 2).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
        return x + self.proj(y)


class ManualAttention(Attention):       # q @ k^T and probs @ v: the decompositions clone the bmm operands
    def forward(self, x):
        q, k, v = self.qkv(self.ln(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, 2, D // 2).transpose(1, 2) for t in (q, k, v))
        y = ((q @ k.transpose(-1, -2)) * 0.25).softmax(-1) @ v
        return x + self.proj(y.transpose(1, 2).reshape(B, T, D))


class Dropout(Mlp):                     # native_dropout: a random tuple-valued op (its values are saved)
    def forward(self, x):
        return x + self.l2(F.dropout(F.gelu(self.l1(x)), 0.5, True))


class InPlace(Mlp):                     # functionalization rewrites the in-place ops inside the region
    def forward(self, x):
        h = self.l1(x)
        h.mul_(2.0)
        h = F.gelu(h)
        h.add_(1.0)
        return x + self.l2(h)


# block -> bytes each region may save beyond its input: dropout keeps its output and its mask
BLOCKS = {"mlp": (Mlp, 0), "attention": (Attention, 0), "manual_attention": (ManualAttention, 0), "dropout": (Dropout, B * T * 4 * D * (4 + 1)),
          "inplace": (InPlace, 0)}


class Chain(torch.nn.Module):
    def __init__(self, block, n, ckpt):
        super().__init__()
        self.blocks, self.ckpt = torch.nn.ModuleList(block() for _ in range(n)), ckpt

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False) if self.ckpt else b(x)
        return x.pow(2).mean()


def _chain_saved_bytes(block, ckpt: bool, decompose: bool, n: int = 4) -> int:
    """Bytes of the activations (saved values that are not graph inputs) the compiled forward of an
    ``n``-block chain saves; fails if AOT autograd gave up on the graph (it then runs with eager autograd, checkpoint
    regions ignored)."""
    seen = []

    def backend(gm, inputs):
        compiled = aot_compile(gm, inputs, None, decompose=decompose)
        seen.append(compiled.__ember_aot__)
        return compiled
    torch.manual_seed(0)
    ember.compile(Chain(block, n, ckpt), backend=backend)(torch.randn(B, T, D, requires_grad=True)).backward()
    (built, _, _), = [v for v in seen[0].values()]
    assert hasattr(built, "fwd"), "AOT autograd fell back to eager autograd (EMBER_LOGS=perf_hints says why)"
    outs = next(n for n in built.fwd.graph.nodes if n.op == "output").args[0]
    saved = [s for s in outs[len(outs) - built.num_saved:]
             if isinstance(s, torch.fx.Node) and s.op != "placeholder"]
    vals = [s.meta["val"] for s in saved]
    return sum(int(v.numel()) * (v.element_size() if isinstance(v, torch.Tensor) else v.dtype.itemsize)
               for v in vals if hasattr(v, "numel"))


@pytest.mark.parametrize("decompose", [False, True], ids=["aten", "prims"])
@pytest.mark.parametrize("name", list(BLOCKS))
def test_chain_of_regions_saves_only_the_regions_inputs(name, decompose):
    block, extra = BLOCKS[name]
    n = 4
    plain = _chain_saved_bytes(block, False, decompose, n)
    ckpt = _chain_saved_bytes(block, True, decompose, n)
    # eager checkpointing keeps each region's input: the first is the graph's input, the other n-1 are
    # activations of B*T*D floats; nothing computed inside a region survives the forward (but random values).
    # Saving less means the backward recomputes the blocks before a region to reach its input, and holds all
    # their activations from its start: the memory of no checkpointing.
    inputs = (n - 1) * B * T * D * 4
    assert inputs <= ckpt <= inputs + n * extra, (ckpt, inputs, plain)
    assert plain >= 2 * ckpt, (plain, ckpt)


@pytest.mark.parametrize("name", list(BLOCKS))
def test_chain_of_regions_equals_eager(name):
    block, _ = BLOCKS[name]
    torch.manual_seed(0)
    ref, m = Chain(block, 3, True), Chain(block, 3, True)
    m.load_state_dict(ref.state_dict())
    x = torch.randn(B, T, D)
    torch.manual_seed(3)
    out_ref = _grads(ref, x.clone().requires_grad_())
    c = ember.compile(m)
    torch.manual_seed(3)
    out = _grads(c, x.clone().requires_grad_())
    if name != "dropout":       # ember's prims draw other random numbers than ATen's dropout kernel
        torch.testing.assert_close(out, out_ref, rtol=1e-4, atol=1e-5)
    s = ember.stats()
    assert s["graph_breaks"] == 0 and s["fallbacks_to_eager"] == 0 and s["graphs_compiled"] == 1, s


class _AttnBlock(torch.nn.Module):
    def __init__(self, d: int = 32, h: int = 4, causal: bool = True, p: float = 0.0):
        super().__init__()
        self.qkv, self.proj, self.h, self.causal, self.p = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d), h, \
            causal, p
        self.ln = torch.nn.LayerNorm(d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in self.qkv(self.ln(x)).split(C, 2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, dropout_p=self.p)
        return x + self.proj(y.transpose(1, 2).reshape(B, T, C))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
def test_attention_inside_checkpointed_blocks_runs_compiled(causal, backend):
    """Attention ops are tagged random (for their dropout): with dropout_p=0 they are deterministic and the
    checkpointed region recomputes them. Before, their tuple result could be neither saved nor recomputed
    ('no finite cut') and every checkpointed transformer ran with eager autograd."""
    import logging
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(_AttnBlock(causal=causal) for _ in range(3))

    def f(x):
        for b in blocks:
            x = checkpoint(b, x, use_reentrant=False)
        return x.pow(2).mean()
    x = torch.randn(2, 8, 32)
    want = torch.autograd.grad(f(x.clone().requires_grad_()), list(blocks.parameters()))
    msgs = []
    handler = logging.Handler()
    handler.emit = lambda r: msgs.append(r.getMessage())
    logging.getLogger("ember").addHandler(handler)
    ember.set_logs(perf_hints=True)
    try:
        got = torch.autograd.grad(ember.compile(f, backend=backend)(x.clone().requires_grad_()),
                                  list(blocks.parameters()))
    finally:
        ember.set_logs(perf_hints=False)
        logging.getLogger("ember").removeHandler(handler)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert not [m for m in msgs if "eager autograd" in m or "runs as captured" in m], msgs
    assert ember.stats()["graph_breaks"] == 0 and ember.stats()["graphs_compiled"] == 1
