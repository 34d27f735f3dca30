"""The zoo: every quick model that can be built here builds, runs forward and backward; a package that cannot
be imported skips its models with one line."""
import sys

import pytest
import torch

from ember.bench import workload, zoo

CPU = torch.device("cpu")


def _runnable():
    entries, _ = zoo.select_models("quick", ["all"])
    return entries


@pytest.mark.parametrize("entry", _runnable(), ids=lambda e: e.name)
def test_quick_model_forward_backward(entry):
    w = entry.build("quick", CPU)
    w.model.train()
    inp = w.make_inputs(1, CPU)
    assert all(not (torch.is_tensor(a) and a.is_floating_point() and not a.abs().sum()) for a in inp.args)
    loss = w.loss(w.model(*inp.args, **inp.kwargs), inp.target)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    grads = [p.grad for p in w.model.parameters() if p.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)


def test_inputs_are_fresh_per_seed():
    w = zoo.HANDWRITTEN[0].build("quick", CPU)
    a, b = w.make_inputs(1, CPU), w.make_inputs(2, CPU)
    assert not torch.equal(a.args[0], b.args[0])
    assert torch.equal(a.args[0], w.make_inputs(1, CPU).args[0])


def test_every_entry_has_both_suites():
    for e in zoo.all_entries():
        assert set(e.configs) == set(zoo.SUITES), e.name


def test_names_families_and_defaults():
    assert zoo.expand_names(None, "quick") == ["mlp", "resnet", "encoder", "nanogpt"]
    assert len(zoo.expand_names(None, "full")) == len(zoo.all_entries())
    assert zoo.expand_names(["transformers"], "quick") == ["gpt2", "bert", "llama", "t5", "vit"]
    assert zoo.expand_names(["mlp", "mlp", "nanogpt"], "quick") == ["mlp", "nanogpt"]
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        zoo.expand_names(["nope"], "quick")


def test_missing_package_skips_its_models_with_one_line(monkeypatch):
    for name in ("transformers", "timm", "torchvision"):
        monkeypatch.setitem(sys.modules, name, None)  # makes `import name` raise ImportError
    entries, skipped = zoo.select_models("quick", ["mlp", "gpt2", "bert", "resnet50"])
    assert [e.name for e in entries] == ["mlp"]
    assert len(skipped) == 2
    assert "gpt2, bert" in skipped[0] and "pip install transformers" in skipped[0]
    assert "resnet50" in skipped[1] and "timm / torchvision" in skipped[1]


def test_broken_package_is_a_skip_not_a_crash(monkeypatch):
    real = workload.importlib.import_module

    def broken(name, *a, **k):
        if name == "transformers":
            raise RuntimeError("operator torchvision::nms does not exist\nmore")
        return real(name, *a, **k)
    monkeypatch.setattr(workload.importlib, "import_module", broken)
    entries, skipped = zoo.select_models("quick", ["gpt2"])
    assert entries == [] and "RuntimeError: operator torchvision::nms does not exist" in skipped[0]
