"""The whole-graph cache on a GPU (``ember.graphcache.kernels``): graphs of Triton kernels, in fresh processes.

A cold process compiles an MLP's training step and a softmax (default mode and max-autotune) on CUDA; a warm
process with the same ``EMBER_CACHE_DIR`` and ``TRITON_CACHE_DIR`` hits every graph (no AOT autograd, lowering
or code generation), equals eager, starts no compile workers and keeps Triton's signed cache manager. With
max-autotune the warm process times nothing even with the autotune store gone (the choices are in the entries).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]

_RUN = """
import copy, json, os, sys, torch, ember
opts = {"max_autotune": sys.argv[1] == "autotune"}
torch.manual_seed(os.getpid())
m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32)).cuda()
ref = copy.deepcopy(m)
run = ember.compile(m, options=opts)
for _ in range(2):
    x = torch.randn(48, 64, device="cuda")
    out, want = run(x), ref(x)
    out.pow(2).sum().backward(); want.pow(2).sum().backward()
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)
    m.zero_grad(); ref.zero_grad()
f = lambda x: torch.softmax(x * 2, -1)
x = torch.randn(33, 257, device="cuda")
torch.testing.assert_close(ember.compile(f, options=opts)(x), f(x))
from ember.codegen import triton_pool
print(json.dumps({"stats": ember.stats(), "pool": triton_pool._POOL is not None,
                  "manager": os.environ.get("TRITON_CACHE_MANAGER")}))
"""


def _run(tmp_path: Path, mode: str) -> dict:
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "ember"), TRITON_CACHE_DIR=str(tmp_path / "triton"))
    env.pop("EMBER_GRAPH_CACHE", None)
    env.pop("TRITON_CACHE_MANAGER", None)
    out = subprocess.run([sys.executable, "-c", _RUN, mode], env=env, capture_output=True, text=True, cwd=ROOT,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["default", "autotune"])
def test_warm_gpu_process_hits_triton_graphs(mode, tmp_path):
    cold = _run(tmp_path, mode)["stats"]
    assert cold["graph_cache_misses"] >= 2 and cold["graph_cache_hits"] == 0, cold
    if mode == "autotune":
        shutil.rmtree(tmp_path / "ember" / "autotune")
    warm = _run(tmp_path, mode)
    s = warm["stats"]
    assert s["graph_cache_hits"] == cold["graph_cache_misses"] and s["graph_cache_misses"] == 0, s
    assert s["traces"] == 0, s
    assert not warm["pool"] and "SignedCacheManager" in warm["manager"], warm
    if mode == "autotune":
        assert not list((tmp_path / "ember" / "autotune").glob("*.json"))     # nothing timed
