"""``scaled_dot_product_attention`` on CUDA runs the kernel eager picks (flash, memory-efficient, cuDNN), not
the math path: ember's fake CUDA tensors make ATen's composite ask the CUDA device which kernel to run. Each row
compiles attention with static sizes, inference and a training step, and checks that the fused ATen kernel the
compiled call runs is eager's, and that outputs and gradients equal eager's."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import ember

pytestmark = pytest.mark.gpu

FUSED = re.compile(r"aten::_scaled_dot_product_(flash|efficient|cudnn)_attention(_backward)?$")


def _fused_ops(fn, *args) -> set[str]:
    with profile(activities=[ProfilerActivity.CPU]) as p:
        fn(*args)
        torch.cuda.synchronize()
    return {e.key for e in p.key_averages() if FUSED.match(e.key)}


def _inputs(mask: str, dtype: torch.dtype, training: bool):
    b, h, s, d = 2, 8, 128, 64
    q = torch.randn(b, h, s, d, device="cuda", dtype=dtype, requires_grad=training)
    k = torch.randn(b, h, s, d, device="cuda", dtype=dtype, requires_grad=training)
    v = torch.randn(b, h, s, d, device="cuda", dtype=dtype, requires_grad=training)
    m = None
    if mask == "additive":
        m = torch.randn(b, 1, s, s, device="cuda", dtype=dtype)
    elif mask == "bool":
        m = torch.rand(b, 1, s, s, device="cuda") > 0.2
    return q, k, v, m


CASES = [(mask, causal, dtype, training)
         for mask, causal in [("none", False), ("none", True), ("additive", False), ("bool", False)]
         for dtype in (torch.bfloat16, torch.float16, torch.float32)
         for training in (False, True)]


@pytest.mark.parametrize("mask,causal,dtype,training", CASES)
def test_sdpa_runs_eagers_kernel(mask, causal, dtype, training):
    def attn(q, k, v, m):
        out = F.scaled_dot_product_attention(q * 1.5, k, v, attn_mask=m, is_causal=causal)
        return out.relu() if not training else out.float().square().mean()

    ember.reset()
    compiled = ember.compile(attn)
    q, k, v, m = _inputs(mask, dtype, training)

    def run(fn):
        qq, kk, vv = (t.detach().clone().requires_grad_(training) for t in (q, k, v))
        out = fn(qq, kk, vv, m)
        if training:
            out.backward()
            return out.detach(), qq.grad, kk.grad, vv.grad
        return (out,)

    with torch.set_grad_enabled(training):
        want = run(attn)
        got = run(compiled)
        assert _fused_ops(run, compiled) == _fused_ops(run, attn)
    tol = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)
    assert ember.stats()["fallbacks_to_eager"] == 0

