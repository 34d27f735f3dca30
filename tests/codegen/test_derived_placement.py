"""A pointwise producer computed, and stored, in the kernel of the reduction that reads it, placed on the
reduction's order (``ember.loopir.schedule._derived``): a channels-last batch norm backward's output gradient,
stored for its other users, feeds the per-channel sums (on CUDA, the split sums' partials). Compiled values
and gradients equal eager's on every CPU backend (Triton interpreted), with the split forced as on a GPU."""
from __future__ import annotations

import importlib.util
import shutil

import pytest
import torch

import ember
import ember.loopir.lowerings as lowerings
from ember.autograd.aot import decompose_graph
from ember.autograd.trace import trace_aten
from ember.loopir import lower as lower_mod
from ember.loopir.schedule import Kernel, _permutes, schedule

BACKENDS = ["python"] + (["cpp"] if shutil.which("g++") or shutil.which("c++") else []) + \
    (["triton"] if importlib.util.find_spec("triton") else [])


def _block_grad(g1, g2, out, x):
    dy = (g1 + g2) * (out > 0)          # three full reads, three users: stored once
    return dy.sum((0, 2, 3)), (dy * x).sum((0, 2, 3)), dy * 2 + x


def _args(seed=0, shape=(4, 16, 12, 12)):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g).to(memory_format=torch.channels_last) for _ in range(4)]


def _kernels(fn, args):
    gm = decompose_graph(trace_aten(fn, args, training=False).gm)
    return [k for k in schedule(lower_mod.lower(gm, "graph")).steps if isinstance(k, Kernel)]


def test_stored_producer_joins_the_per_channel_sums():
    """The output gradient is computed and stored by the sums' kernel: two kernels, not three."""
    kernels = _kernels(_block_grad, _args())
    assert len(kernels) == 2, [k.fused() for k in kernels]
    sums = kernels[0]
    assert sums.is_reduction and len(sums.nodes) == 3 and sums.placed, sums.fused()
    (name,) = sums.placed
    assert name in sums.stores


@pytest.mark.parametrize("split", [1, 4, 5])
@pytest.mark.parametrize("backend", BACKENDS)
def test_stored_producer_in_sums_matches_eager(backend, split, monkeypatch):
    """Values equal eager's, unsplit and split into 4 or 5 chunks of the 576 points (5: a masked last chunk)."""
    if split > 1:
        monkeypatch.setattr(lowerings, "_split_factor", lambda dev, x, r, outer=False: split if r >= 64 else 1)
    ember.reset()
    args = _args(split)
    got = ember.compile(_block_grad, options={"cpu_backend": backend})(*args)
    for a, b in zip(got, _block_grad(*args)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("split", [1, 4, 7])
@pytest.mark.parametrize("backend", BACKENDS)
def test_channels_last_residual_blocks_train_like_eager(backend, split, monkeypatch):
    """Two residual blocks (batch norm, ReLU, a strided shortcut) in channels-last float32, the GPU's split of
    per-channel sums forced into 4 chunks (dividing the rows: the partials' kernel computes and stores the
    block's output gradient) or 7 (masked: it does not): values and every gradient equal eager's."""
    import ember.loopir.schedule as sched
    from ember.bench.models_handwritten import BasicBlock
    if split > 1:
        monkeypatch.setattr(lowerings, "_split_factor", lambda dev, x, r, outer=False: split if r >= 256 else 1)
    derived: list = []
    real = sched._finish

    def spy(graph, steps):
        out = real(graph, steps)
        derived.extend(k for k in out.steps if isinstance(k, Kernel) and k.placed)
        return out
    monkeypatch.setattr(sched, "_finish", spy)
    ember.reset()
    torch.manual_seed(0)
    m = torch.nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 16, 2)).to(memory_format=torch.channels_last)
    x = torch.randn(4, 8, 16, 16).to(memory_format=torch.channels_last).requires_grad_()
    ref = m(x)
    want = torch.autograd.grad(ref.square().sum(), [x, *m.parameters()])
    got_out = ember.compile(m, options={"cpu_backend": backend})(x)
    got = torch.autograd.grad(got_out.square().sum(), [x, *m.parameters()])
    torch.testing.assert_close(got_out, ref, rtol=1e-4, atol=1e-4)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
    assert bool(derived) == (split != 7), [k.fused() for k in derived]


