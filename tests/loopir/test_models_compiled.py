"""The model zoo through the whole compiler (backend "ember": AOT autograd, prims, loop IR, fused kernels):
inference and training steps equal eager (values, gradients, BatchNorm buffers, parameters after SGD)."""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

if str(Path(__file__).resolve().parents[2]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ember  # noqa: E402
from tests.capture.harness import assert_grads_same, assert_module_state_same, assert_same  # noqa: E402
from tests.models import ZOO  # noqa: E402

from .backends import CPU_BACKENDS  # noqa: E402

SPECS = pytest.mark.parametrize("spec", ZOO, ids=[s.name for s in ZOO])


@pytest.fixture(autouse=True)
def _fresh():
    ember.reset()
    yield
    ember.reset()


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
@SPECS
def test_inference(spec, cpu_backend):
    model, make_batch = spec.factory(0)
    model.eval()
    eager = copy.deepcopy(model)
    compiled = ember.compile(model, options={"cpu_backend": cpu_backend}, fullgraph=True)
    for seed in (1, 2):
        batch = make_batch(seed)
        with torch.no_grad():
            assert_same(compiled(*batch.args), eager(*batch.args))
    assert_module_state_same(model, eager)


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
@SPECS
def test_training_steps(spec, cpu_backend):
    model, make_batch = spec.factory(0)
    model.train()
    eager = copy.deepcopy(model)

    def step(model, args, target):
        return spec.loss(model, args, target)
    compiled = ember.compile(lambda a, t: step(model, a, t), options={"cpu_backend": cpu_backend}, fullgraph=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    names = [n for n, _ in model.named_parameters()]
    for seed in (1, 2, 3):
        batch = make_batch(seed)
        loss = compiled(batch.args, batch.target)
        expected = step(eager, batch.args, batch.target)
        torch.testing.assert_close(loss, expected)
        loss.backward()
        expected.backward()
        assert_grads_same(model.parameters(), eager.parameters(), names)
        opt.step()
        eager_opt.step()
        opt.zero_grad()
        eager_opt.zero_grad()
        assert_module_state_same(model, eager)
