"""Recomputing a stored value in a kernel that reads what it is computed from (ember.loopir.remat): a batch
norm's ReLU output, stored for a convolution's weight gradient (here a matmul), is recomputed by the backward's
sums, which read the normalized input anyway, instead of being loaded: one full buffer fewer read."""
from __future__ import annotations

import pytest
import torch

import ember
from ember.autograd.aot import decompose_graph
from ember.loopir import lower as lower_mod
from ember.loopir.schedule import Kernel, schedule

from .backends import CPU_BACKENDS


def _kernels(fn, args):
    from ember.autograd.trace import trace_aten
    gm = decompose_graph(trace_aten(fn, args, training=False).gm)
    return [k for k in schedule(lower_mod.lower(gm, "graph")).steps if isinstance(k, Kernel)]


def _with_x(g, x, mean, rstd, w, b, m):
    act = torch.relu((x - mean) * rstd * w + b)         # stored for the matmul
    dy = (act @ m) @ m.t() * g * (act > 0)              # computed after act's kernel (as a convolution's grad)
    return dy.sum(0), (dy * (x - mean)).sum(0)


def _without_x(g, x, mean, rstd, w, b, m):
    act = torch.relu((x - mean) * rstd * w + b)
    return ((act @ m) @ m.t() * g * (act > 0)).sum(0)


def _args():
    gen = torch.Generator().manual_seed(0)
    shapes = [(256, 32), (256, 32), (32,), (32,), (32,), (32,), (32, 8)]
    out = [torch.randn(*s, generator=gen) for s in shapes]
    out[3] = out[3].abs() + 0.5
    return out


def _loads_of(kernels, buf):
    return [k for k in kernels if buf in k.reads]


def test_sums_reading_the_input_recompute_the_stored_relu():
    args = _args()
    kernels = _kernels(_with_x, args)
    act = next(s for k in kernels for s in k.stores if not k.is_reduction and "maximum" in k.fused())
    sums = [k for k in kernels if k.is_reduction]
    assert sums and not any(act in k.reads for k in sums), [(k.fused(), k.reads) for k in kernels]
    # a kernel that does not read the input keeps loading the stored value (recomputing would read more)
    kernels = _kernels(_without_x, args)
    act = next(s for k in kernels for s in k.stores if not k.is_reduction and "maximum" in k.fused())
    assert any(act in k.reads for k in kernels if k.is_reduction)


@pytest.mark.parametrize("fn", [_with_x, _without_x])
@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
def test_recomputed_relu_matches_eager(cpu_backend, fn):
    args = _args()
    got = ember.compile(fn, options={"cpu_backend": cpu_backend})(*args)
    for a, b in zip(got, fn(*args)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
