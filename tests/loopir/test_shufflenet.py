"""A ShuffleNetV2 (tests/shufflenet.py: channel split, depthwise convolutions, channel shuffle, in-place ReLU,
BatchNorm in training) through the whole compiler, equal to eager.

Training is compared in float64: a float32 ShuffleNet with batch statistics over few points per channel (2x2
maps of a batch of 2 in its last stage) is chaotic, a rounding difference of 1e-7 flipping a ReLU whose input
is 5e-5 and moving conv1's gradient by 0.5; eager float32 itself is that far from float64 for 3 of 12 seeds.
In float64 ember's training step equals eager's to 1e-11, which shows that the compiled program is the same
function. Float32 training is compared where the statistics are well conditioned."""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

if str(Path(__file__).resolve().parents[2]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ember  # noqa: E402
from tests.shufflenet import ShuffleNetV2  # noqa: E402

REPEATS = (2, 2, 2)      # the x0_5 widths; fewer blocks than (4, 8, 4) keep the compile short


@pytest.fixture(autouse=True)
def _fresh():
    ember.reset()
    yield
    ember.reset()


def _step(model, x, y):
    model.zero_grad(set_to_none=True)
    out = model(x)
    F.cross_entropy(out, y).backward()
    return out.detach(), {n: p.grad for n, p in model.named_parameters()}


def _assert_state_same(a, b, **tol):
    for (n, t), (_, u) in zip(a.state_dict().items(), b.state_dict().items()):
        torch.testing.assert_close(t, u, msg=lambda m: f"{n}: {m}", **tol)


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_training_step_float64(layout):
    torch.manual_seed(0)
    model = ShuffleNetV2(REPEATS).double()
    eager = copy.deepcopy(model)
    compiled = ember.compile(model)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 64, 64, generator=g, dtype=torch.float64)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (2,), generator=g)
    out, grads = _step(compiled, x, y)
    ref, ref_grads = _step(eager, x, y)
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-10)
    for n in ref_grads:
        torch.testing.assert_close(grads[n], ref_grads[n], rtol=1e-8, atol=1e-9, msg=lambda m: f"{n}: {m}")
    _assert_state_same(model, eager, rtol=1e-9, atol=1e-10)      # BatchNorm running statistics


def test_training_step_float32_near_eager_error():
    """A batch of 8 (32 points per channel in the last stage): ember's gradients are as far from float64 as
    eager float32's, within a small multiple (rounding orders differ; a wrong kernel would be off by O(1))."""
    torch.manual_seed(0)
    model = ShuffleNetV2(REPEATS)
    eager, ref = copy.deepcopy(model), copy.deepcopy(model).double()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 3, 64, 64, generator=g), torch.randint(0, 10, (8,), generator=g)
    _, grads = _step(ember.compile(model), x, y)
    _, eager_grads = _step(eager, x, y)
    _, ref_grads = _step(ref, x.double(), y)
    scale = max(v.norm() for v in ref_grads.values())
    for n, r in ref_grads.items():
        if r.norm() < 1e-6 * scale:         # a bias before a BatchNorm: zero up to rounding
            continue
        err = ((grads[n].double() - r).norm() / r.norm()).item()
        eager_err = ((eager_grads[n].double() - r).norm() / r.norm()).item()
        assert err <= max(4 * eager_err, 2e-2), f"{n}: ember {err:.2e}, eager float32 {eager_err:.2e}"


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_eval_inference_float32(layout):
    torch.manual_seed(0)
    model = ShuffleNetV2(REPEATS)
    with torch.no_grad():                # running statistics away from their initial 0 and 1
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    model.eval()
    compiled = ember.compile(model)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
