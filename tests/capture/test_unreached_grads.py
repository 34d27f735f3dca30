"""An input whose gradient can only come from graph outputs the loss does not use keeps ``.grad is None``, as in
eager (the graph output feeding ``.item()`` at a break, a second output left out of the loss); inputs the loss
does reach get eager's gradients, zeros included (an output zeroed in place still connects its inputs)."""
from __future__ import annotations

import pytest
import torch

import ember

BACKENDS = ["aot_eager", "ember"]


def _item_at_break(x0, x1):
    t1 = x0 * 2
    x1.sum().item()
    return t1


def _two_outputs(x0, x1):
    return x0.sin(), x1.exp() + x0


def _shared(x0, x1):
    a = x0 * x1
    return a.sum(), x1.cos()


def _zeroed_before_break(x0, x1):
    t = x0 * 2 + x1
    t.zero_()
    float(x1.sum())         # a graph break; the graph's sum output is not in the loss
    return t


def _filled_before_break(x0, x1):
    t = x0[1] + (2 - x1).sum(0)
    t.fill_(1.5)
    float(x0.abs().sum())
    return t


def _scalar_zeroed(x0, x1):
    t = x0.sum() + x1.mean()
    t.zero_()
    x0.mean().item()
    return t, t.unsqueeze(0) * x1


def _detached_factor(x0, x1):
    return x1 * x0.detach(), x0.sin()


def _inplace_elsewhere(x0, x1):
    t = x1 * 2
    t.mul_(3)                           # an in-place op in the graph: x0 still reaches only the unused output
    x0.mean().item()
    return t


CASES = [(_inplace_elsewhere, lambda outs: outs.sum()), (_item_at_break, lambda outs: outs.sum()), (_two_outputs, lambda outs: outs[0].sum()),
         (_two_outputs, lambda outs: outs[1].sum()), (_shared, lambda outs: outs[1].sum()),
         (_shared, lambda outs: outs[0]), (_zeroed_before_break, lambda outs: outs.sum()),
         (_filled_before_break, lambda outs: outs * 3), (_scalar_zeroed, lambda outs: outs[0]),
         (_detached_factor, lambda outs: outs[0].sum())]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_unreached_inputs_keep_no_grad(fresh_ember, backend, case):
    fn, loss = CASES[case]
    x = [torch.randn(3, requires_grad=True) for _ in range(2)]
    y = [t.detach().clone().requires_grad_() for t in x]
    loss(fn(*x)).backward()
    loss(ember.compile(fn, backend=backend)(*y)).backward()
    for a, b in zip(x, y):
        assert (a.grad is None) == (b.grad is None)
        if a.grad is not None:
            assert torch.allclose(a.grad, b.grad)
