"""Generated kernel source is the same in every process: kernels are cached on disk under the hash of their source
(Triton's and ember's caches, the C++ builds), so a warm start compiles nothing only if a fresh process writes the
same text. Python's string hashing differs per process (PYTHONHASHSEED): a kernel whose parameters came in a
set's order (its stored buffers did, before) got another source, another cache entry and a recompile on every
start. Each case compiles a training step of a zoo model in two processes with different hash seeds and fresh
cache folders and compares the kernel files they wrote."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys, torch, ember
sys.path.insert(0, {root!r})
from tests.models import ZOO_BY_NAME
spec = ZOO_BY_NAME[{model!r}]
model, make_batch = spec.factory(0)
batch = make_batch(1)
step = ember.compile(lambda *a: spec.loss(model, a, batch.target), options={{"cpu_backend": {backend!r}}})
step(*batch.args).backward()
"""


def _kernel_files(tmp: Path, model: str, backend: str, seed: int) -> dict[str, str]:
    cache = tmp / f"cache{seed}"
    env = dict(os.environ, PYTHONHASHSEED=str(seed), EMBER_CACHE_DIR=str(cache), TRITON_INTERPRET="1",
               PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", SCRIPT.format(root=str(ROOT), model=model, backend=backend)],
                   env=env, check=True, timeout=600, capture_output=True)
    sub = "triton" if backend == "triton" else "cpp"
    return {p.name: p.read_text(errors="replace") for p in (cache / sub).rglob("*")
            if p.is_file() and p.suffix in (".py", ".cpp")}


@pytest.mark.parametrize("model,backend", [("encoder", "triton"), ("resnet", "cpp")])
def test_kernel_source_does_not_depend_on_hash_seed(tmp_path, model, backend):
    a = _kernel_files(tmp_path, model, backend, 1)
    b = _kernel_files(tmp_path, model, backend, 2)
    assert a, "no kernel files were written"
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    assert not only_a and not only_b, (f"{len(only_a)} kernel sources of hash seed 1 not written with seed 2, e.g.:\n"
                                       + (a[only_a[0]][:1500] if only_a else "") + "\n---\n"
                                       + (b[only_b[0]][:1500] if only_b else ""))