def test_permutes():
    import sympy
    x, r0, r1 = sympy.symbols("x r0 r1", integer=True, nonnegative=True)
    assert _permutes(r0 * 48 + r1 * 16 + x, [x, r0, r1], [16, 4, 3], 192)
    assert not _permutes(r0 * 48 + r1 * 16, [x, r0, r1], [16, 4, 3], 192)           # broadcast over x
    assert not _permutes(r0 * 48 + r1 * 16 + x + 1, [x, r0, r1], [16, 4, 3], 192)   # offset
    assert not _permutes(r0 * 64 + r1 * 16 + x, [x, r0, r1], [16, 4, 3], 192)       # a gap


@pytest.mark.parametrize("backend", BACKENDS)
def test_relu_recomputed_by_the_sums_matches_eager(backend):
    """The batch norm's ReLU output, stored for the matmul (a convolution's weight gradient), is recomputed by
    the sums from the input they read (``ember.loopir.remat``): values equal eager's on every backend."""
    from tests.loopir.test_remat import _args, _with_x
    ember.reset()
    args = _args()
    got = ember.compile(_with_x, options={"cpu_backend": backend})(*args)
    for a, b in zip(got, _with_x(*args)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


class _Bottleneck(torch.nn.Module):
    def __init__(self, cin: int, mid: int, cout: int, stride: int) -> None:
        super().__init__()
        nn = torch.nn
        self.c1, self.b1 = nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.c2, self.b2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid)
        self.c3, self.b3 = nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = torch.relu(self.b2(self.c2(y)))
        return torch.relu(self.b3(self.c3(y)) + self.down(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_bottleneck_resnet_trains_like_eager(backend, monkeypatch):
    """A ResNet-50-style network (bottleneck blocks, a strided downsample, max and average pools) trained two SGD
    steps, the GPU's split of per-channel sums forced: the derived placements, the refused out-of-order joins and
    the recomputed ReLU masks all occur, and the loss, every gradient and the running statistics equal eager's."""
    import copy

    import ember.loopir.schedule as sched
    nn = torch.nn
    monkeypatch.setattr(lowerings, "_split_factor", lambda dev, x, r, outer=False: 4 if r >= 256 else 1)
    seen = {"derived": 0, "remat": 0}
    real_finish, real_remat = sched._finish, sched.rematerialize

    def finish(graph, steps):
        out = real_finish(graph, steps)
        seen["derived"] += sum(1 for k in out.steps if isinstance(k, Kernel) and k.placed)
        return out

    def remat(*a):
        gone = real_remat(*a)
        seen["remat"] += len(gone)
        return gone
    monkeypatch.setattr(sched, "_finish", finish)
    monkeypatch.setattr(sched, "rematerialize", remat)
    ember.reset()
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                      _Bottleneck(16, 8, 32, 1), _Bottleneck(32, 8, 32, 1), _Bottleneck(32, 16, 64, 2),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    e = copy.deepcopy(m)
    x, t = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    c = ember.compile(m, options={"cpu_backend": backend})
    opt, eopt = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(e.parameters(), lr=0.1)
    for _ in range(2):
        got, want = nn.functional.cross_entropy(c(x), t), nn.functional.cross_entropy(e(x), t)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        got.backward()
        want.backward()
        for (name, a), b in zip(m.named_parameters(), e.parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=2e-3, atol=2e-4, msg=lambda s, n=name: f"{n}: {s}")
        for a, b in zip(m.buffers(), e.buffers()):
            torch.testing.assert_close(a.float(), b.float(), rtol=1e-4, atol=1e-5)
        opt.step()
        eopt.step()
        opt.zero_grad()
        eopt.zero_grad()
    assert seen["derived"] and seen["remat"], seen
