"""Vendor batch-norm kernels (``cudnn_batch_norm``, ``miopen_batch_norm``) write the running statistics in place
although their schemas declare no write (ember.autograd.device_norms). This machine has no GPU, so the tests give
those ops CPU kernels that behave as the vendor's do (``native_batch_norm``'s numbers, the statistics written in
place), call them as ATen's ``batch_norm`` does on a GPU, and compare ember with eager: outputs, gradients and
the running statistics. Instance norm (statistics repeated per sample, written back as their mean) is the case
that was wrong on the H100: the write to the repeated copies was invisible to functionalization."""
from __future__ import annotations

import pytest
import torch

import ember

aten = torch.ops.aten


def _cpu_vendor_kernels():
    lib = torch.library.Library("aten", "IMPL")

    def forward(workspace):
        def run(x, w, b, rm, rv, training, momentum, eps):
            out, mean, invstd = aten.native_batch_norm(x, w, b, rm, rv, training, momentum, eps)
            return (out, mean, invstd, x.new_empty((0,), dtype=torch.uint8)) if workspace else (out, mean, invstd)
        return run

    def backward(x, grad, w, rm, rv, save_mean, save_var, eps, *workspace):
        return aten.native_batch_norm_backward(grad, x, w, rm, rv, save_mean, save_var, True, eps,
                                               [True, True, True])

    lib.impl("cudnn_batch_norm", forward(True), "CPU")
    lib.impl("cudnn_batch_norm_backward", backward, "CPU")
    lib.impl("miopen_batch_norm", forward(False), "CPU")
    lib.impl("miopen_batch_norm_backward", backward, "CPU")
    return lib


@pytest.fixture(scope="module", autouse=True)
def vendor_kernels():
    lib = _cpu_vendor_kernels()
    yield
    lib._destroy()


def _instance_norm(op):
    """ATen's instance norm over a vendor batch norm: statistics repeated per sample, mean written back."""
    def f(x, rm, rv, w, b):
        n, c = x.shape[:2]
        rm_, rv_ = rm.repeat(n), rv.repeat(n)
        y = op(x.reshape(1, n * c, *x.shape[2:]), w.repeat(n), b.repeat(n), rm_, rv_, True, 0.1, 1e-5)[0]
        rm.copy_(rm_.view(n, c).mean(0))
        rv.copy_(rv_.view(n, c).mean(0))
        return y.view_as(x).relu()
    return f


def _batch_norm(op, training):
    def f(x, rm, rv, w, b):
        return op(x, w, b, rm, rv, training, 0.1, 1e-5)[0].sigmoid() * 2
    return f


def _stats_of_view(op):
    """The statistics are a view of a bigger buffer (a module's packed state)."""
    def f(x, rm, rv, w, b):
        packed = torch.cat([rm, rv]).clone()
        y = op(x, w, b, packed[:3], packed[3:], True, 0.1, 1e-5)[0]
        rm.copy_(packed[:3])
        rv.copy_(packed[3:])
        return y
    return f


CASES = {
    "instance_norm": _instance_norm,
    "batch_norm_train": lambda op: _batch_norm(op, True),
    "batch_norm_eval": lambda op: _batch_norm(op, False),
    "stats_view": _stats_of_view,
}


@pytest.mark.parametrize("op", [aten.cudnn_batch_norm, aten.miopen_batch_norm], ids=["cudnn", "miopen"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_vendor_batch_norm_equals_eager(case, op, training):
    fn = CASES[case](op)
    compiled = ember.compile(fn)
    for step in range(2):
        x = torch.randn(4, 3, 5, 5) * 2 + 1
        w, b = torch.rand(3) + 0.5, torch.randn(3)
        g = torch.randn(4, 3, 5, 5)       # a loss whose gradients are not sums that cancel to ~0
        outs = []
        for f in (fn, compiled):
            rm, rv = torch.linspace(-1, 1, 3), torch.linspace(0.5, 2, 3)
            args = [t.clone().requires_grad_(training) for t in (x, w, b)]
            y = f(args[0], rm, rv, args[1], args[2])
            grads = torch.autograd.grad(y, args, g) if training else ()
            outs.append((y.detach(), rm, rv, *grads))
        for ref, got in zip(*outs):
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
