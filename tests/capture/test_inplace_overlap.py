"""In-place writes and ``out=`` whose destination overlaps a source (or itself) in memory, compiled == eager.

Eager raises for some ("unsupported operation: some elements of the input tensor and the written-to tensor
refer to a single memory location", "more than one element of the written-to tensor refers to a single memory
location"): ember raises the same type and message, from the user's line. Eager computes others in its loop
order (a strided destination that a broadcast source lies in): ember's values and side effects equal eager's.
Each case also runs with the overlap made across a graph break (the aliases become separate graph inputs).
"""
from __future__ import annotations

import sys
import traceback
from pathlib import Path

import pytest
import torch

if str(Path(__file__).resolve().parents[2]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ember  # noqa: E402

THIS_FILE = str(Path(__file__).resolve())
BACKENDS = ["ember", "aot_eager", "eager"]


def _brk(x):
    return float(x.sum())       # a graph break (a tensor converted to a Python number)


# -- eager computes these in its loop order -------------------------------------------------------------------
def add_split_of_itself(x):
    x.add_(torch.split(x, 1, dim=2)[0])
    return x


def mul_broadcast_slice(x):
    x.mul_(x[:3, :2:3, :3])
    return x * 1


def chunk_mul_element(x):
    v = x.chunk(2, 1)[0]
    v.mul_(x[:1, :5:2][:, -2])
    return float(v.abs().sum())


def unsqueezed_rows_add(x):
    t1 = x.narrow(1, 5, 1)
    x[3:6:2].unsqueeze(2).add_(t1[3])
    return x


def sub_narrow_alpha(x):
    t = x.unsqueeze(0)
    t.sub_(t.narrow(3, 1, 1), alpha=0.5)
    return t * 1


def setitem_strided_from_column(x):
    x[:, 1:] = x[:, :1] * 1 + x[:, 1:2]      # the source is computed: no overlap, functional
    x[:, 1:].copy_(x[:, 1:2].expand(-1, x.shape[1] - 1))
    return x


def out_strided(x):
    torch.mul(x[:, :1].expand(-1, 3), 2, out=x[:, ::2])
    return x


def across_break_add(x):
    v = x[:, 1:2]
    _brk(x)
    x[:, 1:].add_(v)
    return x


def across_break_mul(x):
    v = x.chunk(2, 1)[0]
    s = x[0:1, 2:3]
    _brk(x)
    v.mul_(s)
    return x


ORDER_CASES = [(add_split_of_itself, (2, 5, 2)), (mul_broadcast_slice, (3, 3, 3)), (chunk_mul_element, (2, 5)),
               (unsqueezed_rows_add, (6, 6)), (sub_narrow_alpha, (2, 2, 4)), (setitem_strided_from_column, (4, 5)),
               (out_strided, (3, 6)), (across_break_add, (3, 5)), (across_break_mul, (2, 5))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn,shape", ORDER_CASES, ids=[c[0].__name__ for c in ORDER_CASES])
def test_loop_order_semantics(fn, shape, backend):
    ember.reset()
    f = ember.compile(fn, backend=backend)
    for seed in (0, 1):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        xe, xc = x.clone(), x.clone()
        expected, got = fn(xe), f(xc)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(xc, xe)


# -- eager raises for these --------------------------------------------------------------------------------------
PARTIAL = ("unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
           "single memory location. Please clone() the tensor before performing the operation.")
INTERNAL = ("unsupported operation: more than one element of the written-to tensor refers to a single memory "
            "location. Please clone() the tensor before performing the operation.")


def shifted_add(x):
    y = x * 2
    y.view(-1)[1:].add_(y.view(-1)[:-1])
    return y


def shifted_copy(x):
    y = x + 1
    y[1:] = y[:-1]
    return y


def shifted_out(x):
    y = x.view(-1)
    torch.add(y[:-1], 1, out=y[1:])
    return x


def expanded_add(x):
    y = x[:1].expand(3, -1)
    y.add_(1)
    return y


def expanded_mul_(x):
    return x.unsqueeze(0).expand(2, -1, -1).mul_(x)


def shifted_add_across_break(x):
    v = x.view(-1)[:-1]
    _brk(x)
    x.view(-1)[1:].add_(v)
    return x


RAISE_CASES = [(shifted_add, PARTIAL, True), (shifted_copy, PARTIAL, True), (shifted_out, PARTIAL, True),
               (expanded_add, INTERNAL, True), (expanded_mul_, INTERNAL, True),
               (shifted_add_across_break, PARTIAL, False)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn,message,at_line", RAISE_CASES, ids=[c[0].__name__ for c in RAISE_CASES])
def test_eager_overlap_errors(fn, message, at_line, backend):
    ember.reset()
    f = ember.compile(fn, backend=backend)
    x = torch.randn(3, 4)
    with pytest.raises(RuntimeError) as eager:
        fn(x.clone())
    assert str(eager.value) == message
    with pytest.raises(RuntimeError) as got:
        f(x.clone())
    assert type(got.value) is RuntimeError and str(got.value) == message
    if at_line:     # the innermost user frame is the line of the op, as in eager
        user = [fr for fr in traceback.extract_tb(got.value.__traceback__) if fr.filename == THIS_FILE]
        want = [fr for fr in traceback.extract_tb(eager.value.__traceback__) if fr.filename == THIS_FILE]
        assert user and user[-1].lineno == want[-1].lineno, traceback.format_tb(got.value.__traceback__)


def test_no_overlap_no_break():
    """Writes that share a storage without sharing elements stay in one graph (no eager fallback)."""
    def fn(x):
        x[:, ::2].add_(x[:, 1::2])
        x[0].mul_(x[1])
        return x.sum()
    ember.reset()
    x = torch.randn(4, 6)
    xe, xc = x.clone(), x.clone()
    torch.testing.assert_close(ember.compile(fn)(xc), fn(xe))
    torch.testing.assert_close(xc, xe)
    assert ember.explain(fn, x.clone()).graph_break_count == 0
