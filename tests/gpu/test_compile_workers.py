"""Triton kernels compiled in worker processes (ember.codegen.triton_pool): results equal eager's, the workers
did the compiling, and a kernel a worker fails on compiles in-process at its first launch."""
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import ember
from ember.codegen import triton_pool

pytestmark = pytest.mark.gpu


def _fresh_caches(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "ember"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.delenv("EMBER_COMPILE_WORKERS", raising=False)
    ember.reset()


def _fn(x, w):
    y = F.gelu(x * w + 1.0)
    return torch.softmax(y, -1), F.layer_norm(y, y.shape[-1:]).sum(0)


def test_kernels_compile_in_workers(monkeypatch, tmp_path):
    _fresh_caches(monkeypatch, tmp_path)
    pool = triton_pool.start()
    assert pool is not None
    before, failed, mismatched, loaded, shared = pool.compiled, pool.failed, pool.mismatched, pool.loaded, pool.shared
    x, w = torch.randn(64, 300, device="cuda"), torch.randn(300, device="cuda", requires_grad=True)
    f = ember.compile(_fn)
    out = f(x, w)
    ref = _fn(x, w)
    for a, b in zip(out, ref):
        torch.testing.assert_close(a, b)
    (out[0].square().sum() + out[1].sum()).backward()
    g = w.grad.clone()
    w.grad = None
    (ref[0].square().sum() + ref[1].sum()).backward()
    torch.testing.assert_close(g, w.grad)
    assert pool.compiled - before >= 3 and pool.failed == failed
    assert pool.mismatched == mismatched        # every first launch loaded what its worker compiled
    # ... by the worker's hash, without importing the kernel's module here
    assert pool.loaded - loaded == pool.compiled - before + pool.shared - shared
    # an input that is not 16-byte aligned is another specialization: compiled here, still right
    xs = torch.randn(64 * 300 + 1, device="cuda")[1:].view(64, 300)
    for a, b in zip(f(xs, w), _fn(xs, w)):
        torch.testing.assert_close(a, b)


def test_worker_failure_compiles_in_process(monkeypatch, tmp_path):
    _fresh_caches(monkeypatch, tmp_path)
    pool = triton_pool.start()
    failed = pool.failed
    monkeypatch.setattr(triton_pool, "_target", lambda: ("cuda", 1, 32))     # no such GPU: every request fails
    x = torch.randn(33, 257, device="cuda")
    f = ember.compile(lambda t: torch.tanh(t) * t.sum(-1, keepdim=True))
    torch.testing.assert_close(f(x), torch.tanh(x) * x.sum(-1, keepdim=True))
    assert pool.failed > failed


def test_workers_hold_no_cuda_context():
    """Workers get the GPU target with each request: none of them opens a CUDA context (GPU memory)."""
    import subprocess
    pool = triton_pool.start()
    x = torch.randn(100, device="cuda")
    torch.testing.assert_close(ember.compile(lambda t: torch.sin(t) + 1)(x), torch.sin(x) + 1)
    assert pool.pids
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"], capture_output=True,
                         text=True, check=True).stdout
    on_gpu = {int(p) for p in out.split()}
    assert not (on_gpu & pool.pids), (on_gpu, pool.pids)


def test_a_crashed_worker_is_replaced(monkeypatch, tmp_path):
    """Workers that die (killed here) are replaced when they next get a request, which compiles in-process;
    the replacements compile the kernels after it."""
    import os
    import signal
    _fresh_caches(monkeypatch, tmp_path)
    pool = triton_pool._Pool(2)
    monkeypatch.setattr(triton_pool, "_POOL", pool)
    x = torch.randn(40, 70, device="cuda")
    torch.testing.assert_close(ember.compile(lambda t: t.exp().sum(-1))(x), x.exp().sum(-1))
    import time
    deadline = time.monotonic() + 120      # the other worker may still be warming up (triton_worker.warm_up)
    while len(pool.pids) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    killed = set(pool.pids)
    assert len(killed) == 2
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    for i in range(12):
        f = ember.compile(lambda t, i=i: torch.cos(t * (i + 1)).amax(-1) + t.mean())
        torch.testing.assert_close(f(x), torch.cos(x * (i + 1)).amax(-1) + x.mean())
        if not (pool.pids & killed):
            break
    assert not (pool.pids & killed) and len(pool.pids) == 2 and pool.live == 2 and pool.failed >= 2
    done = pool.compiled
    f = ember.compile(lambda t: torch.sigmoid(t).sum(0))
    torch.testing.assert_close(f(x), torch.sigmoid(x).sum(0))
    assert pool.compiled > done


