"""Regressions found by ``tools/models_sweep.py`` (real transformers / torchvision / timm models), each reduced to
the construct at fault. Differential: the compiled function must match eager on fresh random inputs, and it
must run through the kernel compiler (no silent fallback to eager autograd, which hides the slowness a user
sees)."""
import pytest
import torch

import ember


def _check_compiled(fn, *args):
    ember.reset()
    got = ember.compile(fn, fullgraph=True)(*args)
    want = fn(*args)
    stats = ember.stats()
    assert stats["eager_autograd_graphs"] == 0 and stats["fallbacks_to_eager"] == 0, stats
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want)


# Integer ``arange`` with float bounds or step (XLNet's relative positions: ``arange(beg, end, -1.0,
# dtype=torch.int64)``): eager truncates start and step; the length comes from the truncated bounds for int64
# and from the float ones for the other integer dtypes.
ARANGE_CASES = [
    ((8, -2, -1.0), torch.int64),
    ((-8, 2, 1.0), torch.int64),
    ((0, 20, 2.0), torch.int64),
    ((0.5, 5.7, 1.5), torch.int64),
    ((0.5, 5.7, 1.5), torch.int32),
    ((1.9, 7.2, 2.9), torch.int32),
    ((-0.5, -5.5, -1.0), torch.int64),
    ((3.0, 9.0), torch.int16),
    ((7.0,), torch.int64),
]


@pytest.mark.parametrize("bounds,dtype", ARANGE_CASES)
def test_integer_arange_with_float_bounds(bounds, dtype):
    n = len(torch.arange(*bounds, dtype=dtype))

    def fn(x):
        return torch.arange(*bounds, dtype=dtype).float() * x

    _check_compiled(fn, torch.randn(n))
