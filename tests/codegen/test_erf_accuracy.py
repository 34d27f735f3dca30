"""erf in ember's C++ kernels, relative to the exact value: the Abramowitz-Stegun formula it used everywhere has
an absolute error of ~1.5e-7, so erf of small arguments was off by percents (erf(1e-6) 6%) and erf(1e-8) was 0,
where eager's erf is within an ulp. Differential: compiled erf (vector loops, their scalar tails, fused into
GELU) within a few float32 ulps of float64's, and close to eager."""
from __future__ import annotations

import math

import pytest
import torch

import ember

ULPS = 4

RANGES = {
    "tiny": (1e-12, 1e-6),
    "small": (1e-6, 1e-2),
    "mid": (1e-2, 1.0),
    "around_one": (0.9, 1.1),
    "large": (1.0, 6.0),
}
FNS = {
    "erf": (lambda x: torch.erf(x), lambda x: torch.special.erf(x)),
    "erf_fused": (lambda x: torch.erf(x * 0.5) + 0.0, lambda x: torch.erf(x * 0.5)),
}


def _points(lo, hi, n, seed):
    g = torch.Generator().manual_seed(seed)
    mag = torch.exp(torch.empty(n, dtype=torch.float64).uniform_(math.log(lo), math.log(hi), generator=g))
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    return (mag * sign).float()


@pytest.mark.parametrize("fn_name", list(FNS))
@pytest.mark.parametrize("rng", list(RANGES))
@pytest.mark.parametrize("n", [17, 1000])     # a vector loop and its scalar tail; a short scalar-only row
def test_erf_is_accurate_relative_to_its_value(fn_name, rng, n):
    fn, ref_fn = FNS[fn_name]
    ember.reset()
    compiled = ember.compile(fn)
    for seed in (0, 1):
        x = _points(*RANGES[rng], n, seed)
        got = compiled(x).double()
        ref = ref_fn(x.double())
        ulps = ((got - ref).abs() / ref.abs() / torch.finfo(torch.float32).eps).max().item()
        assert ulps <= ULPS, f"max error {ulps:.1f} float32 ulps (x {x[(got - ref).abs().argmax()].item():g})"
        torch.testing.assert_close(got.float(), fn(x), rtol=ULPS * 1.2e-7, atol=0.0)


def test_gelu_of_small_values_matches_eager():
    ember.reset()
    f = ember.compile(lambda x: torch.nn.functional.gelu(x) * 3)
    x = _points(1e-10, 1e-3, 257, 0)
    torch.testing.assert_close(f(x), torch.nn.functional.gelu(x) * 3, rtol=ULPS * 1.2e-7, atol=0.0)
