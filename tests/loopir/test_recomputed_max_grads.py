"""The backward of a maximum (amax, max, amin, max_pool) compares the input, often recomputed in the backward,
with the saved maximum: the gradient goes where they are equal. So a pointwise value must have the same bits
wherever it is computed (a vector loop, its scalar tail, a scalar kernel); otherwise no element is found equal
and the gradient is lost (fuzz seed 303173: tanh through amax). Differential: gradients compiled == eager, for
shapes whose rows leave scalar tails, on every CPU kernel backend."""
from __future__ import annotations

import pytest
import torch

import ember

from tests.loopir.backends import CPU_BACKENDS

FNS = {
    "tanh": lambda x, y: x * torch.tanh(torch.where(y > x, y, x) * 4),
    "exp": lambda x, y: torch.exp(x * 1.7) * y,
    "erf": lambda x, y: torch.erf(x * 3) + y,
    "sigmoid": lambda x, y: torch.sigmoid(x * 5) * y,
    "gelu": lambda x, y: torch.nn.functional.gelu(x * 2) + y,
    "sin": lambda x, y: torch.sin(x * 3) + y,
}
REDUCTIONS = {
    "amax0": lambda v: v.amax(0),
    "max1": lambda v: v.max(1).values,
    "amin_all": lambda v: v.amin(),
}


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
@pytest.mark.parametrize("red", list(REDUCTIONS))
@pytest.mark.parametrize("fn", list(FNS))
def test_max_gradient_through_recomputed_pointwise(fn, red, cpu_backend):
    f, r = FNS[fn], REDUCTIONS[red]

    def prog(x, y):
        return r(f(x, y))
    ember.reset()
    compiled = ember.compile(prog, options={"cpu_backend": cpu_backend})
    for seed in (0, 1):
        g = torch.Generator().manual_seed(seed)
        x, y = torch.randn(6, 6, 5, generator=g), torch.randn(6, 6, 5, generator=g)
        xe, ye = x.clone().requires_grad_(), y.clone().requires_grad_()
        xc, yc = x.clone().requires_grad_(), y.clone().requires_grad_()
        expected, got = prog(xe, ye), compiled(xc, yc)
        torch.testing.assert_close(got, expected)
        w = torch.randn(expected.shape, generator=g)
        (expected * w).sum().backward()
        (got * w).sum().backward()
        torch.testing.assert_close(xc.grad, xe.grad)
        torch.testing.assert_close(yc.grad, ye.grad)
