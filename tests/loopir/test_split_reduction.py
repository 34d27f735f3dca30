"""Split reductions (GPU: few outputs, long rows -> partials over chunks, then a short reduction). The split is
forced on the CPU backends here by patching the factor, with chunk counts that divide the row and that don't."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember
import ember.loopir.lowerings as lowerings

from .backends import CPU_BACKENDS

FNS = {
    "sum_all": lambda x: x.sum(),
    "batchnorm_stats": lambda x: (x.sum((0, 2, 3)), x.amax((0, 2, 3)), x.amin((0, 2, 3)), x.var((0, 2, 3))),
    "bool_any_all": lambda x: ((x > 2).any(), (x > -5).all(), (x > 0).sum()),
    "prod_small_values": lambda x: (1 + x * 1e-2).prod(),
    "mean_grad": lambda x: (x * x).mean((0, 2)),
    # the best value and the first position holding it, both split (ties from rounding: the first index wins)
    "argmax_argmin": lambda x: (x.reshape(-1).argmax(), x.reshape(4, -1).argmin(1), x.round().reshape(-1).argmax(),
                                x.round().reshape(4, -1).argmin(1)),
}


@pytest.mark.parametrize("factor", [7, 11])
@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
@pytest.mark.parametrize("name", list(FNS))
def test_split_matches_eager(name, cpu_backend, factor, monkeypatch):
    monkeypatch.setattr(lowerings, "_split_factor", lambda dev, x, r, outer=False: factor if r >= 40 else 1)
    fn = FNS[name]
    ember.reset()
    f = ember.compile(fn, options={"cpu_backend": cpu_backend})
    x = torch.randn(4, 5, 6, 7, generator=torch.Generator().manual_seed(factor), requires_grad=True)
    out, ref = f(x), fn(x)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    if name == "mean_grad":
        g1, = torch.autograd.grad(out.sum(), x)
        g2, = torch.autograd.grad(ref.sum(), x)
        torch.testing.assert_close(g1, g2)


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
def test_split_of_channels_last_statistics_is_channel_major(cpu_backend, monkeypatch):
    """Per-channel statistics over an NHWC tensor read channels at unit stride: an outer reduction, whose
    partials are laid out split-major (part[s, c]) so a tile's loads and stores stay on adjacent channels."""
    seen: list = []

    def factor(dev, x, r, outer=False):
        seen.append(outer)
        return 5 if r >= 40 else 1
    monkeypatch.setattr(lowerings, "_split_factor", factor)
    fn = FNS["batchnorm_stats"]
    ember.reset()
    f = ember.compile(fn, options={"cpu_backend": cpu_backend})
    x = torch.randn(4, 6, 7, 9, generator=torch.Generator().manual_seed(3)).to(memory_format=torch.channels_last)
    torch.testing.assert_close(f(x), fn(x), rtol=1e-4, atol=1e-4)
    assert any(seen)
    seen.clear()
    ember.reset()
    f = ember.compile(fn, options={"cpu_backend": cpu_backend})
    f(x.contiguous())
    assert seen and not any(seen)         # NCHW: the rows are contiguous, not the channels


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
def test_bias_gradient_over_merged_heads_is_outer(cpu_backend, monkeypatch):
    """The bias gradient of a fused qkv projection sums attention gradients of shape (B, H, S, D) seen as
    (B*S, H*D): the kept index reaches memory as ``D*S*(x // D) + x % D``, contiguous in runs of D. That is an
    outer reduction (split channel-major on the GPU), though x has no unit coefficient."""
    seen: list = []

    def factor(dev, x, r, outer=False):
        seen.append(outer)
        return 3 if r >= 40 else 1
    monkeypatch.setattr(lowerings, "_split_factor", factor)

    def fn(q, k):
        b, h, s, d = q.shape
        return torch.cat([q, k], 1).transpose(1, 2).reshape(b * s, 2 * h * d).sum(0)
    ember.reset()
    f = ember.compile(fn, options={"cpu_backend": cpu_backend})
    q, k = torch.randn(2, 3, 25, 16), torch.randn(2, 3, 25, 16)
    torch.testing.assert_close(f(q, k), fn(q, k), rtol=1e-4, atol=1e-4)
    assert seen and all(seen), seen


def test_split_is_for_gpu_shapes_only():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert lowerings._split_factor(cpu, 1, 1 << 20) == 1
    assert lowerings._split_factor(cuda, 64, 200_000) > 1          # BatchNorm statistics of a ResNet
    assert lowerings._split_factor(cuda, 4096, 4096) == 1          # rows of a LayerNorm: enough programs
    # NHWC statistics are tiled 64 channels wide: more partial rows for as many programs
    assert lowerings._split_factor(cuda, 64, 802816, outer=True) > lowerings._split_factor(cuda, 64, 802816)
    # a bias gradient over 64x197 tokens: 1536 outputs are 24 tiles, too few programs without a split
    assert lowerings._split_factor(cuda, 1536, 12608, outer=True) > 1
    assert lowerings._split_factor(cuda, 1 << 16, 12608, outer=True) == 1    # enough tiles


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
def test_split_var_mean_reads_its_input_once(cpu_backend, monkeypatch):
    """A split var_mean (a batch norm's statistics on the GPU) sums x - k and (x - k)**2 in one pass, k the
    row's first point: one kernel of partial sums, one of finals, and values as accurate as the two-pass form
    even when the mean is far from zero relative to the spread (a large offset would cancel without k)."""
    from ember.codegen import wrapper as wr
    monkeypatch.setattr(lowerings, "_split_factor", lambda dev, x, r, outer=False: 6 if r >= 40 else 1)
    sources: list = []
    real = wr.make_wrapper
    monkeypatch.setattr(wr, "make_wrapper", lambda *a, **k: sources.append(real(*a, **k).source) or real(*a, **k))

    def fn(x):
        v, m = torch.var_mean(x, dim=(0, 2, 3), correction=1)
        return v, m, F.batch_norm(x, None, None, training=True)
    ember.reset()
    f = ember.compile(fn, options={"cpu_backend": cpu_backend})
    x = torch.randn(4, 5, 6, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64).float() * 0.5 + 1e3
    got, want = f(x), fn(x.double())
    torch.testing.assert_close(got[0].double(), want[0], rtol=2e-3, atol=0)
    torch.testing.assert_close(got[1].double(), want[1], rtol=1e-6, atol=0)
    torch.testing.assert_close(got[2].double(), want[2], rtol=0, atol=2e-3)
    kernels = [ln for ln in sources[-1].splitlines() if ln.lstrip().startswith("kernel")]
    assert len(kernels) <= 3, kernels     # partial sums, finals, the normalized output
