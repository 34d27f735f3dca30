"""Gradients when a graph restrides a value in place (``squeeze_``, ``transpose_``, or ``as_strided_`` inside
``adaptive_avg_pool2d``'s channels-last path) and the loss leaves some outputs unused.

The trace kept a snapshot of such a value's metadata without its ``requires_grad``, so ember read the path
through it as not reaching the inputs, and a loss that used only the pooled output left every parameter before
the pooling with gradient None (transformers' Swin with ``output_hidden_states=True``: 41 of 45). With the
hidden state's tangent left out, ``tangent + x.transpose(1, 2)`` was also replaced by the transposed operand, and a
later ``view`` of it failed. Differential: each output used alone as the loss, and all together; gradients
compiled == eager (None where eager's is None), on aot_eager and ember."""
from __future__ import annotations

import pytest
import torch

import ember

torch.manual_seed(0)
LIN = torch.nn.Linear(6, 6)
POOL1 = torch.nn.AdaptiveAvgPool1d(1)
CONV = torch.nn.Conv2d(3, 4, 3, padding=1).to(memory_format=torch.channels_last)
POOL2 = torch.nn.AdaptiveAvgPool2d(1)


def pooled_tokens(x):
    h = LIN(x)
    return POOL1(h.transpose(1, 2)).flatten(1), h


def pooled_channels_last(x):
    f = CONV(x.to(memory_format=torch.channels_last)).relu()
    return POOL2(f).flatten(1), f


def squeezed_in_place(x):
    h = LIN(x).unsqueeze(1)
    h.squeeze_(1)
    h.transpose_(0, 1)
    return h.exp(), LIN(x) * 2


CASES = [(pooled_tokens, (2, 4, 6)), (pooled_channels_last, (2, 3, 5, 5)), (squeezed_in_place, (4, 6))]


def _grads(f, x, which):
    for p in (*LIN.parameters(), *CONV.parameters()):
        p.grad = None
    outs = f(x)
    sum(outs[k].sum() * (k + 1) for k in which).backward()
    return [None if p.grad is None else p.grad.clone() for p in (*LIN.parameters(), *CONV.parameters())]


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("fn,shape", CASES, ids=[c[0].__name__ for c in CASES])
def test_loss_on_some_outputs(fn, shape, backend):
    ember.reset()
    f = ember.compile(fn, backend=backend)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    for which in ((0,), (1,), (0, 1)):
        expected, got = _grads(fn, x, which), _grads(f, x, which)
        assert [g is None for g in got] == [g is None for g in expected], which
        torch.testing.assert_close([g for g in got if g is not None], [g for g in expected if g is not None],
                                   rtol=1e-4, atol=1e-5)
