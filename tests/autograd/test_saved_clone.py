"""A ``clone`` the backward needs is saved, in memory of its own: recomputed from its source (a value the graph
returns), it would be read after the caller changed that value in place (fuzz seed 300016: ``t4 =
gelu(t3.clone())``, then ``t3.tanh_()`` after a graph break failed autograd's version check, or would read the
new values). Differential: values and gradients compiled == eager on aot_eager and ember."""
from __future__ import annotations

import pytest
import torch

import ember

STATE: list = []


def var_clone_gelu(x):
    t3 = (x * 2).var(-1)
    t4 = torch.nn.functional.gelu(t3.clone())
    STATE.append(float(x.sum()))
    t3.narrow(0, 3, 1).tanh_()
    return t4, t3


def clone_sigmoid_caller_mutates(x):
    t = x.sin()
    return torch.sigmoid(t.clone() * 3), t


def clone_mul_then_add_(x):
    t = x * 3
    u = t.clone() * t.clone()
    STATE.append(float(x.sum()))
    t.add_(1)
    return u, t


CASES = [var_clone_gelu, clone_sigmoid_caller_mutates, clone_mul_then_add_]


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_saved_clone_survives_in_place_updates(fn, backend):
    ember.reset()
    f = ember.compile(fn, backend=backend)
    for seed in (0, 1):
        x = torch.randn(5, 3, generator=torch.Generator().manual_seed(seed))
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        oe, oc = fn(xe), f(xc)
        with torch.no_grad():           # the caller changes the last output in place
            oe[-1].mul_(-1)
            oc[-1].mul_(-1)
        torch.testing.assert_close(oc, oe)
        oe[0].sum().backward()
        oc[0].sum().backward()
        torch.testing.assert_close(xc.grad, xe.grad)
