"""A compiled graph runs with autocast off: its trace holds autocast's casts already, so an ATen op it calls
must compute in the dtypes it was traced with. Before, an fp32 matmul traced in an autocast-disabled region
(or scaled_dot_product_attention's fp32 math path) ran in bf16 under the caller's autocast, and the kernels
compiled for its fp32 result read and wrote a bf16 buffer as fp32 (heap corruption on the CPU)."""
import torch

import ember


def _fn(a, b, c):
    with torch.autocast("cpu", enabled=False):
        y = torch.mm(a, b)              # fp32 inside the caller's bf16 autocast
    z = torch.mm(a, c)                  # bf16
    return (y * 2).relu(), z.float().tanh(), torch.bmm(y.unsqueeze(0), c.float().t().unsqueeze(0)).sum(-1)


def _inputs(grad):
    torch.manual_seed(0)
    return [torch.randn(48, 40, requires_grad=grad), torch.randn(40, 56, requires_grad=grad),
            torch.randn(40, 56, requires_grad=grad)]


def _run(fn, grad):
    args = _inputs(grad)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outs = fn(*args)
    if not grad:
        return list(outs)
    grads = torch.autograd.grad(sum(o.float().sum() for o in outs), args)
    return [*outs, *grads]


def _close(got, ref):
    """Equal dtypes; values within bf16 rounding of the tensor's scale (bf16 matmuls sum in another order)."""
    for r, g in zip(ref, got):
        assert g.dtype == r.dtype
        torch.testing.assert_close(g, r, rtol=2e-2, atol=2e-2 * r.abs().max().item())


def test_inference_graph_keeps_traced_dtypes():
    ref, got = _run(_fn, False), _run(ember.compile(_fn), False)
    _close(got, ref)
    torch.testing.assert_close(got[0], ref[0], rtol=1e-5, atol=1e-5)   # computed in fp32, as eager did


def test_training_graphs_keep_traced_dtypes():
    ref, got = _run(_fn, True), _run(ember.compile(_fn), True)
    _close(got, ref)
    torch.testing.assert_close(got[0], ref[0], rtol=1e-5, atol=1e-5)
