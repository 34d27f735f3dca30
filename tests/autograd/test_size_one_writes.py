"""In-place updates of a graph's input whose layout has dims of size 1 (views made by ``chunk``,
``transpose``, ``unsqueeze``, a ``keepdim`` reduction). The compiled forward stores the new value into the
input itself and returns it with the traced layout, whose strides at the dims of size 1 may differ from the
input's; the write-back then did not recognise it as the input's own memory and copied it onto itself, which
``copy_`` refuses ("some elements of the input tensor and the written-to tensor refer to a single memory location"):
fuzz seeds 432322 and 434662, where eager runs fine.

Differential: compiled == eager (values, gradients, the updated tensors), with a gradient flowing through
the same graph (its outputs come back through an autograd Function, as other tensor objects)."""
from __future__ import annotations

import pytest
import torch

import ember

STATE: list = []


def _graph_break(t):
    STATE.append(float(t.detach().sum()))


# Each: a view with dims of size 1 made before a graph break, updated in place in the next graph (which sees
# only the view, not its base), then another break before the base is read.
def chunk_transpose_clamp(x, w):
    t = x * 0.5 - 1.7                            # (1, 1, 5)
    v = t.chunk(3, 2)[0].transpose(0, 1)         # (1, 1, 2): strides (5, 5, 1)
    _graph_break(t)
    y = w * 2
    v.clamp_(-0.5, 0.5)
    _graph_break(v)
    return t, y


def keepdim_split_sub(x, w):
    t = torch.split(x.std(dim=2, keepdim=True)[-4], 1, dim=1)[0]     # (2, 1)
    v = t.transpose(0, 1).unsqueeze(1)                                # (1, 1, 2): strides (1, 2, 1)
    _graph_break(x)
    y = w.sin()
    v.sub_(torch.full([1, 1, 2], 1.5), alpha=0.5)
    _graph_break(v)
    return t, y


def chunk_unsqueeze_mul(x, w):
    t = x.exp()                                  # (1, 1, 5)
    v = t.chunk(2, 2)[1].squeeze(0).unsqueeze(1)  # (1, 1, 2): strides (5, 5, 1)
    _graph_break(t)
    y = w.sin()
    v.mul_(0.5)
    _graph_break(v)
    return t, y


CASES = [chunk_transpose_clamp, keepdim_split_sub, chunk_unsqueeze_mul]
SHAPES = {chunk_transpose_clamp: (1, 1, 5), keepdim_split_sub: (4, 2, 3), chunk_unsqueeze_mul: (1, 1, 4)}


def _run(fn, shape, grad, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen)
    w = torch.randn(3, 6, 5, generator=gen).requires_grad_(grad)
    STATE.clear()
    outs = fn(x, w)
    grads = None
    if grad:
        sum(o.sum() for o in outs if o.requires_grad).backward()
        grads = w.grad
    return [o.detach() for o in outs], x, grads, list(STATE)


@pytest.mark.parametrize("fn", CASES, ids=[f.__name__ for f in CASES])
def test_update_of_input_with_size_one_dims(fn, grad=True):
    ember.reset()
    compiled = ember.compile(fn)
    for seed in (0, 1):
        expected = _run(fn, SHAPES.get(fn, (3, 6, 5)), grad, seed)
        actual = _run(compiled, SHAPES.get(fn, (3, 6, 5)), grad, seed)
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
