"""An output that is a view of an input with the input's own layout (``x[:]``, ``x.view_as(x)``,
``x.chunk(1)[0]``) is a new tensor in eager: a view, with a ``grad_fn`` where the input requires grad. The AOT
runtime rebuilt outputs aliasing an input and handed back the input object itself where the layout matched, so
``out is x``, ``out.grad_fn is None`` and ``print(out)`` showed a leaf (fuzz seed 380041: ``t1 = x2[:]`` printed
after a graph break). An output that eager returns as the input itself (``return x``, after ``x.add_(1)``) stays
the input. Differential: identity, view-ness, grad_fn presence, values and gradients equal eager's."""
from __future__ import annotations

import pytest
import torch

import ember

STATE: list = []


def _graph_break(x):
    STATE.append(float(x.detach().sum()))


def v_full_slice(x, w):
    return x[:], w * 2


def v_view_as(x, w):
    return x.view_as(x), w * 2


def v_chunk_one(x, w):
    return x.chunk(1, 0)[0], w * 2


def v_reshape_same(x, w):
    return x.reshape(x.shape), w * 2


def v_ellipsis(x, w):
    return x[...], x * w


def v_slice_across_break(x, w):
    t = x[:]
    _graph_break(t)
    return t * w, t


def same_input(x, w):
    return x, w * 2


def same_input_mutated(x, w):
    x.mul_(2)
    return x, w * 2


CASES = [v_full_slice, v_view_as, v_chunk_one, v_reshape_same, v_ellipsis, v_slice_across_break, same_input,
         same_input_mutated]


def _run(fn, seed, leaf, mutates):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(3, 4, generator=gen, requires_grad=True)
    w = torch.randn(3, 4, generator=gen, requires_grad=True)
    x = a if leaf else a * 1
    if mutates:
        x = x.detach() if leaf else x      # a leaf that requires grad cannot be modified in place
    outs = fn(x, w)
    shape = [(o is x, o._is_view(), o.grad_fn is None, o.requires_grad) for o in outs]
    sum((o * (i + 1)).sum() for i, o in enumerate(outs) if o.requires_grad).backward()
    return shape, [o.detach().clone() for o in outs], [a.grad, w.grad]


@pytest.mark.parametrize("leaf", [True, False], ids=["leaf", "nonleaf"])
@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_view_with_the_inputs_layout_is_a_new_view(fn, backend, leaf):
    ember.reset()
    compiled = ember.compile(fn, backend=backend)
    for seed in (0, 1):
        expected = _run(fn, seed, leaf, fn is same_input_mutated)
        actual = _run(compiled, seed, leaf, fn is same_input_mutated)
        assert actual[0] == expected[0], f"(is input, is view, no grad_fn, requires grad): eager {expected[0]}, " \
                                         f"ember {backend} {actual[0]}"
        torch.testing.assert_close(actual[1], expected[1])
        torch.testing.assert_close(actual[2], expected[2])
