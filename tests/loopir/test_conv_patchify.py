"""Convolutions over non-overlapping patches (stride == kernel: a ViT's patch embedding) lower to a copy into
patch rows and one matmul (ember/loopir/conv_patchify.py). The lowering is for CUDA; here it is switched on for
the CPU so values, gradients and output strides are checked against eager on every CPU backend."""
from __future__ import annotations

import pytest
import torch

import ember
import ember.loopir.conv_patchify as CP

from .backends import CPU_BACKENDS


class PatchEmbed(torch.nn.Module):
    def __init__(self, bias: bool, k: int = 4) -> None:
        super().__init__()
        self.proj = torch.nn.Conv2d(3, 8, k, stride=k, bias=bias)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2) * 2


@pytest.fixture
def on_cpu(monkeypatch):
    monkeypatch.setattr(CP, "DEVICES", {"cuda", "cpu"})


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(2, 3, 16, 16), (2, 3, 18, 17)])      # 17, 18: points past the last patch
def test_patch_embedding_values_grads_and_strides(shape, bias, cpu_backend, on_cpu):
    torch.manual_seed(0)
    m = PatchEmbed(bias)
    opts = {"cpu_backend": cpu_backend}
    for fn in (m, m.proj):              # the conv inside a graph, and as the graph's output
        ember.reset()
        x = torch.randn(shape)
        with torch.no_grad():
            got, want = ember.compile(fn, options=opts)(x), fn(x)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        if fn is m.proj:
            assert got.stride() == want.stride()
        x.requires_grad_(True)
        ember.reset()
        got = ember.compile(fn, options=opts)(x)
        want = fn(x)
        ct = torch.randn(want.shape)
        params = [x] + list(m.proj.parameters())
        for a, b in zip(torch.autograd.grad((got * ct).sum(), params), torch.autograd.grad((want * ct).sum(), params)):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_patch_embedding_is_a_matmul_and_others_stay_convolutions(on_cpu, monkeypatch):
    from ember.loopir import lower as lower_mod
    from ember.loopir.ir import Extern
    seen: list = []
    real = lower_mod.Lowerer.run

    def run(self):
        seen.append(real(self))
        return seen[-1]
    monkeypatch.setattr(lower_mod.Lowerer, "run", run)
    x = torch.randn(2, 3, 16, 16)
    for stride, padding, k, patched in ((4, 0, 4, True), (1, 1, 3, False), (2, 0, 4, False), (4, 1, 4, False),
                                        (1, 0, 1, False)):      # patches; overlapping, padded, 1x1: convolutions
        seen.clear()
        ember.reset()
        w = torch.randn(8, 3, k, k)
        fn = (lambda x, w, s=stride, p=padding: torch.nn.functional.conv2d(x, w, stride=s, padding=p))
        torch.testing.assert_close(ember.compile(fn)(x, w), fn(x, w), atol=1e-4, rtol=1e-4)
        ops = [n.op for g in seen for n in g.nodes if isinstance(n, Extern)]
        assert ops == (["mm"] if patched else ["convolution"]), (stride, padding, k, ops)
