"""Float32 sums in C++ kernels are as accurate as eager's, for every row length, static or symbolic.

A row added point by point into one accumulator (a vector lane, an outer point's slot, a scalar) loses about
its length times the unit roundoff when its points share a sign; eager's kernels add in cascades. The C++
generator adds every float sum in blocks (``ember.codegen.cpp_cascade``): inner rows (vector loops and scalar
loops), outer rows (vectorized across outer points, tiled, flat), with static and symbolic sizes. Each case
compares ember's float32 error against float64 with eager float32's, on data with a nonzero mean (where the
serial error shows), over several rows, and allows ember twice eager's (or two units of roundoff of the
result's magnitude, the rounding of the result itself)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember

SIZES = [7, 255, 256, 1000, 2047, 2048, 5000, 100000]
MULTIPLE = 2.0
FLOOR = 2 * 2.0 ** -24 * 2      # two units of float32 roundoff, relative to the result's magnitude

# name: (function of x, shape of x for a row of n points)
CASES = {
    "row_sum": (lambda x: x.sum(-1), lambda n: (8, n)),
    "row_mean": (lambda x: x.mean(-1), lambda n: (8, n)),
    "column_sum": (lambda x: x.sum(0), lambda n: (n, 32)),
    "middle_mean": (lambda x: x.mean((0, 2)), lambda n: (2, 8, n)),
    "sum_of_exp": (lambda x: (x * 0.25).exp().sum(-1), lambda n: (8, n)),
    "softmax": (lambda x: torch.softmax(x, -1), lambda n: (8, n)),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), lambda n: (8, n)),
    "layer_norm": (lambda x: F.layer_norm(x, x.shape[-1:]), lambda n: (8, n)),
}


def _err(got: torch.Tensor, ref: torch.Tensor) -> float:
    return ((got.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def _check(f, fn, shape, seed: int, what: str) -> None:
    g = torch.Generator().manual_seed(seed)
    errs, eager_errs = [], []
    for _ in range(3):
        x = torch.randn(*shape, generator=g) + 3
        ref = fn(x.double())
        errs.append(_err(f(x), ref))
        eager_errs.append(_err(fn(x), ref))
    err, eager_err = max(errs), max(eager_errs)
    assert err <= max(MULTIPLE * eager_err, FLOOR), f"{what}: ember {err:.2e}, eager {eager_err:.2e}"


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", list(CASES))
def test_static_sums_as_accurate_as_eager(name, n):
    fn, shape = CASES[name]
    ember.reset()
    _check(ember.compile(fn, dynamic=False), fn, shape(n), n, f"{name} over {n} points")


@pytest.mark.parametrize("name", list(CASES))
def test_symbolic_sums_as_accurate_as_eager(name):
    """One kernel over a symbolic row length, first compiled for a short row (its hint), run on all sizes."""
    fn, shape = CASES[name]
    ember.reset()
    f = ember.compile(fn, dynamic=True)
    for n in SIZES:
        _check(f, fn, shape(n), n, f"{name} over {n} points (symbolic)")


def _layer_norm(x, w, b, gy):
    return F.layer_norm(x, x.shape[-1:], w, b)


def _group_norm(x, w, b, gy):
    return F.group_norm(x, 4, w, b)


def _batch_norm(x, w, b, gy):
    return F.batch_norm(x, None, None, w, b, training=True)


# training: the backward's sums (weight and bias gradients over rows, the input gradient's row sums); the batch
# norm's per-channel sums over N x L points were 20-35x eager's error (bias gradient) before the cascade
TRAIN = {
    "layer_norm": (_layer_norm, lambda n: (16, n), lambda n: n),
    "group_norm": (_group_norm, lambda n: (4, 8, n), lambda n: 8),
    "batch_norm": (_batch_norm, lambda n: (4, 8, n), lambda n: 8),
}


@pytest.mark.parametrize("n", [255, 1000, 5000])
@pytest.mark.parametrize("name", list(TRAIN))
def test_norm_backward_sums_as_accurate_as_eager(name, n):
    fn, shape, channels = TRAIN[name]
    ember.reset()
    f = ember.compile(fn, dynamic=False)
    g = torch.Generator().manual_seed(n)

    def grads(run, dtype, x, w, b, gy):
        leaves = [t.to(dtype).requires_grad_() for t in (x, w, b)]
        out = run(*leaves, gy.to(dtype))
        return torch.autograd.grad(out, leaves, gy.to(dtype))
    errs: dict = {}
    for _ in range(3):      # the largest error of a few draws (sums of both signs: errors vary from draw to draw)
        x = torch.randn(*shape(n), generator=g) + 3
        w = torch.randn(channels(n), generator=g) + 3
        b = torch.randn(channels(n), generator=g)
        gy = torch.randn(*shape(n), generator=g) + 1
        runs = [grads(run, dt, x, w, b, gy) for run, dt in ((f, torch.float32), (fn, torch.float32),
                                                            (fn, torch.float64))]
        for what, gt, e, r in zip(("x", "weight", "bias"), *runs):
            old = errs.get(what, (0.0, 0.0))
            errs[what] = (max(old[0], _err(gt, r)), max(old[1], _err(e, r)))
    for what, (err, eager_err) in errs.items():
        assert err <= max(MULTIPLE * eager_err, FLOOR), \
            f"{name} grad {what} ({n}): ember {err:.2e}, eager {eager_err:.2e}"


# Welford statistics over outer rows (an NHWC batch norm's per-channel variance, a column variance): eager's
# var accumulates in float64, so ember's float32 Welford is allowed VAR_MULTIPLE times its error (it was
# 12-27x before its per-lane states were cascaded)
VAR_MULTIPLE = 5.0
VAR_CASES = {
    "column_var": (lambda x: x.var(0), lambda n: (n, 64)),
    "column_var_mean": (lambda x: torch.var_mean(x, 0)[0], lambda n: (n, 32)),
}


@pytest.mark.parametrize("n", [255, 1000, 2047])
@pytest.mark.parametrize("name", list(VAR_CASES))
def test_outer_variance_near_eager(name, n):
    fn, shape = VAR_CASES[name]
    ember.reset()
    f = ember.compile(fn, dynamic=False)
    g = torch.Generator().manual_seed(n)
    errs, eager_errs = [], []
    for _ in range(3):
        x = torch.randn(*shape(n), generator=g) + 3
        ref = fn(x.double())
        errs.append(_err(f(x), ref))
        eager_errs.append(_err(fn(x), ref))
    err, eager_err = max(errs), max(eager_errs)
    assert err <= max(VAR_MULTIPLE * eager_err, FLOOR), f"{name} over {n} rows: ember {err:.2e}, eager {eager_err:.2e}"
