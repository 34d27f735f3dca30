"""max/min over a dim of a bool tensor (cumprod's backward does it): values and indices equal ATen's."""
import torch

from ember.decomp import run_decomposition

aten = torch.ops.aten


def test_max_min_dim_of_bool():
    x = torch.rand(5, 7, generator=torch.Generator().manual_seed(0)) > 0.6
    for op in (aten.max.dim, aten.min.dim):
        for dim, keep in ((0, False), (1, True)):
            v, i = run_decomposition(op, x, dim, keep)
            ev, ei = op(x, dim, keep)
            assert torch.equal(v, ev) and torch.equal(i, ei)
