"""An index tensor holding a value outside the dimension it indexes raises, as in eager, instead of reading
memory outside the tensor (C++ kernels check every index they load; in-range calls give eager's values)."""
from __future__ import annotations

import pytest
import torch

import ember

CASES = {
    "advanced_indexing": lambda x, i: (x + 1)[i].sum(),
    "index_select": lambda x, i: torch.index_select(x * 2, 0, i),
    "gather": lambda x, i: torch.gather(x * 2, 0, i),
    "embedding": lambda x, i: torch.nn.functional.embedding(i, x.view(5, 1) * 3),
    "take_rows": lambda x, i: x.view(5, 1).expand(5, 4)[i] * 2,
}


@pytest.mark.parametrize("name", list(CASES))
def test_out_of_range_index_raises(name):
    ember.reset()
    f = CASES[name]
    cf = ember.compile(f)
    x = torch.randn(5)
    good = torch.tensor([4, 0, 2])
    assert torch.allclose(cf(x, good), f(x, good))
    for bad in ([1, 7], [-9, 0], [5]):
        idx = torch.tensor(bad)
        with pytest.raises((IndexError, RuntimeError)) as eager_err:
            f(x, idx)
        with pytest.raises(eager_err.type):
            cf(x, idx)
    assert torch.allclose(cf(x, good), f(x, good))         # the kernel still works after an error


def test_negative_in_range_indices_wrap():
    ember.reset()
    f = CASES["advanced_indexing"]
    x = torch.randn(5)
    idx = torch.tensor([-1, -5, 3])
    assert torch.allclose(ember.compile(f)(x, idx), f(x, idx))
