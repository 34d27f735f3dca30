"""float32 variances along non-innermost dims (column reductions) against a float64 reference: within about
twice eager's error.

``x.var(0)`` of an (N, C) tensor, a transposed input's ``var(1)``, ``std``, ``var_mean`` and a batch norm's
per-channel statistics (NCHW and channels-last) run as column reductions in the C++ kernels: one vector lane
per outer point (``cpp_colred.XVec``), the points of fewer columns than lanes interleaved in one run
(``cpp_colred.Flat``), scalar loops, and for long columns partials over chunks of the rows combined after
(``ember.loopir.welford``). ATen's CPU variance accumulates in float64, so eager's float32 result is close to
correctly rounded. Errors are the worst over seeds and shifts of the mean, per size, static and symbolic.
Before: float Welford lanes, float sums of squares and float combines were 2.7-36x eager's error (a column of
4097 rows, whose partials were shifted sums of squares: 36x; 8 columns over 1000 rows: 21x)."""
import pytest
import torch
import torch.nn.functional as F

import ember

FP32_ULP = 2.0 ** -24
ROWS = (7, 100, 2048, 4097, 100000)
COLS = (1, 3, 8, 64, 1000)
MAX_NUMEL = 1 << 21


def _rel_err(got, ref):
    return ((got.double() - ref).abs().max() / ref.abs().max()).item()


def _bn_var(x):
    """A batch norm's running (unbiased) variance after one training step with momentum 1."""
    mean, var = torch.zeros(x.shape[1], dtype=x.dtype), torch.zeros(x.shape[1], dtype=x.dtype)
    F.batch_norm(x, mean, var, training=True, momentum=1.0)
    return var


CASES = [
    # name, function, input for (rows, cols), float32 roundings after M2 (each up to half an ulp): the error
    # floor, in ulps, where eager's (its float64 result rounded once) is smaller
    ("var0", lambda x: x.var(0), lambda n, c: torch.randn(n, c), 1),
    ("var_transposed", lambda x: x.var(1), lambda n, c: torch.randn(n, c).t(), 1),
    ("std0", lambda x: x.std(0, correction=0), lambda n, c: torch.randn(n, c), 1),
    ("var_mean0", lambda x: torch.var_mean(x, 0, correction=0)[0], lambda n, c: torch.randn(n, c), 1),
    # the batch norm's variance, then its unbiased running variance: a rounding more
    ("bn_nchw", _bn_var, lambda n, c: torch.randn(-(-n // 4), c, 2, 2), 2),
    ("bn_channels_last", _bn_var,
     lambda n, c: torch.randn(-(-n // 4), c, 2, 2).contiguous(memory_format=torch.channels_last), 2),
]


def _errors(compiled, fn, make, n, c):
    worst_ember = worst_eager = 0.0
    for seed in (0, 1):
        for shift in (0.0, 3.0, 100.0):
            torch.manual_seed(seed)
            x = make(n, c) * 0.5 + shift
            ref = fn(x.double())
            worst_eager = max(worst_eager, _rel_err(fn(x), ref))
            worst_ember = max(worst_ember, _rel_err(compiled(x), ref))
    return worst_ember, worst_eager


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("name,fn,make,ulps", CASES, ids=[c[0] for c in CASES])
def test_float32_column_variance_error_near_eager(name, fn, make, ulps, dynamic):
    bad = []
    ember.reset()
    compiled = ember.compile(fn, dynamic=dynamic)
    for n in ROWS:
        for c in COLS:
            if n * c > MAX_NUMEL:
                continue
            if not dynamic:
                ember.reset()
                compiled = ember.compile(fn)
            err_ember, err_eager = _errors(compiled, fn, make, n, c)
            # twice eager's error, or the float32 roundings' where eager's is smaller
            if err_ember > 2 * max(err_eager, ulps * FP32_ULP):
                bad.append(f"rows={n} cols={c}: ember {err_ember:.3g} vs eager {err_eager:.3g}")
    assert not bad, bad
