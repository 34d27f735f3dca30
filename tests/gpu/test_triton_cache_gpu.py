"""Triton's binary cache under ember's signed manager, on a GPU: files Triton writes are signed; a kernel
binary altered on disk is not loaded (a fresh process compiles it again and computes the right result)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]

_RUN = """
import torch, ember
def f(x):
    return torch.sin(x) * 2 + x.exp()
x = torch.randn(4096, device="cuda")
torch.testing.assert_close(ember.compile(f)(x), f(x))
import os; print(os.environ.get("TRITON_CACHE_MANAGER"))
"""


def _run(env):
    out = subprocess.run([sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, cwd=ROOT,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_altered_cubin_is_rebuilt_not_loaded(tmp_path):
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "ember"), TRITON_CACHE_DIR=str(tmp_path / "triton"),
               EMBER_COMPILE_WORKERS="0")
    env.pop("TRITON_CACHE_MANAGER", None)
    assert "triton_cache:SignedCacheManager" in _run(env)
    bins = [p for p in (tmp_path / "triton").rglob("*") if p.suffix in (".cubin", ".so")]
    assert bins, list((tmp_path / "triton").rglob("*"))
    assert all(Path(str(p) + ".sig").exists() for p in bins)
    for p in bins:
        data = bytearray(p.read_bytes())
        data[len(data) // 2] ^= 0xFF
        p.write_bytes(bytes(data))
    _run(env)            # loads nothing altered: compiles again and still computes f(x)
    for p in bins:
        assert p.exists() and Path(str(p) + ".sig").exists()
