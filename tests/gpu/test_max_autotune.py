"""max-autotune on CUDA: matmul templates with fused epilogues and autotuned kernel configurations.

The CPU table (tests/codegen/test_matmul_templates.py) with every choice forced (the cuBLAS fallback, the
first and the last template configuration) in float32 and bfloat16, then real autotuning (timed on this
GPU) of a transformer MLP block and of normalization kernels, compared with eager.

Run on the device machine: ``python -m pytest -q tests/gpu/test_max_autotune.py``.
"""
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ember.codegen import autotune
from ember.options import CompileOptions
from tests.codegen import test_triton
from tests.codegen.test_matmul_templates import CASES, _force
from tests.codegen.test_triton import check_case

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")]

TUNED = CompileOptions(max_autotune=True)


@pytest.fixture
def cases(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "_CHOICES", {})
    for name, case in CASES.items():
        monkeypatch.setitem(test_triton.CASES, name, case)
    return tmp_path


@pytest.mark.parametrize("which", ["aten", "padded", "first", "last"])
@pytest.mark.parametrize("name", list(CASES))
def test_float32(name, which, cases, monkeypatch):
    seen = _force(monkeypatch, which)
    check_case(name, device="cuda", opts=TUNED)
    assert seen


@pytest.mark.parametrize("which", ["padded", "first", "last"])
@pytest.mark.parametrize("name", list(CASES))
def test_bfloat16(name, which, cases, monkeypatch):
    seen = _force(monkeypatch, which)
    check_case(name, device="cuda", dtype=torch.bfloat16, opts=TUNED, tol=4e-2, grad_tol=1e-1)
    assert seen


def _mlp(x, w1, b1, w2, b2):
    return x + F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2)


def test_autotuned_mlp_block_bf16(cases):
    """Real timing: a GPT-2 MLP block (512 tokens, 768 -> 3072 -> 768) in bfloat16 is no further from the
    float64 result than eager, and every matmul's choice is recorded with a time for each candidate."""
    import ember
    torch.manual_seed(0)
    xs = [torch.randn(512, 768), torch.randn(3072, 768) * 0.02, torch.randn(3072) * 0.02,
          torch.randn(768, 3072) * 0.02, torch.randn(768) * 0.02]
    xs = [t.cuda().bfloat16() for t in xs]
    out = ember.compile(_mlp, mode="max-autotune-no-cudagraphs")(*xs)
    eager, exact = _mlp(*xs), _mlp(*[t.double() for t in xs])
    err = (out.double() - exact).abs().max().item()
    err_eager = (eager.double() - exact).abs().max().item()
    assert err <= 1.5 * err_eager + 1e-3, (err, err_eager)
    records = [json.loads(p.read_text()) for p in (cases / "autotune").glob("*.json")]
    mm = [r for r in records if r["labels"][0].startswith("aten")]
    assert len(mm) == 2 and all(None not in r["times_us"] for r in mm), mm


@pytest.mark.parametrize("name", ["softmax", "layer_norm", "looped_inner", "looped_cross_entropy"])
def test_autotuned_kernels(name, cases):
    check_case(name, device="cuda", opts=TUNED)
    assert list((cases / "autotune").glob("*.json"))


def test_reduce_overhead_with_autotuning(cases):
    """mode max-autotune: tuning happens in the warm-up calls, then the CUDA graph replays the choices."""
    import ember
    torch.manual_seed(0)
    xs = [t.cuda() for t in (torch.randn(64, 128), torch.randn(256, 128), torch.randn(256),
                             torch.randn(128, 256), torch.randn(128))]
    f = ember.compile(_mlp, mode="max-autotune")
    for _ in range(4):
        out = f(*xs)
        torch.testing.assert_close(out, _mlp(*xs), rtol=1e-4, atol=1e-4)
