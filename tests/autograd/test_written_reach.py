"""Gradients through a value that does not require grad until an in-place write puts one into it
(``t = x * 5; t.narrow(0, 3, 1).add_(w)``), when the loss uses only some of the graph's outputs.

Eager's autograd connects ``t`` to ``w`` from the write on. ember decides which inputs an unused output leaves
without a gradient (None, as eager) by walking the trace before functionalization; the walk ignored the write,
so with the loss on ``t`` alone ``w.grad`` stayed None (fuzz seed 472396). Differential: every output used alone
as the loss, gradients compiled == eager (None where eager's is None), on aot_eager and ember."""
from __future__ import annotations

import pytest
import torch

import ember


def narrow_add(x, w):
    t = x * 5 + 1
    t.narrow(0, 3, 1).add_(w[2, 0])
    return w + t, t


def setitem_row(x, w):
    t = x * 2
    t[1] = w[0] * 3
    return t.sum(0), t, w.sum()


def copy_into_column(x, w):
    t = torch.zeros_like(x)
    t[:, 0].copy_(w[:, 1])
    return w * 2, t.exp()


def view_read_after_write(x, w):
    t = x.clone()
    v = t[1:]
    v.mul_(w[1:])
    return t[:2] * 1, w.cos()


def mutated_input(x, w):
    x.add_(w * 0.5)
    return x * 1, w + 1


CASES = [narrow_add, setitem_row, copy_into_column, view_read_after_write, mutated_input]


def _grads(f, x, w, k):
    outs = f(x, w)
    outs[k].sum().backward()
    return w.grad


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_loss_on_one_output(fn, backend):
    ember.reset()
    f = ember.compile(fn, backend=backend)
    g = torch.Generator().manual_seed(0)
    x0, w0 = torch.randn(5, 2, generator=g), torch.randn(5, 2, generator=g)
    for k in range(len(fn(x0.clone(), w0.clone()))):
        expected = _grads(fn, x0.clone(), w0.clone().requires_grad_(), k)
        got = _grads(f, x0.clone(), w0.clone().requires_grad_(), k)
        assert (got is None) == (expected is None), (k, got, expected)
        if expected is not None:
            torch.testing.assert_close(got, expected)