def test_triton_settings_changed_after_the_workers_started(monkeypatch, tmp_path):
    """torch.compile sets TRITON_PTXAS_PATH (torch's own ptxas) in the process it runs in, after ember's
    workers may have started: requests carry the setting, so the first launches still load what the workers
    compiled (the same cache key) instead of compiling every kernel again."""
    _fresh_caches(monkeypatch, tmp_path)
    pool = triton_pool.start()
    # the JIT path, which computes the cache key in this process (loading by the worker's hash needs none)
    monkeypatch.setattr("ember.codegen.triton.load_compiled", lambda kernel, info: None)
    settings = [("TRITON_DEFAULT_FP_FUSION", "0")]
    ptxas = Path(torch.__file__).parent / "bin" / "ptxas"
    if ptxas.is_file():
        settings.append(("TRITON_PTXAS_PATH", str(ptxas)))
    x = torch.randn(48, 96, device="cuda")
    for i, (name, value) in enumerate(settings):
        monkeypatch.setenv(name, value)
        mismatched, done = pool.mismatched, pool.compiled
        f = ember.compile(lambda t, i=i: torch.tanh(t * (i + 2)).sum(-1))
        torch.testing.assert_close(f(x), torch.tanh(x * (i + 2)).sum(-1))
        assert pool.compiled > done and pool.mismatched == mismatched, name


def test_a_slow_worker_compile_is_not_waited_for(monkeypatch, tmp_path):
    """A first launch waits EMBER_COMPILE_TIMEOUT for the worker, then compiles the kernel itself."""
    _fresh_caches(monkeypatch, tmp_path)
    triton_pool.start()
    monkeypatch.setattr(triton_pool, "TIMEOUT_S", 1e-6)
    x = torch.randn(37, 53, device="cuda")
    f = ember.compile(lambda t: torch.erf(t * 3).sum(0))
    torch.testing.assert_close(f(x), torch.erf(x * 3).sum(0))


def test_a_forked_child_does_not_use_the_parents_pool(monkeypatch):
    import os
    pool = triton_pool.start()
    assert pool is not None
    pid = os.fork()
    if pid == 0:         # the child: the parent's serving threads are gone, so its pool must not be used
        os.environ["EMBER_COMPILE_WORKERS"] = "0"
        os._exit(0 if triton_pool.start() is None else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert triton_pool.start() is pool


@pytest.mark.parametrize("path", ["worker-hash", "triton-jit"])
def test_a_first_call_launches_each_kernel_once(monkeypatch, tmp_path, path):
    """Accumulating kernels (atomic adds into a zeroed buffer) are not idempotent: the first call, which
    compiles or loads each kernel, must launch it once, whether it loads the worker's compile by its hash or
    goes through Triton's JIT (which compiles without launching)."""
    _fresh_caches(monkeypatch, tmp_path)
    if path == "triton-jit":
        monkeypatch.setattr("ember.codegen.triton.load_compiled", lambda kernel, info: None)
    idx = torch.randint(0, 37, (4000,), device="cuda")
    src = torch.randn(4000, 24, device="cuda")

    def fn(i, s):
        return torch.zeros(37, 24, device=s.device).index_add(0, i, s * 2.0) + 1.0
    out = ember.compile(fn)(idx, src)       # the first call: every kernel loaded here
    torch.testing.assert_close(out, fn(idx, src), rtol=1e-4, atol=1e-4)


def test_buffers_the_wrapper_allocates_at_odd_offsets(monkeypatch, tmp_path):
    """A kernel writing one part of a concatenation gets a pointer into the middle of its output, which need
    not be 16-byte aligned: the worker compiled the all-aligned variant, so such a first launch must compile
    its own (found in BERT's training step, where loading the worker's variant ran off into an illegal
    memory access)."""
    _fresh_caches(monkeypatch, tmp_path)

    def fn(a, b, c):
        x = torch.cat([a.sin(), b.cos() * 2.0, c.exp()], 0)
        y = torch.cat([a.unsqueeze(0).expand(5, -1), (a * 3.0).unsqueeze(0).expand(5, -1)], 1)
        return x.tanh(), y + 1.0
    args = [torch.randn(n, device="cuda") for n in (3, 1001, 7)]
    f = ember.compile(fn)
    for got, want in zip(f(*args), fn(*args)):
        torch.testing.assert_close(got, want)


def test_layers_share_their_kernels_compiles(monkeypatch, tmp_path):
    """Kernels doing the same work on other buffers (a stack of identical layers) have the same function
    text: one worker compile serves all of them, and each still computes its own layer."""
    _fresh_caches(monkeypatch, tmp_path)
    pool = triton_pool.start()
    before, shared = pool.compiled, pool.shared
    ws = [torch.randn(96, 96, device="cuda") for _ in range(4)]

    def fn(x):
        for w in ws:
            x = F.layer_norm(torch.relu(x @ w) + x, (96,))
        return x
    x = torch.randn(128, 96, device="cuda")
    torch.testing.assert_close(ember.compile(fn)(x), fn(x), rtol=1e-4, atol=1e-4)
    assert pool.shared - shared >= 3 and pool.compiled - before <= 3, (pool.compiled - before, pool.shared - shared)
