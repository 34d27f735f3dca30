"""Batch norm on CUDA, where ATen picks ``cudnn_batch_norm`` (static sizes; ember records it as
``native_batch_norm``, ember.autograd.device_norms) or ember's size-generic composition (symbolic sizes): a
compiled training step equals eager in outputs, input and weight gradients, and the module's running statistics
and batch counter after several steps; eval mode reads them back. Static, dynamic=True and automatic dynamic (batch
sizes that change each step), float32 and bfloat16, 1-D/2-D batch norm and instance norm."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import ember

pytestmark = pytest.mark.gpu


def _model(kind: str, dtype: torch.dtype) -> nn.Module:
    if kind == "bn2d":
        m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1),
                          nn.BatchNorm2d(4, momentum=None))
    elif kind == "bn1d":
        m = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.GELU(), nn.Linear(16, 3))
    else:
        m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.InstanceNorm2d(8, affine=True, track_running_stats=True), nn.ReLU())
    return m.cuda().to(dtype)


def _input(kind: str, b: int, dtype: torch.dtype) -> torch.Tensor:
    shape = (b, 6) if kind == "bn1d" else (b, 3, 10, 12)
    return torch.randn(*shape, device="cuda", dtype=dtype)


def _step(model, x):
    x = x.detach().clone().requires_grad_(True)
    out = model(x)
    out.float().square().mean().backward()
    return out.detach(), x.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("dynamic", [False, True, None], ids=["static", "dynamic", "auto"])
@pytest.mark.parametrize("kind", ["bn2d", "bn1d", "instance"])
def test_batch_norm_training_on_cuda(kind, dynamic, dtype):
    torch.manual_seed(0)
    ember.reset()
    ref = _model(kind, dtype)
    mine = copy.deepcopy(ref)
    compiled = ember.compile(mine, dynamic=dynamic)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)
    sizes = [4, 4, 4] if dynamic is False else [4, 6, 9, 5]
    for b in sizes:
        x = _input(kind, b, dtype)
        out_e, gx_e = _step(ref, x)
        out_c, gx_c = _step(compiled, x)
        torch.testing.assert_close(out_c, out_e, **tol)
        torch.testing.assert_close(gx_c, gx_e, **tol)
        for (n, pe), pc in zip(ref.named_parameters(), mine.parameters()):
            torch.testing.assert_close(pc.grad, pe.grad, **tol, msg=lambda m, n=n: f"{n}.grad: {m}")
        for (n, be), bc in zip(ref.named_buffers(), mine.buffers()):
            torch.testing.assert_close(bc, be, **tol, msg=lambda m, n=n: f"buffer {n}: {m}")
        ref.zero_grad(set_to_none=True)
        mine.zero_grad(set_to_none=True)
    ref.eval()
    mine.eval()
    x = _input(kind, 3, dtype)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), ref(x), **tol)
    assert ember.stats()["fallbacks_to_eager"] == 0
