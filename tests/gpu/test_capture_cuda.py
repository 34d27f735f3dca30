"""Capture on CUDA tensors: compiled == eager, device guards, autocast and mixed-device programs."""
import copy
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import ember  # noqa: E402

pytestmark = pytest.mark.gpu


class Counter:
    def __init__(self, cuda_only: bool = True):
        self.n = 0
        self.cuda_only = cuda_only

    def __call__(self, gm, example_inputs):
        self.n += 1
        if self.cuda_only:
            assert all(t.is_cuda for t in example_inputs if isinstance(t, torch.Tensor) and t.dim() > 0)
        return gm.forward


def _mlp():
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 8)).cuda()


def test_module_inference_and_training():
    torch.manual_seed(0)
    m = _mlp()
    ref = copy.deepcopy(m)
    cnt = Counter()
    cm = ember.compile(m, backend=cnt, fullgraph=True)
    x = torch.randn(16, 32, device="cuda")
    y = torch.randint(0, 8, (16,), device="cuda")
    torch.testing.assert_close(cm(x), ref(x))
    F.cross_entropy(cm(x), y).backward()
    F.cross_entropy(ref(x), y).backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    assert cnt.n == 1


def test_device_change_recompiles():
    cnt = Counter(cuda_only=False)

    def f(x):
        return (x * 2).sin().to("cpu") + 1

    c = ember.compile(f, backend=cnt, fullgraph=True)
    xc = torch.randn(8, device="cuda")
    out = c(xc)
    assert out.device.type == "cpu"
    torch.testing.assert_close(out, f(xc))
    torch.testing.assert_close(c(xc.cpu()), f(xc.cpu()))
    assert cnt.n == 2


def test_autocast_bf16():
    torch.manual_seed(0)
    m = _mlp()

    def f(x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = m(x)
            assert h.dtype == torch.bfloat16
        return h.float().softmax(-1)

    c = ember.compile(f, backend="eager", fullgraph=True)
    x = torch.randn(4, 32, device="cuda")
    torch.testing.assert_close(c(x), f(x))


def test_factories_follow_device():
    def f(x):
        z = torch.zeros(x.shape, device=x.device)
        r = torch.arange(x.shape[-1], device=x.device)
        return x + z + r, x.new_ones(3)

    c = ember.compile(f, backend="eager", fullgraph=True)
    x = torch.randn(2, 5, device="cuda")
    a, b = c(x)
    ea, eb = f(x)
    assert a.device == ea.device and b.device == eb.device
    torch.testing.assert_close(a, ea)
