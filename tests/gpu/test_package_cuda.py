"""CUDA packages (issue 35 part 3): the zoo models (hand-written; GPT-2 and BERT where transformers is installed)
exported on CUDA with a dynamic batch, compiled with
``ember.aot_compile(..., device="cuda")`` (Triton kernels stored as cubins) and run by ``ember.load_package`` in a
fresh process that captures, traces and compiles nothing: equal eager at three batch sizes, including sizes and
views that need the kernels' unspecialized variants; a flipped byte in a cubin and a CPU-only load are refused."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ember
from ember.deploy import package_format as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.export.test_export import ZOO, _batch_dims, _with_batch, output_modules, zoo_model  # noqa: E402

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]

FRESH = """
import sys, torch, ember
cases, refs = torch.load(sys.argv[2])
m = ember.load_package(sys.argv[1])
with torch.no_grad():
    for a, ref in zip(cases, refs):
        leaves = torch.utils._pytree.tree_leaves
        torch.testing.assert_close(leaves(m(*a)), ref, atol=2e-3, rtol=2e-3)
        # a view at an odd offset: the kernels' unaligned variant
        odd = [torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)[1:].view(t.shape).copy_(t) for t in a]
        torch.testing.assert_close(leaves(m(*odd)), ref, atol=2e-3, rtol=2e-3)
s = ember.stats()
assert not any(s.values()), s
print('ok')
"""


def _build(entry, tmp_path):
    w, inp = zoo_model(entry, "cuda")
    ep = ember.export(w.model, inp.args, dynamic_shapes=_batch_dims(inp.args, ember.Dim("batch", max=256)))
    path = tmp_path / f"{entry.name}.ember-pkg"
    ember.aot_compile(ep, path, device="cuda")
    return w, inp, path


@pytest.mark.parametrize("entry", ZOO, ids=[e.name for e in ZOO])
def test_zoo_cuda_package_equals_eager_in_a_fresh_process(entry, tmp_path):
    w, inp, path = _build(entry, tmp_path)
    assert any(p.suffix == ".cubin" for p in (path / F.KERNELS).iterdir())
    assert json.loads((path / F.MANIFEST).read_text())["device"] == "cuda"
    cases = [_with_batch(inp.args, b) for b in (2, 5, 17)]
    with torch.no_grad():
        refs = [w.model(*a) for a in cases]
    torch.save((cases, [torch.utils._pytree.tree_leaves(r) for r in refs]), tmp_path / "io.pt")
    code = "".join(f"import {m}\n" for m in output_modules(refs[0])) + FRESH
    out = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / "io.pt")], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_cuda_package_refuses_a_flipped_cubin_byte_and_a_process_without_cuda(tmp_path):
    _, _, path = _build(ZOO[0], tmp_path)
    bad = tmp_path / "bad.ember-pkg"
    shutil.copytree(path, bad)
    cubin = next(p for p in sorted((bad / F.KERNELS).iterdir()) if p.suffix == ".cubin")
    data = bytearray(cubin.read_bytes())
    data[len(data) // 2] ^= 1
    cubin.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"\.cubin does not match its SHA-256"):
        ember.load_package(bad)
    code = "import ember, sys\ntry:\n    ember.load_package(sys.argv[1])\nexcept ValueError as e:\n    print(e)"
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=ROOT,
                         env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": ""})
    assert "built for CUDA and this process has no CUDA device" in out.stdout, out.stderr[-2000:]
