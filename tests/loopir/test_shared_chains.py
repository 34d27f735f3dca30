"""Kernels fusing a long chain of pointwise nodes, each reading its predecessor more than once
(``x = x + x * n`` repeated): emitting a kernel body expanded every in-kernel producer at each read, a walk of
2**depth reads (fuzz seed 435416 timed out compiling, 3 steps of 3 ops each over a loop); the lowering makes
such a body of 2**depth objects (one call of an operand's loader per read) that are a few dozen distinct
values. Each distinct value is now emitted once per kernel. Differential (compiled == eager, gradients too)
with a bound on the emission work: linear in the distinct values of the kernel's bodies, so the unfixed
compiler fails the bound instead of running for hours."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember
from ember.loopir import kernel as kernel_mod
from ember.loopir.expr import walk

DEPTH = 12


def twice_each(x):
    for _ in range(DEPTH):
        x = x + x * 3
    return x


def leaky_and_tanh(x):
    for _ in range(DEPTH // 3):
        x = x + x * 0.5
        x = x - F.leaky_relu(x, 0.1)
        x = x * torch.tanh(x)
    return x


def three_reads(x):
    for _ in range(DEPTH):
        x = (x * x + x).sigmoid()
    return x


def chain_into_sum(x):
    for _ in range(DEPTH):
        x = x * 0.5 + x.sin()
    return x.sum(1), x


def chain_into_softmax(x):
    for _ in range(DEPTH):
        x = x + x.tanh()
    return torch.softmax(x, 1)


CASES = [twice_each, leaky_and_tanh, three_reads, chain_into_sum, chain_into_softmax]


@pytest.fixture
def bounded_emission(monkeypatch):
    orig = kernel_mod._Builder.build

    def build(self):
        emit, count = self.emit, [0]
        # every distinct value is emitted once, its operands looked up once per use
        bound = 4 * sum(len(list(walk(n.body))) for n in self.k.nodes if hasattr(n, "body")) + 100

        def counted(e, groups):
            count[0] += 1
            if count[0] > bound:
                raise AssertionError(f"kernel body emission is not linear: over {bound} emit calls")
            return emit(e, groups)
        self.emit = counted
        return orig(self)
    monkeypatch.setattr(kernel_mod._Builder, "build", build)


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("fn", CASES, ids=[f.__name__ for f in CASES])
def test_long_shared_chain_compiles_linearly(fn, grad, bounded_emission):
    ember.reset()
    compiled = ember.compile(fn)
    for seed in (0, 1):
        gen = torch.Generator().manual_seed(seed)
        x = (torch.randn(4, 8, generator=gen) * 0.1).requires_grad_(grad)
        xc = x.detach().clone().requires_grad_(grad)
        expected, actual = fn(x), compiled(xc)
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)
        if grad:
            outs = expected if isinstance(expected, tuple) else (expected,)
            sum(o.sum() for o in outs).backward()
            outs = actual if isinstance(actual, tuple) else (actual,)
            sum(o.sum() for o in outs).backward()
            torch.testing.assert_close(xc.grad, x.grad, rtol=1e-4, atol=1e-5)
