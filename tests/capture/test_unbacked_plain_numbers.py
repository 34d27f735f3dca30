"""A data-dependent size (an unbacked ``u<k>``: the length of ``x[mask]``, of ``nonzero``) has no value at
compile time. Where the program needs it as a plain Python number (float arithmetic, true division, a
comparison with a float, ``~n``) ember breaks the graph and computes it from the real tensor; it once
substituted the meta runs' stand-in size (8191) and returned it as the answer. Values equal eager on fresh
inputs, on every backend, twice per compile (the second call hits the cache)."""
from __future__ import annotations

import pytest
import torch

import ember


def _float_mul(x):
    return x.sum() * 0 + x[x > -0.47].numel() * 1.0


def _true_div(x):
    return x.sum() * 0 + x[x > 0].shape[0] / 2


def _float_compare(x):
    n = torch.nonzero(x > 0.3).shape[0]
    return x * 2 if n > 3.5 else x - 1


def _invert(x):
    return x.sum() * 0 + ~x[x < 0].numel()


def _copy_into_view(x):
    t = (x * 1).chunk(3, 1)[0].t()
    t.squeeze(0).copy_(x[x > -0.47].numel() * 1.0 + 0 * x.sum())
    return t


PROGRAMS = {"float_mul": _float_mul, "true_div": _true_div, "float_compare": _float_compare,
            "invert": _invert, "copy_into_view": _copy_into_view}


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "ember"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_unbacked_size_as_a_plain_number_equals_eager(name, backend):
    ember.reset()
    fn = PROGRAMS[name]
    compiled = ember.compile(fn, backend=backend)
    for seed in range(3):
        x = torch.randn(5, 2, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(compiled(x.clone()), fn(x.clone()))
