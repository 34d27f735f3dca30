"""Convolution-network pieces compiled with symbolic sizes keep the plan of the same graph compiled static
(issue 33 part 4).

Pools and training batch norm over symbolic sizes decompose to kernels, as with static sizes, instead of
falling back to ATen calls.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import ember
from ember.loopir.ir import Extern


def _lowered(monkeypatch) -> list:
    """(graph, symbol table or None, channels-last) of every graph lowered from now on."""
    from ember.loopir import lower as lower_mod
    seen: list = []
    real = lower_mod.Lowerer.run

    def run(self):
        g = real(self)
        seen.append((g, self.table, self.channels_last))
        return g
    monkeypatch.setattr(lower_mod.Lowerer, "run", run)
    return seen


# (kernel, stride, padding) of max and average pools whose padding after the input depends on the parity of a
# symbolic size, or never reaches past it (padding 0), or is over-estimated (padding < stride - 1)
POOLS = [(3, 2, 1), (2, 2, 0), (3, 3, 1), (5, 3, 2)]


class PoolNet(nn.Module):
    def __init__(self, k: int, s: int, p: int, avg: bool) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(4)
        self.pool = (nn.AvgPool2d if avg else nn.MaxPool2d)(k, s, p)

    def forward(self, x):
        return self.pool(torch.relu(self.bn(x))) * 2


@pytest.mark.parametrize("avg", [False, True], ids=["max", "avg"])
@pytest.mark.parametrize("pool", POOLS, ids=[f"k{k}s{s}p{p}" for k, s, p in POOLS])
def test_pools_and_batch_norm_stay_kernels_with_symbolic_sizes(pool, avg, monkeypatch):
    """Training batch norm (running variance's n / (n - 1), the backward's 1 / n) and pools over symbolic sizes
    decompose to kernels: one symbolic forward and backward serve every size (odd and even), with eager's
    values, gradients and running statistics, and no ATen call."""
    ember.reset()
    seen = _lowered(monkeypatch)
    torch.manual_seed(0)
    model, ref = PoolNet(*pool, avg), PoolNet(*pool, avg)
    ref.load_state_dict(model.state_dict())
    f = ember.compile(model, dynamic=True)
    for b, h, w in [(2, 12, 12), (3, 13, 11), (4, 10, 15)]:
        x = torch.randn(b, 4, h, w, requires_grad=True)
        xr = x.detach().clone().requires_grad_(True)
        got, want = f(x), ref(xr)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        g = torch.randn_like(want)
        got.backward(g)
        want.backward(g)
        torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-5)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
            p.grad = q.grad = None
        for c, d in zip(model.buffers(), ref.buffers()):
            torch.testing.assert_close(c, d, rtol=1e-5, atol=1e-5)
    assert len(seen) == 2 and all(t is not None for _, t, _ in seen), [g.name for g, _, _ in seen]
    calls = [(n.op, str(n.target)) for g, _, _ in seen for n in g.nodes if isinstance(n, Extern)]
    assert not calls, calls         # the network has nothing but kernels
