"""An op that is an identity for the shapes it gets (``cumsum``/``cumprod`` over a dimension of size 1, a
reduction over such a dimension, ``cat`` of one tensor) still returns a new tensor in eager. Its decomposition
may return its operand unchanged; the compiled graph must still hand back memory of its own, so that a later
in-place write to the input (or to the result, after a graph break) does not show through the other.
Differential: compiled == eager for values and for the inputs' side effects, with ``aot_eager`` and ``ember``."""
from __future__ import annotations

import pytest
import torch

import ember

from tests.loopir.backends import CPU_BACKENDS

CONFIGS = [("aot_eager", None)] + [("ember", b) for b in CPU_BACKENDS]

# (name, op of x, shape of x): each op returns its operand's values for that shape
IDENTITIES = [
    ("cumsum_size1", lambda x: x.unsqueeze(1).cumsum(1), (4, 3)),
    ("cumsum_chunk", lambda x: x.chunk(3, 1)[2].cumsum(1), (3, 3, 5)),
    ("cumprod_size1", lambda x: x.cumprod(0), (1, 4)),
    ("sum_keepdim_size1", lambda x: x.sum(1, keepdim=True), (4, 1)),
    ("amax_size1", lambda x: x.amax(0), (1, 5)),
    ("mean_size1", lambda x: x.mean(0, keepdim=True), (1, 5)),
    ("cat_one", lambda x: torch.cat([x]), (3, 2)),
    ("flip_none", lambda x: x.flip([]), (3, 2)),
]


def _mutate_input_after(op):
    def fn(x):
        t = op(x)
        x.clamp_(-0.5, 0.5)
        return t
    return fn


def _mutate_result_after_break(op):
    def fn(x, y):
        t = op(x)
        y.append(float(x.sum()))          # a graph break between making t and writing it
        t.sigmoid_()
        return t
    return fn


@pytest.mark.parametrize("backend,cpu_backend", CONFIGS, ids=lambda c: str(c))
@pytest.mark.parametrize("name,op,shape", IDENTITIES, ids=[c[0] for c in IDENTITIES])
def test_identity_result_is_not_the_input(name, op, shape, backend, cpu_backend):
    ember.reset()
    opts = {"cpu_backend": cpu_backend} if cpu_backend else None
    for make in (_mutate_input_after, _mutate_result_after_break):
        fn = make(op)
        f = ember.compile(fn, backend=backend, options=opts)
        for seed in (0, 1):
            x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
            xe, xc = x.clone(), x.clone()
            args_e, args_c = ((xe,), (xc,)) if make is _mutate_input_after else ((xe, []), (xc, []))
            expected, got = fn(*args_e), f(*args_c)
            torch.testing.assert_close(got, expected)
            torch.testing.assert_close(xc, xe)          # the input's side effects
