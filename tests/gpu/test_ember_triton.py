"""The Triton backend on CUDA: the table of tests/codegen/test_triton.py in float32 and bfloat16 (compiled ==
eager, values and gradients), plus what only a GPU shows: the direct launcher, alignment specialization,
parallel precompilation and the on-disk cache.

Run on the device machine: ``python -m pytest -q tests/gpu/test_ember_triton.py``.
"""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.codegen.test_triton import CASES, OPTS, _bodies, check_case, compile_case

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")]

BF16_CASES = [n for n, c in CASES.items() if not c[4]]


@pytest.mark.parametrize("name", list(CASES))
def test_float32(name: str) -> None:
    check_case(name, device="cuda")


@pytest.mark.parametrize("name", BF16_CASES)
def test_bfloat16(name: str) -> None:
    # eager rounds to bfloat16 after every op, ember once per kernel output: compare at bfloat16 resolution
    check_case(name, device="cuda", dtype=torch.bfloat16, tol=4e-2, grad_tol=1e-1)


def _kernel(fn, inputs):
    from ember.codegen import triton as tb
    (body,) = _bodies(fn, inputs)
    return body, tb.compile_kernels([body], OPTS, "t")[0]


def test_direct_launch_and_alignment_specialization() -> None:
    _, k = _kernel(lambda x: x * 2 + 1, [torch.randn(4096, device="cuda")])
    base = torch.randn(4097 + 64, device="cuda")
    for x in (base[:4096], base[1:4097], base[:4096]):        # aligned, misaligned (4-byte offset), aligned
        out = torch.empty(4096, device="cuda")
        k(x, out)
        torch.testing.assert_close(out, x * 2 + 1)
    assert len(k.fast) == 2 and all(f != k._slow for f in k.fast.values()), k.fast
    out = torch.empty(4096, device="cuda")
    k(base[1:4097], out)                                      # the fast path on a misaligned pointer
    torch.testing.assert_close(out, base[1:4097] * 2 + 1)


def test_wrapper_alignment_check_picks_the_launcher() -> None:
    """A compiled graph called with aligned inputs, then an input at a 4-byte offset, then aligned again (and
    the reverse): the once-per-call ``_aligned`` check sends the misaligned call to the kernel's checked path,
    which compiles the misaligned variant; every result is right."""
    def f(x, y):
        return torch.sigmoid(x) * y, (x * y).sum(-1)
    base = torch.randn(64 * 1000 + 1, device="cuda")
    views = {"aligned": base[:-1].view(64, 1000), "offset": base[1:].view(64, 1000)}
    for order in (("aligned", "offset", "aligned"), ("offset", "aligned", "offset")):
        y = torch.randn(64, 1000, device="cuda")
        compiled, _ = compile_case(f, [views[order[0]], y])
        for which in order:
            x = views[which]
            for o, r in zip(compiled(x, y), f(x, y)):
                torch.testing.assert_close(o, r, msg=lambda m, which=which: f"{which}: {m}")


def test_precompiled_before_first_call() -> None:
    """compile_kernels starts every kernel's compile (in worker processes, or here where there are none)
    before the first call; a worker compile fills Triton's disk cache, so the first launch only loads it."""
    from ember.codegen import triton as tb
    from ember.codegen import triton_pool
    pool = triton_pool.start()
    failed = pool.failed if pool else 0
    bodies = _bodies(lambda x: (torch.softmax(x, -1), x.sum(0) * 3), [torch.randn(64, 300, device="cuda")])
    ks = tb.compile_kernels(bodies, OPTS, "t")
    dev = torch.cuda.current_device()
    for k in ks:
        assert k.pending is not None or len(k.fn.device_caches[dev][0]) >= 1, "kernel not compiled by compile_kernels"
        if k.pending is not None:
            for fut in k.pending:
                fut.result()
    assert (pool.failed if pool else 0) == failed


def test_many_kernels_one_graph() -> None:
    def f(x0, x1, x2, x3, x4, x5):
        return [torch.softmax(x, -1) * i for i, x in enumerate((x0, x1, x2, x3, x4, x5))]
    xs = [torch.randn(32, 50 + 7 * i, device="cuda") for i in range(6)]
    compiled, _ = compile_case(f, xs)
    for o, r in zip(compiled(*xs), f(*xs)):
        torch.testing.assert_close(o, r)


