"""float32 variances of the C++ kernels' rows against a float64 reference: within about twice eager's error.

ATen's CPU variance accumulates in double, so eager's float32 result is close to correctly rounded (~0.5 ulp).
ember's vector loops update float Welford states in cascade blocks combined by Chan's formula, fold the lanes
into a float64 state, and scalar loops keep float64 sums (ember.codegen.cpp_vec, cpp_cascade, cpp). Rows
(vector loops, their scalar tails, short scalar rows), static and symbolic sizes, several shifts of the mean.
Before: a row of 100000 points was 7-11x eager's error, one of 7 points up to 16x."""
import pytest
import torch
import torch.nn.functional as F

import ember

FP32_ULP = 2.0 ** -24


def _rel_err(got, ref):
    return ((got.double() - ref).abs().max() / ref.abs().max()).item()


CASES = [
    # name, function, shape for size n, sizes
    ("var_rows", lambda x: x.var(-1), lambda n: (6, n), (7, 100, 4097, 100000)),
    ("std_rows", lambda x: x.std(-1, correction=0), lambda n: (5, n), (9, 33333)),
    ("var_mean_rows", lambda x: torch.var_mean(x, -1)[0], lambda n: (4, n), (13, 10000)),
    ("layer_norm", lambda x: F.layer_norm(x, x.shape[-1:]), lambda n: (4, n), (7, 20000)),
    ("group_norm", lambda x: F.group_norm(x, 4), lambda n: (2, 8, n, 3), (7, 3000)),
]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("name,fn,shape,sizes", CASES, ids=[c[0] for c in CASES])
def test_float32_variance_error_near_eager(name, fn, shape, sizes, dynamic):
    ember.reset()
    compiled = ember.compile(fn, dynamic=dynamic)
    g = torch.Generator().manual_seed(31)
    worst = []
    for n in sizes:
        for shift in (0.0, 3.0, 100.0):
            x = torch.randn(shape(n), generator=g) * 0.5 + shift
            ref = fn(x.double())
            err_eager, err_ember = _rel_err(fn(x), ref), _rel_err(compiled(x), ref)
            # 2.5x eager's error, or of one float32 ulp of the largest value if eager's is smaller (eager's is
            # ~0.5 ulp, its double result's rounding; ember's float32 result rounds m2 and its division again)
            if err_ember > 2.5 * max(err_eager, FP32_ULP):
                worst.append(f"n={n} shift={shift}: ember {err_ember:.3g} vs eager {err_eager:.3g}")
    assert not worst, worst
