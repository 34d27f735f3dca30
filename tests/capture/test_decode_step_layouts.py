"""A decode step with a KV cache that grows by one token per call, batch 1: the cache's dims of size 1 (the
batch) have strides that follow the cache length (contiguous (1, h, s, d): dim 0's stride is h*s*d).

Those strides were recorded as the compiling call's numbers: the generated wrapper then compared them on every
call and copied the whole cache into the recorded layout (``restride``) at every new length, and a cache kept
in a permuted layout failed its guard and recompiled at every step until the cache-size limit sent it to
eager.
Each case runs 8 decode steps: outputs equal eager, at most 3 graphs, no fallback, and no input copied by the
wrapper once the graph is symbolic.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember
import ember.codegen.wrapper as wrapper

H, D = 4, 8


def _attend(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def heads_first(q, k_new, v_new, k_cache, v_cache):
    """GPT-2's cache: (1, h, s, d), new keys appended along dim 2."""
    k = torch.cat([k_cache, k_new], dim=2)
    v = torch.cat([v_cache, v_new], dim=2)
    return _attend(q, k, v), k, v


def seq_first(q, k_new, v_new, k_cache, v_cache):
    """A cache stored as (1, s, h, d) and handed around as its (1, h, s, d) transpose: a permuted, dense
    layout whose strides all follow the length."""
    k = torch.cat([k_cache.transpose(1, 2), k_new.transpose(1, 2)], dim=1).transpose(1, 2)
    v = torch.cat([v_cache.transpose(1, 2), v_new.transpose(1, 2)], dim=1).transpose(1, 2)
    return _attend(q, k, v), k, v


def grouped(q, k_new, v_new, k_cache, v_cache):
    """Llama's grouped-query cache: 2 key/value heads repeated for 4 query heads (expand + reshape)."""
    k = torch.cat([k_cache, k_new[:, :2]], dim=2)
    v = torch.cat([v_cache, v_new[:, :2]], dim=2)

    def rep(x):
        b, g, s, d = x.shape
        return x[:, :, None].expand(b, g, 2, s, d).reshape(b, g * 2, s, d)
    return _attend(q, rep(k), rep(v)), k, v


def manual(q, k_new, v_new, k_cache, v_cache):
    """Attention written out, with the causal mask's length read from the cache."""
    k = torch.cat([k_cache, k_new], dim=2)
    v = torch.cat([v_cache, v_new], dim=2)
    w = (q @ k.transpose(-1, -2)) / D ** 0.5
    keep = torch.ones(1, k.shape[2], dtype=torch.bool).tril(diagonal=k.shape[2] - 1)
    w = w.masked_fill(~keep, float("-inf"))
    return torch.softmax(w, dim=-1) @ v, k, v


STEPS = {"heads_first": (heads_first, (1, H, 5, D)), "seq_first": (seq_first, (1, 5, H, D)),
         "grouped": (grouped, (1, 2, 5, D)), "manual": (manual, (1, H, 5, D))}


@pytest.mark.parametrize("name", sorted(STEPS))
def test_growing_cache_runs_one_symbolic_graph_without_copies(name, monkeypatch):
    step, shape = STEPS[name]
    copies = []

    def counting_restride(t, shape, stride):
        copies.append((tuple(t.shape), t.stride(), stride))
        return wrapper.restride.__wrapped__(t, shape, stride)
    counting_restride.__wrapped__ = wrapper.restride
    monkeypatch.setattr(wrapper, "restride", counting_restride)
    ember.reset()
    cstep = ember.compile(step)
    torch.manual_seed(0)
    kc = vc = torch.randn(shape)
    if step is seq_first:
        kc = vc = kc.transpose(1, 2)
    ek, ev = kc, vc
    for i in range(8):
        q, kn, vn = (torch.randn(1, H, 1, D) for _ in range(3))
        out, kc, vc = cstep(q, kn, vn, kc, vc)
        ref, ek, ev = step(q, kn, vn, ek, ev)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(kc, ek, rtol=0, atol=0)
        if i == 2:
            copies.clear()          # from here on the symbolic graph serves every length
    st = ember.stats()
    assert st["fallbacks_to_eager"] == 0 and st["graph_breaks"] == 0, st
    assert st["graphs_compiled"] <= 3, st
    assert not copies, copies
