"""Triton's launcher modules (C extensions Triton builds and loads by the path its cache manager gives) are loaded
from a private copy of their verified bytes under ember's signed manager (``codegen.triton_cache``), never from
the cache entry: an entry truncated or overwritten in place while the process runs must not take away the pages
the process runs from. Triton's own ``compile_module_from_src`` builds a small extension here (no GPU needed):
freshly built (``put``) and found in the cache (``get_file``), then the entry is rewritten in place and the
module called again, in a child process (the failure kills it: SIGBUS or garbage code)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]

_CHILD = r'''
import os, sys
from pathlib import Path
os.environ["TRITON_CACHE_MANAGER"] = "ember.codegen.triton_cache:SignedCacheManager"
from triton.runtime.build import compile_module_from_src
SRC = """
#include <Python.h>
static PyObject* add(PyObject* self, PyObject* args) {
    long a, b;
    if (!PyArg_ParseTuple(args, "ll", &a, &b)) return NULL;
    return PyLong_FromLong(a + b);
}
static PyMethodDef M[] = {{"add", add, METH_VARARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "ember_launcher_probe", NULL, -1, M};
PyMODINIT_FUNC PyInit_ember_launcher_probe(void) { return PyModule_Create(&D); }
"""
m = compile_module_from_src(SRC, "ember_launcher_probe")
assert m.add(2, 3) == 5
damage = sys.argv[1]
if damage != "none":
    (so,) = [p for p in Path(os.environ["TRITON_CACHE_DIR"]).rglob("ember_launcher_probe*.so")]
    data = so.read_bytes()
    with open(so, "r+b") as fh:         # in place, as ``truncate`` or ``cp`` over it would
        fh.truncate(0)
        fh.write(data[:len(data) // 3] if damage == "truncated" else os.urandom(len(data)))
    assert not Path(m.__file__).is_relative_to(os.environ["TRITON_CACHE_DIR"]), m.__file__
for i in range(3):
    assert m.add(i, 40) == 40 + i
print("ok")
'''


def _run(cache: Path, damage: str) -> None:
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache), "EMBER_CACHE_DIR": str(cache.parent / "ember"),
           "PYTHONPATH": str(ROOT)}
    env.pop("TRITON_CACHE_MANAGER", None)
    res = subprocess.run([sys.executable, "-c", _CHILD, damage], env=env, capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert res.returncode == 0 and res.stdout.strip() == "ok", (res.returncode, res.stderr[-2000:])


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    d = tmp_path_factory.mktemp("filled")
    (d / "triton").mkdir(mode=0o700)
    _run(d / "triton", "none")
    return d / "triton"


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
@pytest.mark.parametrize("how", ["built", "hit"])
def test_launcher_module_survives_its_entry_rewritten_in_place(how, damage, filled, tmp_path):
    cache = tmp_path / "triton"
    if how == "hit":
        shutil.copytree(filled, cache)
    else:
        cache.mkdir(mode=0o700)
    _run(cache, damage)
