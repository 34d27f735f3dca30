"""An output that is a view of a graph input which is itself a view (``t2 = x1[2]`` before a graph break, the
resumed graph returns ``t2.reshape(3)``), in a graph recompiled with symbolic sizes (an int that changed across
calls): the runtime rebuilds the output as a view of the real input at an offset from the input's start, but
the offset was taken from the storage start of the input's fake, which sits at the view's own offset, so it
was counted twice (fuzz seed 342622: the second call returned x1[4] for x1[2]). Differential: values equal
eager's and the output shares the input's memory, on aot_eager and ember."""
from __future__ import annotations

import pytest
import torch

import ember


def _brk(x0):
    return int(x0.argmax())          # a graph break, and an int that changes from call to call


def row_reshape(x0, x1, n):
    k = _brk(x0)
    t = x1[n]
    k6 = t.mean().item()
    return t.reshape(3), k + k6 * 0


def slice_view(x0, x1, n):
    k = _brk(x0)
    t = x1[1:4]
    float(t.sum())
    return t[1:], k


def narrow_transpose(x0, x1, n):
    k = _brk(x0)
    t = x1.narrow(0, n, 2)
    float(t.sum())
    return t.t(), k


def column_view(x0, x1, n):
    k = _brk(x0)
    t = x1[:, 1]
    float(t.sum())
    return t.unsqueeze(0), k


CASES = [row_reshape, slice_view, narrow_transpose, column_view]


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_view_of_a_view_input_after_symbolic_recompile(fn, backend):
    ember.reset()
    compiled = ember.compile(fn, backend=backend)
    for call in range(4):
        x0 = torch.randn(5, 3, generator=torch.Generator().manual_seed(call * 3))
        x1 = torch.arange(15.).reshape(5, 3) + 100 * call
        expected, actual = fn(x0, x1, 2), compiled(x0, x1, 2)
        torch.testing.assert_close(actual[0], expected[0])
        assert actual[1] == expected[1]
        assert actual[0].data_ptr() == expected[0].data_ptr()      # a view of x1, as in eager
