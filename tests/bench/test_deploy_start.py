"""benchmarks/deploy_start.py: the time-to-first-output table on the CPU or a CUDA GPU. What a CPU-only machine
can check of the CUDA path: the arguments (defaults per device, engines), the refusal without a CUDA device, the
device reaching ``ember.aot_compile`` and the children, and the cache folders (cold: new per process; warm: one
per model and engine, shared by its runs); and one package measurement end to end on the CPU."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ds():
    spec = importlib.util.spec_from_file_location("deploy_start", ROOT / "benchmarks" / "deploy_start.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("argv,device,models,engines", [
    ([], "cpu", ["nanogpt", "resnet"], list(("package", "ember", "ember-warm", "torch", "torch-warm", "aoti"))),
    (["--device", "cuda"], "cuda", ["gpt2", "resnet50"], None),
    (["--device", "cuda", "--models", "nanogpt", "--engines", "package,ember-warm"], "cuda", ["nanogpt"],
     ["package", "ember-warm"]),
    (["--device", "cpu", "--models", "mlp,encoder"], "cpu", ["mlp", "encoder"], None),
])
def test_arguments(ds, argv, device, models, engines):
    a = ds.parse_args(argv)
    assert a.device == device and a.models == models
    if engines is not None:
        assert a.engines == engines


@pytest.mark.parametrize("argv", [["--device", "tpu"], ["--engines", "package,tensorrt"]])
def test_bad_arguments_are_refused(ds, argv, capsys):
    with pytest.raises(SystemExit):
        ds.parse_args(argv)
    err = capsys.readouterr().err
    assert "invalid choice" in err or "unknown engine" in err, err


def test_cuda_without_a_device_stops_with_a_clear_message(ds, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA device"):
        ds.check_device("cuda")
    ds.check_device("cpu")


def test_cold_caches_are_new_and_warm_ones_shared(ds, tmp_path):
    cold = [ds.cache_env("ember", "m", tmp_path) for _ in range(2)]
    warm = [ds.cache_env("ember-warm", "m", tmp_path) for _ in range(2)]
    other = ds.cache_env("torch-warm", "m", tmp_path)
    keys = {"EMBER_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"}
    assert all(set(e) == keys for e in cold + warm)
    assert cold[0]["EMBER_CACHE_DIR"] != cold[1]["EMBER_CACHE_DIR"]
    assert warm[0] == warm[1] and warm[0]["TRITON_CACHE_DIR"] != other["TRITON_CACHE_DIR"]


def test_the_device_reaches_the_package_build_and_the_child(ds, tmp_path, monkeypatch):
    """``build`` asks ``ember.aot_compile`` for the device's package; ``measure`` gives the device to the child
    (recorded here instead of run: the CUDA child needs a GPU)."""
    import subprocess

    import ember
    seen: dict = {}
    real = ember.aot_compile
    monkeypatch.setattr(ember, "aot_compile", lambda ep, path, device="cpu", options=None:
                        seen.setdefault("device", device) and real(ep, path, device="cpu"))
    built = ds.build("mlp", "quick", 4, "cpu", tmp_path, aoti=False)
    assert seen["device"] == "cpu" and Path(built["package"]).is_dir()

    class Done:
        returncode, stdout, stderr = 0, json.dumps({"first_output_s": 0.1, "import_torch_s": 1.0}), ""
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append((cmd, kw)) or Done())
    a = ds.parse_args(["--device", "cuda", "--runs", "2"])
    r = ds.row("ember-warm", "mlp", a, built, tmp_path)
    assert r["runs"] == 2 and r["device"] == "cuda" and len(calls) == 3      # one untimed run fills the cache
    args = [json.loads(cmd[-1]) for cmd, _ in calls]
    assert all(x["device"] == "cuda" and x["engine"] == "ember-warm" for x in args)
    assert len({kw["env"]["EMBER_CACHE_DIR"] for _, kw in calls}) == 1


def test_package_first_output_on_the_cpu_end_to_end(ds, tmp_path):
    a = ds.parse_args(["--models", "mlp", "--runs", "1", "--engines", "package"])
    built = ds.build("mlp", "quick", 4, "cpu", tmp_path, aoti=False)
    r = ds.row("package", "mlp", a, built, tmp_path)
    assert r["runs"] == 1 and "error" not in r, r
    assert r["first_output_s_median"] > 0 and not r["stats"], r      # a package compiles and traces nothing
