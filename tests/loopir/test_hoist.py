"""Per-point work the lowering saves for Triton kernels, which compute every value at every point of a flat block:
a small value with a costly op (a batch norm's per-channel ``rsqrt(var / n + eps)``) that a user broadcasts is
stored once (``lower._hoist``) and not recomputed by ``remat``; tiny kernels of one shape join one launch; a
float division by a power of two is a multiply, equal bit for bit."""
from __future__ import annotations

import importlib.util
import math

import pytest
import torch

import ember
from ember.autograd.aot import decompose_graph
from ember.autograd.trace import trace_aten
from ember.loopir import lower as lower_mod
from ember.loopir.expr import Op, walk
from ember.loopir.ir import Pointwise, prod
from ember.loopir.schedule import Kernel, schedule

from .backends import CPU_BACKENDS

BACKENDS = CPU_BACKENDS + (["triton"] if importlib.util.find_spec("triton") else [])


def _graph(fn, args, hoists=False):
    gm = decompose_graph(trace_aten(fn, args, training=False).gm)
    return lower_mod.lower(gm, "graph", hoists=lambda dev: hoists)


def _ops(nodes):
    return {e.name for n in nodes for e in walk(n.body) if isinstance(e, Op)}


def _bn_nhwc(x, var, w, b):
    """A batch norm's normalize over NHWC rows: per-channel statistics broadcast over 2 x 4 x 4 points (the
    normalize also reads ``var`` itself, so ``remat`` could recompute the stored rsqrt from what it reads)."""
    rstd = torch.rsqrt(var / 3.0 + 1e-5)
    return torch.relu((x - x.mean((0, 1, 2))) * rstd * w + b + var)


def _bn_args():
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(2, 4, 4, 16, generator=gen), torch.rand(16, generator=gen) + 0.5,
            torch.randn(16, generator=gen), torch.randn(16, generator=gen)]


def test_a_per_channel_rsqrt_is_stored_once_for_triton_kernels():
    args = _bn_args()
    for hoists in (True, False):
        graph = _graph(_bn_nhwc, args, hoists)
        big = [n for n in graph.nodes if isinstance(n, Pointwise) and prod(n.ranges) == 2 * 4 * 4 * 16]
        small = [n for n in graph.nodes if isinstance(n, Pointwise) and prod(n.ranges) == 16]
        assert big
        if hoists:   # the normalize loads rsqrt(var / 3 + eps), computed in a 16-point node
            assert not {"rsqrt", "div"} & _ops(big) and "rsqrt" in _ops(small), graph
            # ... and the scheduled kernel keeps loading it (remat does not inline it back)
            kernels = [k for k in schedule(graph).steps if isinstance(k, Kernel)]
            normalize = [k for k in kernels if any(n in big for n in k.nodes)]
            assert normalize and not {"rsqrt", "div"} & _ops(m for k in normalize for m in k.nodes)
        else:        # C++ and Python loops compute per-row values once: nothing is stored for them
            assert {"rsqrt", "div"} <= _ops(big) and not small


def test_a_value_its_users_do_not_broadcast_is_not_stored():
    """rsqrt of a full-size value, and a per-channel value only per-channel users read, stay inlined."""
    fn = lambda x, v: (torch.rsqrt(x.abs() + 1.0) * 2.0, torch.rsqrt(v + 1.0) * v)   # noqa: E731
    args = [torch.randn(8, 16), torch.rand(16)]
    graph = _graph(fn, args, hoists=True)
    assert [n for n in graph.nodes if isinstance(n, Pointwise)] and \
        all("rsqrt" in _ops([n]) for n in graph.nodes if isinstance(n, Pointwise)), graph


@pytest.mark.parametrize("cpu_backend", BACKENDS)
def test_batch_norm_with_stored_statistics_trains_like_eager(cpu_backend):
    """Channels-last batch norms in training (Triton hoists the per-channel values, the other backends do not):
    outputs, gradients and running statistics equal eager's."""
    torch.manual_seed(0)
    make = lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 12, 3, padding=1), torch.nn.BatchNorm2d(12),  # noqa
                                       torch.nn.ReLU(), torch.nn.Conv2d(12, 12, 3, padding=1),
                                       torch.nn.BatchNorm2d(12), torch.nn.ReLU())
    net, ref = make(), make()
    ref.load_state_dict(net.state_dict())
    net, ref = net.to(memory_format=torch.channels_last), ref.to(memory_format=torch.channels_last)
    f = ember.compile(net, options={"cpu_backend": cpu_backend})
    x = torch.randn(3, 3, 10, 10).to(memory_format=torch.channels_last)
    got, want = f(x), ref(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    g = torch.randn_like(want)
    got.backward(g)
    want.backward(g)
    for (name, a), b in zip(net.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-3, msg=name)
    for a, b in zip(net.buffers(), ref.buffers()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_tiny_kernels_of_one_shape_take_one_launch():
    """Two per-channel values with a full-size kernel between them in the graph's order are computed by one
    kernel (the second joins the first, not only the latest kernel)."""
    fn = lambda a, x, b: (torch.sqrt(a + 1.0), torch.exp(x), torch.sqrt(b + 2.0))   # noqa: E731
    graph = _graph(fn, [torch.rand(16), torch.randn(64, 64), torch.rand(16)])
    kernels = [k for k in schedule(graph).steps if isinstance(k, Kernel)]
    assert len(kernels) == 2 and sorted(len(k.nodes) for k in kernels) == [1, 2], [k.fused() for k in kernels]


_SPECIAL = [0.0, -0.0, 1.0, -3.5, 1e-40, -1e-45, 3e38, float("inf"), float("-inf"), float("nan")]


@pytest.mark.parametrize("c", [8.0, 0.25, -4.0, 2.0 ** -100, 1024])
@pytest.mark.parametrize("cpu_backend", BACKENDS)
def test_division_by_a_power_of_two_is_an_exact_multiply(cpu_backend, c):
    fn = lambda x: x / c   # noqa: E731
    x = torch.cat([torch.randn(200) * 1e3, torch.tensor(_SPECIAL)])
    ops = _ops(n for n in _graph(fn, [x]).nodes if isinstance(n, Pointwise))
    assert "mul" in ops and "div" not in ops, ops
    got = ember.compile(fn, options={"cpu_backend": cpu_backend})(x)
    want = fn(x)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got[~want.isnan()], want[~want.isnan()])


@pytest.mark.parametrize("c", [3.0, 0.1, 2.0 ** -140, 2.0 ** 130, 0.0])
def test_other_divisions_stay_divisions(c):
    """Not a power of two, or one whose reciprocal is not a normal float32 (or infinite): still a division."""
    x = torch.randn(64)
    assert math.isfinite(c) and "div" in _ops(n for n in _graph(lambda x: x / c, [x]).nodes
                                              if isinstance(n, Pointwise))
