"""Channels-last activations in convolution-heavy graphs (ember.loopir.conv_layout).

On the GPU this applies to 16-bit CUDA graphs, on the CPU to float32 graphs (NHWC inputs and weights on both).
Here both rules run on the CPU with the C++ kernels (the CUDA one by patching), and the CPU rule also with its
weights left NCHW (oneDNN then converts them itself): values equal eager, convolutions get NHWC inputs (and
weights where the rule says so), the activations
between them are stored NHWC, graph outputs keep eager's strides; training graphs pass their saved activations NHWC from the forward to
the backward.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import ember
from ember.loopir import conv_layout
from ember.loopir.ir import Extern


class Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(x + self.b2(self.c2(torch.relu(self.b1(self.c1(x))))))


def _net(dtype=torch.bfloat16) -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), Block(8), Block(8), nn.Conv2d(8, 8, 3))
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2)
    return net.eval().to(dtype)


@pytest.fixture(params=["cpu_rule", "cpu_rule_nchw_weights", "cuda_rule"])
def on_cpu(request, monkeypatch):
    """The CPU's own rule (float32, NHWC inputs and weights), the same with NCHW weights, or the CUDA rule
    (16-bit, NHWC inputs and weights) applied to the CPU."""
    if request.param == "cuda_rule":
        monkeypatch.setattr(conv_layout, "DTYPES", {"cpu": (torch.bfloat16, torch.float16)})
        monkeypatch.setattr(conv_layout, "NHWC_WEIGHTS", {"cpu"})
        return torch.bfloat16, True
    nhwc_weights = request.param == "cpu_rule"
    monkeypatch.setattr(conv_layout, "NHWC_WEIGHTS", {"cpu"} if nhwc_weights else set())
    return torch.float32, nhwc_weights


def _graphs(monkeypatch) -> list:
    from ember.loopir import lower as lower_mod
    seen: list = []
    real = lower_mod.Lowerer.run

    def run(self):
        g = real(self)
        seen.append((self.channels_last, g))
        return g
    monkeypatch.setattr(lower_mod.Lowerer, "run", run)
    return seen


def test_inference_values_layouts_and_output_strides(on_cpu, monkeypatch):
    dtype, nhwc_weights = on_cpu
    seen = _graphs(monkeypatch)
    net = _net(dtype)
    x = torch.randn(2, 3, 16, 16, dtype=dtype)
    with torch.no_grad():
        got = ember.compile(net)(x)
        want = net(x)
    assert got.stride() == want.stride() and got.is_contiguous()
    tol = 2e-2 if dtype is torch.bfloat16 else 1e-4
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)
    (cl, graph), = seen
    assert cl
    convs = [n for n in graph.nodes if isinstance(n, Extern) and n.op == "convolution"]
    assert len(convs) == 6
    for c in convs:
        for ref in c.args[:2] if nhwc_weights else c.args[:1]:
            ch = ref.layout.shape[1]
            assert ch == 1 or ref.layout.stride[1] == 1, (c.name, ref)       # NHWC: channels innermost
        assert c.layout.stride[1] == 1 or c.layout.shape[1] == 1


def _restrides(monkeypatch) -> list:
    """Every input or extern result a compiled graph copies into another layout at run time."""
    from ember.codegen import wrapper
    calls: list = []
    real = wrapper.restride

    def restride(t, shape, stride):
        calls.append((tuple(t.shape), t.stride(), stride))
        return real(t, shape, stride)
    monkeypatch.setattr(wrapper, "restride", restride)
    return calls


def test_training_graphs_run_channels_last(on_cpu, monkeypatch):
    """Forward and backward graphs both go channels-last: the forward returns its saved activations NHWC and
    the backward is compiled for them (nothing is copied between the two), ``convolution_backward`` takes NHWC
    grad_output and input; values, gradients (with eager's strides) and running statistics equal eager's."""
    _, nhwc_weights = on_cpu
    dtype = torch.float32       # bf16 gradients differ from eager's by more than they say about the layout
    monkeypatch.setattr(conv_layout, "DTYPES", {"cpu": (dtype,)})
    seen = _graphs(monkeypatch)
    calls = _restrides(monkeypatch)
    net = _net(dtype).train()
    ref = _net(dtype).train()
    f = ember.compile(net)
    tol = 1e-4
    for step in range(2):
        x = torch.randn(2, 3, 16, 16, dtype=dtype)
        got, want = f(x), ref(x)
        torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)
        g = torch.randn_like(want)
        got.backward(g)
        want.backward(g)
        for (name, p), q in zip(net.named_parameters(), ref.parameters()):
            assert p.grad.stride() == q.grad.stride(), name
            torch.testing.assert_close(p.grad.float(), q.grad.float(), rtol=tol, atol=tol * 4, msg=name)
            p.grad = q.grad = None
        for b, c in zip(net.buffers(), ref.buffers()):
            torch.testing.assert_close(b.float(), c.float(), rtol=tol, atol=tol)
    assert [g.name.split("_")[0] for _, g in seen] == ["forward", "backward"] and all(cl for cl, _ in seen)
    assert not calls, calls
    bwd = seen[1][1]
    conv_bwd = [n for n in bwd.nodes if isinstance(n, Extern) and n.op == "convolution_backward"]
    assert len(conv_bwd) == 6
    for c in conv_bwd:
        for ref_ in c.args[:3] if nhwc_weights else c.args[:2]:
            assert ref_.layout.shape[1] == 1 or ref_.layout.stride[1] == 1, (c.name, ref_)


def test_few_convolutions_keep_traced_layouts(on_cpu, monkeypatch):
    dtype, _ = on_cpu
    seen = _graphs(monkeypatch)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval().to(dtype)
    with torch.no_grad():
        ember.compile(net)(torch.randn(1, 3, 8, 8, dtype=dtype))
    assert seen and not seen[0][0]


def test_activations_are_allocated_as_the_view_convolutions_take(on_cpu, monkeypatch):
    """A channels-last activation is computed in memory order (N, H, W, C) and taken by the convolution as an
    (N, C, H, W) view with NHWC strides: the wrapper allocates it as that view, so no call takes an
    ``as_strided`` of a computed buffer."""
    from ember.codegen import wrapper as wr
    dtype, _ = on_cpu
    sources: list = []
    real = wr.make_wrapper

    def make(*a, **k):
        fn = real(*a, **k)
        sources.append(fn.source)
        return fn
    monkeypatch.setattr(wr, "make_wrapper", make)
    net = _net(dtype)
    with torch.no_grad():
        x = torch.randn(2, 3, 16, 16, dtype=dtype)
        torch.testing.assert_close(ember.compile(net)(x).float(), net(x).float(), rtol=2e-2, atol=2e-2)
    calls = [ln for ln in sources[-1].splitlines() if "= extern" in ln]
    assert len(calls) == 6, sources[-1]
    assert not any("as_strided(buf" in ln for ln in calls), calls
