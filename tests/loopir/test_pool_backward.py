"""Pooling backwards as window gathers (ember.decomp.decomp_pool), through the whole training pipeline.

Max- and average-pool backwards read the output gradient of every window that may hold an input position
instead of scatter-adding into a zeroed buffer: no ``scatter_add`` extern, no atomics, and the gathers fuse
with the pointwise ops around them. A max pool's argmax is a window offset in a byte; a backward that
recomputes it from the saved input stores only that byte, and the partitioner saves nothing for the gathers.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import ember
from ember.loopir.ir import Extern
from ember.loopir.schedule import Kernel, schedule

CONFIGS = [  # kernel, stride, padding, dilation, ceil_mode
    (3, 2, 1, 1, False), (2, 2, 0, 1, False), (3, 1, 1, 1, False), (3, 2, 1, 2, True),
    (1, 2, 0, 1, False), (5, 3, 2, 1, True), (4, 3, 0, 1, True), ((3, 2), (1, 2), (1, 0), (2, 1), False),
]


def _graphs(monkeypatch) -> list:
    from ember.loopir import lower as lower_mod
    seen: list = []
    real = lower_mod.Lowerer.run

    def run(self):
        g = real(self)
        seen.append(g)
        return g
    monkeypatch.setattr(lower_mod.Lowerer, "run", run)
    return seen


# average pooling has no dilation: it runs the configurations without one
CASES = [("max", c) for c in CONFIGS] + [("avg", c) for c in CONFIGS if c[3] == 1]


@pytest.mark.parametrize("kind,cfg", CASES, ids=str)
def test_pool_gradients_equal_eager(kind, cfg, monkeypatch):
    k, s, p, d, ceil = cfg
    seen = _graphs(monkeypatch)

    def f(x):
        y = torch.relu(x * 1.5)
        if kind == "max":
            z = F.max_pool2d(y, k, s, p, d, ceil_mode=ceil)
        else:
            z = F.avg_pool2d(y, k, s, p, ceil_mode=ceil, count_include_pad=ceil)
        return z * z.sin()

    cf = ember.compile(f)
    for _ in range(2):
        x = torch.round(torch.randn(2, 3, 11, 10) * 2) / 2       # ties: the first maximum takes the gradient
        x[0, 0, 3, 4] = float("nan")
        xr, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        want, got = f(xr), cf(xe)
        torch.testing.assert_close(got, want, equal_nan=True)
        g = torch.randn_like(want)
        want.backward(g)
        got.backward(g)
        torch.testing.assert_close(xe.grad, xr.grad, equal_nan=True)
    bwd = [g for g in seen if g.name.startswith("backward")]
    assert bwd
    for g in bwd:
        externs = [n.op or str(n.target) for n in g.nodes if isinstance(n, Extern)]
        assert not any("scatter" in e for e in externs), externs


def test_max_pool_backward_saves_no_indices_and_stores_offsets_in_bytes(monkeypatch):
    """ResNet's stem in training: the backward recomputes the pooled activation's argmax from the saved
    convolution output as an int8 window offset (no int64 index buffer) and gathers the gradient through it.
    At the pooled resolution the forward saves only the pooled activation, which the next convolution reads in
    both passes (``partition.stored_both_ways``): no indices."""
    seen = _graphs(monkeypatch)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.MaxPool2d(3, 2, 1), nn.Conv2d(8, 8, 3, padding=1, bias=False))
    ref = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.MaxPool2d(3, 2, 1), nn.Conv2d(8, 8, 3, padding=1, bias=False))
    ref.load_state_dict(net.state_dict())
    f = ember.compile(net)
    x = torch.randn(2, 3, 32, 32)
    got, want = f(x), ref(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    g = torch.randn_like(want)
    got.backward(g)
    want.backward(g)
    for (name, a), b in zip(net.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-4, msg=name)
    fwd, bwd = seen[0], seen[1]
    # saved: the convolution's output, the batch statistics and the pooled activation (float32), no indices
    saved = [o for o in fwd.outputs[1:] if o is not None]
    pooled = [r for r in saved if tuple(r.layout.shape) == (2, 8, 8, 8)]
    assert [r.layout.dtype for r in pooled] == [torch.float32], saved
    assert not [r for r in saved if not r.layout.dtype.is_floating_point and r.layout.numel() > 1], saved
    stored = [bwd.node(b) for k in schedule(bwd).steps if isinstance(k, Kernel) for b in k.stores]
    assert not [n.name for n in stored if n.layout.dtype == torch.int64], stored
    assert [n.name for n in stored if n.layout.dtype == torch.int8 and tuple(n.layout.shape) == (2, 8, 8, 8)]


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_bf16_pool_gradients_equal_eager(kind):
    """16-bit gradients are gathered 16-bit and summed in float32, as ATen's kernels accumulate them."""
    def f(x):
        y = torch.relu(x)
        z = F.max_pool2d(y, 3, 2, 1) if kind == "max" else F.avg_pool2d(y, 3, 2, 1)
        return z * 3

    cf = ember.compile(f)
    x = torch.randn(2, 4, 12, 13, dtype=torch.bfloat16)
    xr, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
    g = torch.randn(2, 4, 6, 7, dtype=torch.bfloat16)
    f(xr).backward(g)
    cf(xe).backward(g)
    assert xe.grad.dtype == torch.bfloat16
    torch.testing.assert_close(xe.grad, xr.grad, rtol=1.6e-2, atol=1e-2)


@pytest.mark.parametrize("fn", [
    lambda t: F.max_pool1d(t, 3, 2), lambda t: F.avg_pool1d(t, 3, 2, 1), lambda t: F.max_pool1d(t, 2, 1, 1, 2, True),
    lambda t: F.avg_pool1d(t, 4, 3, 2, True, False), lambda t: F.adaptive_avg_pool1d(t, 4)],
    ids=["max_3_2", "avg_3_2_1", "max_dilated_ceil", "avg_ceil_no_pad_count", "adaptive_avg"])
def test_pool1d_gradients_equal_eager(fn):
    """1-d pooling runs as 2-d pooling over a unit height: window indices of a one-element dimension are plain
    integers, which the index rewriting of gathers must leave alone (it raised before)."""
    x = torch.randn(2, 3, 11, requires_grad=True)
    out = ember.compile(fn)(x)
    (out * torch.arange(out.numel()).view_as(out)).sum().backward()
    got, x.grad = x.grad, None
    ref = fn(x)
    (ref * torch.arange(ref.numel()).view_as(ref)).sum().backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(got, x.grad)
