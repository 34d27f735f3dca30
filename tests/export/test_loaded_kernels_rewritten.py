"""A package's (``load_package``) or a whole-graph cache entry's (``ember.compile``'s warm start) C++ kernels are
loaded from a private copy of their verified bytes, never from the package's or the kernel store's file: that
file may be truncated or overwritten in place while the process runs (a new package written over the old one, a
tool, another process), and a process that mapped it would lose the pages it runs from (SIGBUS, or garbage
code, at the next kernel call or at exit). The copy is a memory file on Linux; where there are none (``os``
without ``memfd_create``, simulated here) it was the package's or the store's own file. Each case runs in a child
process (the failure kills the process): load, call, rewrite every loaded ``.so`` on disk in place, call again
on fresh inputs (equal to eager), exit cleanly."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ember

ROOT = Path(__file__).resolve().parents[2]

_MODEL = """
import torch
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(12, 24), torch.nn.Linear(24, 6)
    def forward(self, x):
        return self.b(torch.tanh(self.a(x)) * 2.5 + x.sum(-1, keepdim=True).sin()).softmax(-1)
def make():
    torch.manual_seed(0)
    return Net().eval()
"""

_CHILD = _MODEL + """
import os, sys
from pathlib import Path
import ember
source, damage, memfd, where = sys.argv[1:5]
if memfd == "none":             # a platform without memory files
    del os.memfd_create
model = make()
if source == "package":
    run = ember.load_package(where)
    files = sorted(Path(where).rglob("*.so"))
else:                           # a warm ember.compile: the graph and its kernels come from the cache
    run = ember.compile(model)
    files = sorted((Path(os.environ["EMBER_CACHE_DIR"]) / "cpp").glob("*.so"))
with torch.no_grad():
    x = torch.randn(4, 12)
    torch.testing.assert_close(run(x), model(x))
    if source == "cache":
        s = ember.stats()
        assert s["graph_cache_hits"] == 1 and s["kernel_compiles"] == 0, s
    assert files
    for so in files:            # in place: the same file, as ``truncate`` or ``cp`` over it would
        data = so.read_bytes()
        with open(so, "r+b") as fh:
            fh.truncate(0)
            fh.write(data[:len(data) // 3] if damage == "truncated" else os.urandom(len(data)))
    for _ in range(2):
        x = torch.randn(4, 12)
        torch.testing.assert_close(run(x), model(x))
print("ok")
"""

_FILL = _MODEL + """
import ember
with torch.no_grad():
    x = torch.randn(4, 12)
    torch.testing.assert_close(ember.compile(make())(x), make()(x))
print("ok")
"""


def _run(code: str, cache: Path, *args: str) -> None:
    env = {**os.environ, "EMBER_CACHE_DIR": str(cache), "EMBER_COMPILE_WORKERS": "0", "PYTHONPATH": str(ROOT)}
    env.pop("EMBER_GRAPH_CACHE", None)
    res = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert res.returncode == 0 and res.stdout.strip() == "ok", (res.returncode, res.stderr[-2000:])


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    d = tmp_path_factory.mktemp("pkg")
    ns: dict = {}
    exec(_MODEL, ns)        # noqa: S102 - the test's own model, as the children build it
    ep = ember.export(ns["make"](), (torch.randn(4, 12),))
    return ember.aot_compile(ep, d / "m.ember-pkg")


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    _run(_FILL, cache)
    return cache


@pytest.mark.parametrize("memfd", ["memfd", "none"])
@pytest.mark.parametrize("damage", ["truncated", "garbage"])
@pytest.mark.parametrize("source", ["package", "cache"])
def test_kernels_keep_running_when_their_file_is_rewritten_in_place(source, damage, memfd, package, warm_cache,
                                                                    tmp_path):
    # each case damages what it loads: it works on a copy of the package and of the warm cache
    where = tmp_path / "m.ember-pkg"
    shutil.copytree(package, where)
    shutil.copytree(warm_cache, tmp_path / "cache")
    _run(_CHILD, tmp_path / "cache", source, damage, memfd, str(where))
