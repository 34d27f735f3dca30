"""In-place writes into a fresh tensor laid out like a transposed or permuted input, decomposed to prims.

``empty_like(x.t())`` is column-major in eager; functionalization writes an in-place op on it back with
``as_strided_scatter(base, src, size, stride, offset)``, whose strides address the base's memory as traced.
Prims lay out what they make row-major, so that call must get the base in its traced layout. Compiled values
must equal eager's on the kernel backend and on aot_eager with ember's decompositions.
"""
import pytest
import torch

import ember

BACKENDS = {
    "ember": dict(),
    "aot_eager_prims": dict(backend="aot_eager", options={"aot_decompose": True}),
}


def _slices(x):
    y = torch.empty_like(x.view(8, 12).t())
    y[:, :4] = 1.5
    y[:, 4:] = x.view(12, 8)[:, 4:] * 2
    return y


def _index_rows(x):
    y = torch.zeros_like(x.view(2, 6, 8).permute(2, 0, 1))
    y[1:5] += x.view(8, 2, 6)[1:5].cos()
    return y.sum(1)


CASES = {
    "copy_into_empty_like_transposed": lambda x: torch.empty_like(x.view(8, 12).t()).copy_(x.view(12, 8)),
    "slice_writes_into_empty_like_transposed": _slices,
    "add_into_zeros_like_permuted": _index_rows,
    "fill_then_add_transposed": lambda x: torch.empty_like(x.view(8, 12).t()).fill_(2).add_(x.view(12, 8)),
}


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("case", list(CASES))
def test_inplace_into_fresh_permuted_tensor_matches_eager(case, backend):
    fn = CASES[case]
    compiled = ember.compile(fn, **BACKENDS[backend])
    for seed in (0, 1):
        x = torch.randn(96, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(compiled(x), fn(x))