def test_odd_vocab_matmul_is_padded_to_aligned_sizes() -> None:
    """On CUDA a large bf16 matmul with 2051 output columns runs on zero-padded operands (2056 columns): values
    and gradients equal eager's; the returned logits keep the aligned rows of 2056 (as torch.compile's pad_mm
    returns them), the gradients eager's strides."""
    fn = CASES["odd_vocab_head"][0]
    bf = torch.bfloat16
    x, w, t = torch.randn(256, 64, device="cuda", dtype=bf), torch.randn(2051, 64, device="cuda", dtype=bf) * 0.1, \
        torch.randint(0, 2051, (256,), device="cuda")
    x.requires_grad_(True)
    w.requires_grad_(True)
    compiled, built = compile_case(fn, [x, w, t])
    out = compiled(x, w, t)
    ref = fn(x, w, t)
    torch.testing.assert_close(out[0], ref[0], rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(out[1], ref[1], rtol=1e-3, atol=1e-3)
    assert out[0].stride() == (2056, 1)
    g = torch.autograd.grad(out[1] + out[0].sum(), [x, w])
    gr = torch.autograd.grad(ref[1] + ref[0].sum(), [x, w])
    for a, b in zip(g, gr):
        torch.testing.assert_close(a, b, rtol=5e-2, atol=5e-2)
        assert a.stride() == b.stride()
    src = "\n".join(b.source for b in built)
    assert "2056" in src, src


def test_cpu_scalar_tensor_feeding_a_kernel() -> None:
    """``x * torch.tensor(2.5)`` with ``x`` on CUDA: the kernel reads a device copy of the CPU scalar."""
    import ember
    f = ember.compile(lambda x, s, t: (x * s + t, (x - t).sum() * s))
    for v in (2.5, -1.0):
        x, s, t = torch.randn(33, device="cuda"), torch.tensor(v), torch.tensor(3, dtype=torch.int64)
        for got, want in zip(f(x, s, t), (x * s + t, (x - t).sum() * s)):
            torch.testing.assert_close(got, want)


def _computed_scalar_cases():
    return [
        ("sum", lambda x, y: x * y.sum() + 1),
        ("element", lambda x, y: x * y[1, 2]),
        ("exp_of_element", lambda x, y: (x - y[0, 0].exp()).relu()),
        ("two_kernels", lambda x, y: (x * y.mean()).sum(1, keepdim=True) + y.amax()),
        ("cast_input_scalar", lambda x, y: x * y[0, 0].double().float()),
    ]


@pytest.mark.parametrize("name,fn", _computed_scalar_cases(), ids=[c[0] for c in _computed_scalar_cases()])
def test_computed_cpu_scalar_feeding_a_kernel(name, fn) -> None:
    """A 0-dim CPU value computed in the graph from a CPU tensor (a sum, an element, a function of one) as an
    operand of CUDA kernels, as eager allows: every graph compiles to kernels (it ran as an FX graph), the CUDA
    kernels get a device copy made after the CPU kernel computing it, and values equal eager's (CPU-side
    checks: tests/loopir/test_device_checks.py::test_computed_cpu_scalar_is_a_kernel_operand)."""
    from ember.codegen.wrapper import CompiledGraph
    x, y = torch.randn(33, 5, device="cuda"), torch.randn(3, 3)
    compiled, built = compile_case(fn, [x, y], opts=None)
    assert built and all(isinstance(b, CompiledGraph) for b in built), built
    for _ in range(2):
        x, y = torch.randn(33, 5, device="cuda"), torch.randn(3, 3)
        got, want = compiled(x, y), fn(x, y)
        got = got[0] if isinstance(got, (tuple, list)) else got
        torch.testing.assert_close(got, want)


def test_cross_entropy_over_odd_vocab_is_row_tiled_and_padded() -> None:
    check_odd_vocab_cross_entropy(512, 5001, "cuda")


def check_odd_vocab_cross_entropy(rows: int, vocab: int, device: str) -> None:
    """GPT-2's loss on a vocabulary of odd size: the logits' gradient is one (rows, columns) kernel writing the
    zero-padded rows both gradient matmuls take (no flat kernel over rows x vocab, no second padded copy), and
    the one-hot sum of nll_loss's gradient is no reduction. Values and gradients equal eager's."""
    import torch.nn.functional as F

    def fn(x, w, t):
        return F.cross_entropy((x @ w.t()).float(), t)
    bf = torch.bfloat16
    g = torch.Generator(device).manual_seed(0)
    x = torch.randn(rows, 64, device=device, dtype=bf, generator=g).requires_grad_(True)
    w = (torch.randn(vocab, 64, device=device, dtype=bf, generator=g) * 0.1).requires_grad_(True)
    t = torch.randint(0, vocab, (rows,), device=device, generator=g)
    t[7] = -100
    compiled, built = compile_case(fn, [x, w, t])
    out, ref = compiled(x, w, t), fn(x, w, t)
    torch.testing.assert_close(out, ref, rtol=1e-3, atol=1e-3)
    for a, b in zip(torch.autograd.grad(out, [x, w]), torch.autograd.grad(ref, [x, w])):
        torch.testing.assert_close(a, b, rtol=5e-2, atol=5e-2)
    padded = (vocab + 7) // 8 * 8
    bwd = "\n".join(built[-1].kernel_sources)
    assert f"xnumel={rows} rnumel={padded}" in bwd, bwd
    assert f"xnumel={rows * vocab} " not in bwd and f"xnumel={rows * padded} " not in bwd, bwd
    assert f"rnumel={vocab} " not in bwd, bwd
    # a looped row reads each row's values (its target, max and sum) once, before the loop: only the logits
    # are loaded per column
    tiled = next(k for k in built[-1].kernel_sources if f"xnumel={rows} rnumel={padded}" in k)
    if "for roffset" in tiled:
        assert tiled.split("for roffset")[1].count("tl.load(") == 1, tiled


def test_combo_kernel_adam_update_equals_eager_and_takes_few_launches() -> None:
    """An Adam-like update over 60 parameters of mixed sizes (some misaligned, one empty): combo kernels
    (``ember.loopir.combo``) on the GPU, where the parts really run concurrently, equal eager."""
    import copy

    import ember
    from tests.codegen.test_combo import adam_update
    sizes = [(64, 64), (256,), (128, 512), (7, 13), (0,), (3000,)] * 10
    base = torch.randn(8192, device="cuda")

    def param(s):
        return torch.randn(*s, device="cuda")
    state = [[param(s) for s in sizes], [param(s) for s in sizes],
             [torch.zeros(*s, device="cuda") for s in sizes], [torch.rand(*s, device="cuda") for s in sizes]]
    state[1][3] = base[1:92].view(7, 13)                   # a misaligned gradient
    ref = copy.deepcopy(state)
    f = ember.compile(adam_update)
    for _ in range(3):
        f(*state)
        adam_update(*ref)
    for got, want in zip(state, ref):
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        f(*state)
        torch.cuda.synchronize()
    launches = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert 0 < len(launches) <= 6, [e.name for e in launches]
