"""The Triton compile worker pool's parts that run without a GPU: the message protocol, the worker process
answering errors and carrying on, and the pool being off where it cannot run (CUDA runs live in tests/gpu)."""
import io
import subprocess
import sys
from pathlib import Path

import torch

from ember.codegen import triton_pool
from ember.codegen.triton_worker import read_message, write_message

ROOT = Path(__file__).resolve().parents[2]


def test_messages_round_trip():
    buf = io.BytesIO()
    msgs = [{"src": "x = 1\n", "dtypes": ["bfloat16"], "grid": (3, 1, 1)}, ("ok", None), ("error", "E: é")]
    for m in msgs:
        write_message(buf, m)
    buf.seek(0)
    assert [read_message(buf) for _ in msgs] == msgs
    assert read_message(buf) is None        # end of stream


def test_a_worker_whose_parent_is_gone_exits_quietly(tmp_path):
    """A process that exits while its compile workers still start (a short script) closes their pipes: the
    workers end with no traceback on the user's terminal."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "ember.codegen.triton_worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()         # the parent is gone: the worker's "ready" meets a closed pipe
    proc.stdin.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_worker_count(monkeypatch):
    monkeypatch.setenv("EMBER_COMPILE_WORKERS", "3")
    assert triton_pool.worker_count() == 3
    monkeypatch.setenv("EMBER_COMPILE_WORKERS", "-2")
    assert triton_pool.worker_count() == 0
    monkeypatch.setenv("EMBER_COMPILE_WORKERS", "many")
    assert 1 <= triton_pool.worker_count() <= 16
    monkeypatch.delenv("EMBER_COMPILE_WORKERS")
    assert 1 <= triton_pool.worker_count() <= 16


def test_no_pool_without_workers_or_cuda(monkeypatch):
    monkeypatch.setattr(triton_pool, "_POOL", None)
    monkeypatch.setenv("EMBER_COMPILE_WORKERS", "0")
    assert triton_pool.start() is None
    monkeypatch.setenv("EMBER_COMPILE_WORKERS", "4")
    assert (triton_pool.start() is None) == (not torch.cuda.is_available())


def test_worker_reports_errors_and_keeps_serving(tmp_path):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "ember.codegen.triton_worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env)
    try:
        assert read_message(proc.stdout) == ("ready", None)
        base = {"fname": "k", "dtypes": [], "grid": (1, 1, 1), "meta": {}, "launcher": False,
                "target": ("cuda", 90, 32), "env": {"EMBER_CACHE_DIR": str(tmp_path / "ember")}, "knobs": {}}
        for i in range(2):     # the worker answers and carries on after a failing request
            write_message(proc.stdin, base | {"src": f"print('noise {i}')\nraise ValueError('boom {i}')\n"})
            assert read_message(proc.stdout) == ("error", f"ValueError: boom {i}")
    finally:
        proc.stdin.close()
    assert proc.wait(timeout=60) == 0


def test_requests_carry_the_triton_environment(monkeypatch, tmp_path):
    """torch.compile sets TRITON_PTXAS_PATH in its process; a worker compiling without it would use another
    ptxas, hence another cache key, and every kernel would compile twice. Requests carry every TRITON_*
    variable and the ones Triton's cache key reads; a worker drops the ones the parent does not have."""
    from ember.codegen.triton_worker import request_env
    monkeypatch.setenv("TRITON_PTXAS_PATH", "/opt/ptxas")
    monkeypatch.setenv("MLIR_ENABLE_DUMP", "0")
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)    # set by ember once Triton is used (triton_cache)
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    req = request_env()
    assert req["env"]["TRITON_PTXAS_PATH"] == "/opt/ptxas" and req["env"]["MLIR_ENABLE_DUMP"] == "0"
    assert req["env"]["EMBER_CACHE_DIR"] == str(tmp_path) and "TRITON_INTERPRET" not in req["env"]
    assert "libdevice_path" in req["knobs"]
    code = ("import os, json; from ember.codegen.triton_worker import apply_env; "
            "apply_env(json.loads(os.environ.pop('REQ'))); "
            "print(json.dumps({k: v for k, v in os.environ.items() if k.startswith(('TRITON_', 'MLIR_', 'LLVM_'))}))")
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TRITON_STALE": "1", "TRITON_INTERPRET": "1",
           "LLVM_IR_ENABLE_DUMP": "1", "REQ": __import__("json").dumps(req)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    got = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert got == {"TRITON_PTXAS_PATH": "/opt/ptxas", "MLIR_ENABLE_DUMP": "0", "TRITON_INTERPRET": "1"}, got


def test_workers_take_the_parents_backend_hash():
    """Triton caches the ptxas version inside the backend hash at its first use in a process; a worker started
    after torch.compile set TRITON_PTXAS_PATH would hash another version than its parent. The worker pins the
    backend hash the request carries (any ptxas: the hash is never computed from it once pinned)."""
    code = ("from ember.codegen import triton_worker as w; t = ('cuda', 90, 32); "
            "w._pin_backend_hash(t, 'parent-ptxas-90'); print(w.backend_hash(t)); "
            "w._pin_backend_hash(t, 'other-90'); print(w.backend_hash(t))")
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TRITON_PTXAS_PATH": "/nonexistent/ptxas"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["parent-ptxas-90", "other-90"], out.stderr[-2000:]


def test_a_forked_child_starts_its_own_pool(monkeypatch):
    """The pool's serving threads do not survive a fork: a child must not queue kernels on its parent's pool
    (nobody would serve them and its first launch would wait for ever)."""
    import os

    class Dummy:
        def __init__(self, n):
            self.n = n
    monkeypatch.setattr(triton_pool, "_POOL", None)
    monkeypatch.setattr(triton_pool, "_Pool", Dummy)
    monkeypatch.setattr(triton_pool, "_usable", lambda: True)
    monkeypatch.setenv("EMBER_COMPILE_WORKERS", "3")
    parent = triton_pool.start()
    assert isinstance(parent, Dummy) and triton_pool.start() is parent
    pid = os.fork()
    if pid == 0:
        child = triton_pool.start()
        os._exit(0 if isinstance(child, Dummy) and child is not parent else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert triton_pool.start() is parent
