"""A graph output that is a view of an input, when two inputs share one storage (``f(x[:, :1], x)``, or a view
and its base live across a graph break): the output is rebuilt as a view of the input it was taken from, so its
gradient reaches that input (fuzz seed 307883: the gradient went through the other, narrower input and lost a
column). Differential: values and gradients compiled == eager on aot_eager and ember."""
from __future__ import annotations

import pytest
import torch

import ember

STATE: list = []


def slice_of_second(t, x):
    return x[1:4:2]


def transpose_of_second(a, b):
    return b.t() * 1, b.t()


def views_of_both(a, b):
    return a[0], b[1:]


def view_then_break(x0, x1):
    t2 = torch.split(x1, 1, dim=1)[0].unsqueeze(-3)
    STATE.append(float(x1.sum()))
    t2 = t2 * torch.tanh(t2)
    return x1[1:4:2]


# (fn, how the inputs are made from one base tensor that requires grad)
CASES = [(slice_of_second, lambda b: (b[:, :1].unsqueeze(0), b)),
         (transpose_of_second, lambda b: (b[0], b)),
         (views_of_both, lambda b: (b[:, 1:], b)),
         (view_then_break, lambda b: (b * 2, b))]


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("fn,make", CASES, ids=[c[0].__name__ for c in CASES])
def test_output_view_of_aliased_input(fn, make, backend):
    ember.reset()
    f = ember.compile(fn, backend=backend)
    for seed in (0, 1):
        g = torch.Generator().manual_seed(seed)
        base = torch.randn(5, 3, generator=g)
        be, bc = base.clone().requires_grad_(), base.clone().requires_grad_()
        expected, got = fn(*make(be)), f(*make(bc))
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        torch.testing.assert_close(got, expected)
        loss_e = sum((o * torch.randn(o.shape, generator=torch.Generator().manual_seed(k))).sum()
                     for k, o in enumerate(expected))
        loss_c = sum((o * torch.randn(o.shape, generator=torch.Generator().manual_seed(k))).sum()
                     for k, o in enumerate(got))
        loss_e.backward()
        loss_c.backward()
        torch.testing.assert_close(bc.grad, be.grad)


# -- a mutated input that is a view of another input, at another place in the storage on a later call ------------
# The graph built on one base per storage rebuilt each member with the layout of the call it was built for:
# ``t = x[k]; t.div_(2)`` after a graph break halved x[1] on a later call with k = 0 (fuzz seed 431809). The
# members' layouts are now part of the variant key.
def _halve_row(x, t):
    t.div_(2.0)
    return x * 1


def _fill_slice(x, t):
    t.fill_(-1.0)
    return x.sum(0)


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("fn", [_halve_row, _fill_slice], ids=lambda f: f.__name__)
def test_aliased_member_elsewhere_in_storage(fn, backend):
    ember.reset()
    compiled = ember.compile(fn, backend=backend)
    for pick in (lambda x: x[1], lambda x: x[0], lambda x: x[2], lambda x: x[1]):
        x = torch.randn(3, 4)
        xe, xc = x.clone(), x.clone()
        want, got = fn(xe, pick(xe)), compiled(xc, pick(xc))
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(xc, xe)
