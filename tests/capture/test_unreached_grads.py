"""An input whose gradient can only come from graph outputs the loss does not use keeps ``.grad is None``, as in
eager (the graph output feeding ``.item()`` at a break, a second output left out of the loss); inputs the loss
does reach get eager's gradients."""
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


CASES = [(_item_at_break, lambda outs: outs.sum()), (_two_outputs, lambda outs: outs[0].sum()),
         (_two_outputs, lambda outs: outs[1].sum()), (_shared, lambda outs: outs[1].sum()),
         (_shared, lambda outs: outs[0])]


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
