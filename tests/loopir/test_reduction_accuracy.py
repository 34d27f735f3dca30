"""Long floating-point sums on the CPU are as accurate as ATen's: a float32 row added point by point into
one accumulator per lane loses about its length times the unit roundoff (a per-channel sum over a million
NHWC rows was 1e-5 off, its variance 1e-3, where ATen's cascade sums stay near 1e-7). Each case measures the
error of eager float32 and of ember against float64 and allows ember a small multiple of eager's."""
from __future__ import annotations

import pytest
import torch

import ember

from .backends import CPU_BACKENDS


def _nhwc(*shape):
    return lambda g: (torch.rand(*shape, generator=g) + 1).to(memory_format=torch.channels_last)


# name: (function, input maker); inputs are positive (post-ReLU-like), where sequential rounding accumulates
CASES = {
    "column_sum_1M_rows": (lambda x: x.sum(0), lambda g: torch.rand(1 << 20, 4, generator=g) + 1),
    "column_var_mean_1M_rows": (lambda x: torch.var_mean(x, 0),
                                lambda g: torch.rand(1 << 20, 4, generator=g) + 1),
    "column_mean_64_wide": (lambda x: x.mean(0), lambda g: torch.rand(1 << 15, 64, generator=g) + 1),
    "nhwc_channel_stats": (lambda x: (x.sum((0, 2, 3)), x.var((0, 2, 3))), _nhwc(16, 16, 64, 64)),
    "nhwc_global_avg_pool": (lambda x: x.mean((2, 3)), _nhwc(2, 64, 128, 128)),
    "token_bias_grad": (lambda x: x.reshape(-1, 96).sum(0),
                        lambda g: torch.rand(8, 4096, 96, generator=g) + 1),
    # rows of a few thousand points (issue 31: a RegNet-Y's batch statistics over 2x32x32 points were 10-40x
    # eager's error, enough to flip a ReLU and move its gradients)
    "nhwc_channel_stats_2048": (lambda x: (x.sum((0, 2, 3)), x.var((0, 2, 3))), _nhwc(2, 48, 32, 32)),
    "nhwc_var_mean_2048": (lambda x: torch.var_mean(x * 2, (0, 2, 3), correction=0), _nhwc(2, 104, 32, 32)),
    "nhwc_avg_pool_2304": (lambda x: x.mean((2, 3)), _nhwc(2, 48, 48, 48)),
    "nhwc_avg_pool_3136": (lambda x: x.mean((2, 3)), _nhwc(2, 48, 56, 56)),
    "column_sum_3000_rows": (lambda x: x.sum(0), lambda g: torch.rand(3000, 64, generator=g) + 1),
}
MULTIPLE = 10            # ember's error within this multiple of eager float32's ...
FLOOR = 1e-6             # ... or this fraction of the result's magnitude


def _err(got, ref) -> float:
    return ((got.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


@pytest.mark.parametrize("cpu_backend", [b for b in CPU_BACKENDS if b != "python"] or ["python"])
@pytest.mark.parametrize("name", list(CASES))
def test_long_sums_are_as_accurate_as_eager(name, cpu_backend):
    fn, make = CASES[name]
    ember.reset()
    f = ember.compile(fn, options={"cpu_backend": cpu_backend})
    x = make(torch.Generator().manual_seed(0))
    got, eager, ref = f(x), fn(x), fn(x.double())
    got, eager, ref = [torch.utils._pytree.tree_leaves(v) for v in (got, eager, ref)]
    for i, (g, e, r) in enumerate(zip(got, eager, ref)):
        err, eager_err = _err(g, r), _err(e, r)
        assert err <= max(MULTIPLE * eager_err, FLOOR), \
            f"{name} output {i}: ember {err:.2e}, eager {eager_err:.2e}"
