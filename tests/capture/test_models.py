"""The model zoo under capture: one graph each, results, gradients and BatchNorm state equal to eager's.

Issue 2 acceptance: with ``fullgraph=True`` and exactly one graph, an MLP, a ResNet-style CNN with BatchNorm,
a transformer encoder layer with hand-written attention and a nanoGPT-style model match eager in inference and
in a forward + loss + backward step.
"""
from __future__ import annotations

import copy
import io
import sys
from pathlib import Path

import pytest
import torch

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repo root, for `tests.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ember  # noqa: E402
from tests.capture.harness import (  # noqa: E402
    CountingBackend,
    assert_grads_same,
    assert_module_state_same,
    assert_same,
    cotangent_loss,
)
from tests.models import ZOO  # noqa: E402

SPECS = pytest.mark.parametrize("spec", ZOO, ids=[s.name for s in ZOO])


def named_params(model):
    names, params = zip(*model.named_parameters())
    return list(names), list(params)


def make_step(spec, model):
    """The compiled unit of a training step: loss = loss_fn(model(x), y); backward runs outside."""
    loss_fn = spec.loss

    def train_step(args, target):
        return loss_fn(model, args, target)

    return train_step


@pytest.mark.parametrize("grad_mode", ["no_grad", "grad"])
@SPECS
def test_inference(spec, grad_mode, counter):
    model, make_batch = spec.factory(0)
    model.eval()
    eager = copy.deepcopy(model)
    compiled = ember.compile(model, backend=counter, fullgraph=True)
    for seed in (1, 2):
        batch = make_batch(seed)
        with torch.set_grad_enabled(grad_mode == "grad"):
            expected = eager(*batch.args)
            actual = compiled(*batch.args)
        assert_same(actual, expected)
        if grad_mode == "grad":
            cotangent_loss(actual).backward()
            cotangent_loss(expected).backward()
            names, params = named_params(model)
            assert_grads_same(params, named_params(eager)[1], names)
    assert counter.count == 1, counter.describe()
    assert_module_state_same(model, eager)


@SPECS
def test_training_step(spec, counter):
    _training_steps(spec, counter)
    assert counter.count == 1, counter.describe()


@SPECS
def test_training_step_aot_eager(spec, fresh_ember):
    """The same steps through ember's AOT autograd (joint graph, functionalization, min-cut partition)."""
    _training_steps(spec, "aot_eager")


def _training_steps(spec, backend):
    model, make_batch = spec.factory(0)
    model.train()
    eager = copy.deepcopy(model)
    step = ember.compile(make_step(spec, model), backend=backend, fullgraph=True)
    eager_step = make_step(spec, eager)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    names = [n for n, _ in model.named_parameters()]
    for seed in (1, 2, 3):
        batch = make_batch(seed)
        loss = step(batch.args, batch.target)
        expected = eager_step(batch.args, batch.target)
        assert loss.dim() == 0 and loss.requires_grad
        torch.testing.assert_close(loss, expected)
        loss.backward()
        expected.backward()
        assert_grads_same(model.parameters(), eager.parameters(), names)
        if spec.has_batchnorm:
            bns = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.BatchNorm2d)]
            assert bns
            eager_bns = dict(eager.named_modules())
            for n, m in bns:
                torch.testing.assert_close(m.running_mean, eager_bns[n].running_mean)
                torch.testing.assert_close(m.running_var, eager_bns[n].running_var)
                assert int(m.num_batches_tracked) == int(eager_bns[n].num_batches_tracked) == seed
        opt.step()
        eager_opt.step()
        opt.zero_grad()
        eager_opt.zero_grad()
        assert_module_state_same(model, eager)


@SPECS
def test_optimized_module(spec, counter):
    model, make_batch = spec.factory(0)
    eager = copy.deepcopy(model)
    compiled = ember.compile(model, backend=counter, fullgraph=True)

    assert isinstance(compiled, ember.OptimizedModule)
    assert isinstance(compiled, torch.nn.Module)
    assert compiled._orig_mod is model
    assert list(compiled.state_dict()) == list(model.state_dict())
    assert [id(p) for p in compiled.parameters()] == [id(p) for p in model.parameters()]
    first_child = next(iter(model._modules))
    assert getattr(compiled, first_child) is getattr(model, first_child)

    compiled.eval()
    assert not model.training and not any(m.training for m in model.modules())
    compiled.train()
    assert model.training and all(m.training for m in model.modules())

    # a training step through the compiled module (forward compiled, loss and backward outside)
    batch = make_batch(1)
    loss = spec.loss(compiled, batch.args, batch.target)
    expected = spec.loss(eager.train(), batch.args, batch.target)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    expected.backward()
    assert_grads_same(model.parameters(), eager.parameters(), [n for n, _ in model.named_parameters()])
    assert_module_state_same(model, eager)
    assert counter.count == 1, counter.describe()

    # then inference after eval(): still equal (a recompile for the training flag is allowed)
    compiled.eval()
    eager.eval()
    batch = make_batch(2)
    with torch.no_grad():
        assert_same(compiled(*batch.args), eager(*batch.args))

    # the state dict loads into a plain model
    buf = io.BytesIO()
    torch.save(compiled.state_dict(), buf)
    buf.seek(0)
    plain, _ = spec.factory(123)
    plain.load_state_dict(torch.load(buf))
    plain.eval()
    with torch.no_grad():
        assert_same(plain(*batch.args), eager(*batch.args))


def test_zoo_models_are_distinct_and_small():
    """Guards the zoo itself: every model runs eagerly and is small, and the factories are deterministic."""
    for spec in ZOO:
        m1, mb = spec.factory(0)
        m2, _ = spec.factory(0)
        for (n, p1), p2 in zip(m1.named_parameters(), m2.parameters()):
            assert torch.equal(p1, p2), f"{spec.name}.{n} differs between two factory(0) calls"
        assert sum(p.numel() for p in m1.parameters()) < 200_000
        b1, b2 = mb(1), mb(2)
        assert not torch.equal(b1.args[0], b2.args[0])
        loss = spec.loss(m1, b1.args, b1.target)
        assert loss.dim() == 0 and torch.isfinite(loss)


def test_counting_backend_counts():
    """The counting backend is what the graph-count assertions rest on: it must see every graph."""
    cb = CountingBackend()
    gm = torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
    fn = cb(gm, [torch.randn(1, 2)])
    assert cb.count == 1 and fn(torch.randn(3, 2)).shape == (3, 2)
