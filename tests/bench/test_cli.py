"""The command line: argument validation, and one full run writing CSV, JSON and the chart (a PNG with
matplotlib, text without)."""
import csv
import importlib.util
import json
import struct

import pytest
import torch

from ember.bench import cli
from ember.bench.engines import parse_engine, parse_engines


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("argv, message", [
    (["--models", "nope"], "unknown model 'nope'"),
    (["--engines", "eager,jax"], "unknown engine 'jax'"),
    (["--engines", "ember:nope"], "unknown ember backend 'nope'"),
    (["--engines", "inductor@fast"], "unknown mode 'fast'"),
    (["--mode", "turbo"], "unknown mode 'turbo'"),
    (["--dtypes", "fp16"], "unknown dtype 'fp16'"),
    (["--tasks", "eval"], "unknown task 'eval'"),
    (["--suite", "medium"], "invalid choice: 'medium'"),
    (["--warmup", "0"], "at least 1"),
])
def test_bad_arguments_exit_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv + ["--out", "/nonexistent/never-written"])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cuda_without_a_gpu_is_refused(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--device", "cuda"])
    assert "no CUDA device" in capsys.readouterr().err


def test_engine_grammar():
    assert parse_engine("inductor").name == "inductor"
    assert parse_engine("torch.compile").name == "inductor"
    assert parse_engine("torch:eager").name == "torch:eager"
    assert parse_engine("ember:inductor@max-autotune").name == "ember:inductor@max-autotune"
    assert parse_engine("ember@default").name == "ember"
    names = [e.name for e in parse_engines(["ember", "inductor"], ["reduce-overhead"])]
    assert names == ["eager", "ember", "inductor", "ember@reduce-overhead", "inductor@reduce-overhead"]


def test_list(capsys):
    assert cli.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "nanogpt" in out and "gpt2" in out and "FRONTEND[:BACKEND][@MODE]" in out


def test_run_writes_table_csv_json_png(tmp_path, capsys):
    out = tmp_path / "res"
    assert cli.main(["--models", "mlp", "--engines", "eager,ember", "--tasks", "infer", "--threads", "1",
                     "--warmup", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "mlp" in printed.out and "speedup" in printed.out and "ember" in printed.out
    assert "1/1" in printed.err  # the progress bar
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [r["engine"] for r in rows] == ["eager", "ember"]
    assert rows[1]["status"] == "ok" and rows[1]["correct"] == "True"
    doc = json.loads((out / "results.json").read_text())
    assert doc["environment"]["torch"] == torch.__version__ and len(doc["results"]) == 2
    assert len((out / "results.jsonl").read_text().splitlines()) == 2
    if importlib.util.find_spec("matplotlib"):
        w, h = png_size(out / "speedup.png")
        assert 400 <= w <= 4000 and 100 <= h <= 4000 and "speedup.png" in printed.out
    else:
        assert "mlp infer fp32" in (out / "speedup.txt").read_text() and "speedup.txt" in printed.out

    merged = tmp_path / "merged"
    assert cli.main(["--merge", str(out), str(out), "--out", str(merged)]) == 0
    assert len(list(csv.DictReader((merged / "results.csv").open()))) == 4
