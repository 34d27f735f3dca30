"""C++ backend: compiled graphs (values and gradients) equal eager PyTorch; disk cache; compiler errors.

Every case goes through ``aot_compile(..., decompose=True)`` with ``cpu_backend="cpp"``; a case passes only if
every final graph was turned into C++ kernels (no silent FX or eager fallback).
"""
from __future__ import annotations

import dataclasses

import math

import pytest
import torch

import ember.heuristics as H
import torch.nn.functional as F

import ember.codegen as codegen
from ember.autograd.aot import aot_compile
from ember.codegen import cpp
from ember.codegen.cpp_build import CppCache, CppCompileError
from ember.codegen.wrapper import CompiledGraph
from ember.options import CompileOptions

from tests.codegen.inputs import _ints, _rms, _rn, _stats_rows, _with_nans  # noqa: E402

OPTS = CompileOptions(cpu_backend="cpp")




# name: (fn, inputs factory, train, rtol/atol)
CASES = {
    "pointwise_broadcast": (lambda x, y, z: ((x * y + 1).sin() / (z.exp() + 1)).tanh(),
                            lambda: [_rn(33, 65), _rn(65), _rn(33, 1)], True, 1e-5),
    "softmax": (lambda x: torch.softmax(x, -1), lambda: [_rn(37, 129)], True, 1e-5),
    "log_softmax_dim0": (lambda x: torch.log_softmax(x, 0), lambda: [_rn(37, 20)], True, 1e-5),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (64,), w, b), lambda: [_rn(17, 64), _rn(64), _rn(64)], True,
                   1e-4),
    "rms_norm": (_rms, lambda: [_rn(9, 96), _rn(96)], True, 1e-4),
    "var_mean": (lambda x: torch.var_mean(x, dim=1), lambda: [_rn(12, 50)], True, 1e-4),
    # Welford's M2 (ember.loopir.welford): rows held whole and looped, columns, NCHW batch statistics, a single
    # point, rows with NaN/inf/constant/offset values; long rows split on CUDA (20000: into chunks of whole
    # points; 20011, prime: shifted sums)
    "welford": (lambda r, c, b, p, q: (torch.var_mean(r, 1)[0], torch.var_mean(r, 1)[1], torch.std(r, 1),
                                       torch.var(c, 0), torch.var_mean(b, (0, 2, 3), correction=0)[0],
                                       torch.mean(b, (0, 2, 3)), torch.std_mean(p, 1)[0], torch.mean(p, 1),
                                       torch.var(q, 1), torch.var(r[:, :1], 1, correction=0)),
                lambda: [_stats_rows(6, 50), _rn(3000, 6), _rn(4, 3, 5, 7), _stats_rows(5, 20000),
                         _stats_rows(4, 20011)], False, 1e-4),
    # bf16 values in vector lanes (ember_vload_bf16/ember_vround_bf16/ember_vstore_bf16): rows of several vectors
    # plus a scalar tail, reductions over widened bf16, ops rounded to bf16 after each one as eager rounds them
    "bf16_vectors": (lambda x, y: (torch.softmax(x, -1), F.layer_norm(x, (67,)), x * y + 1, F.gelu(x),
                                   (x > 0).to(torch.bfloat16) * y, x.float().sum(-1), torch.var_mean(x.float(), -1)[0],
                                   x.exp(), torch.where(x > y, x, y * 2), (x.float() * 3).bfloat16()),
                     lambda: [(_rn(33, 67) * 3).bfloat16(), _rn(33, 67).bfloat16()], False, 1e-2),
    "norms_train": (lambda x, w, b, g: (F.batch_norm(x, None, None, w, b, training=True), F.group_norm(g, 2, w[:4]),
                                        F.instance_norm(g)),
                    lambda: [_rn(4, 6, 5, 7), _rn(6), _rn(6), _rn(3, 4, 9)], True, 1e-4),
    "gelu_erf_tanh": (lambda x: F.gelu(x) + F.gelu(x * 0.5, approximate="tanh"), lambda: [_rn(70, 33)], True, 1e-5),
    # argmax/argmin as two fused reductions: NaN rows (the first NaN wins), ties (the first index wins), long
    # rows split across threads (x=4 r=5000), integer inputs
    "argmax_argmin": (lambda a, t, l, i: (a.argmax(1), a.argmin(0), a.argmax(), t.argmax(1), t.argmin(0),
                                       torch.max(t, 1)[1], torch.min(l, 1)[0], torch.min(l, 1)[1],
                                       l.argmax(1, keepdim=True), l.argmin(), i.argmax(0), i.argmin(1)),
                      lambda: [_with_nans(6, 5), torch.randint(0, 3, (9, 40)).float(), _rn(4, 5000), _ints(9, 13)], False, 1e-6),
    "reductions": (lambda x: (x.sum(0), x.sum(-1), x.sum(), x.amax(1), x.amin(0), x.mean((0, 2)),
                              (x * 0.1 + 1).prod(2)),
                   lambda: [_rn(6, 7, 40)], True, 1e-4),
    # pad's backward (negative padding) has no loop-IR lowering yet: forward only
    "pad": (lambda x: (F.pad(x, (1, 2, 3, 0)) + 1, F.pad(x, (0, 3), value=-1.5).exp()), lambda: [_rn(6, 10)],
            False, 1e-6),
    "views": (lambda x, y: (torch.cat([x, y.t()], 1) * 2, x[:, 1::2].exp(),
                            x.t().contiguous() * 3, x.reshape(4, 4, 10).permute(2, 0, 1) - 1),
              lambda: [_rn(16, 10), _rn(5, 16)], True, 1e-5),
    "casts_bf16": (lambda x: ((x.bfloat16() * 2 + 1).float(), x.to(torch.int32), (x > 0.5).float(),
                              torch.softmax(x.bfloat16(), -1), x.half() * 3, x.double().exp()),
                   lambda: [_rn(11, 40) * 4], False, 1e-2),
    "where": (lambda x, y: torch.where(x > 0, x, y * 2) + torch.where(y < 0, 1.0, x), lambda: [_rn(8, 9), _rn(8, 9)],
              True, 1e-5),
    "int_division": (lambda a, b: (a // b, a % b, a / b, torch.div(a, b, rounding_mode="trunc"), torch.fmod(a, b),
                                   a << 3, a >> 2, a & b, a | b, a ^ b, ~a, a * b - a, torch.maximum(a, b),
                                   a.abs(), a.sign(), a.sum(1), a.amax(0), a.pow(2)),
                     lambda: [_ints(9, 13), _ints(9, 13, nonzero=True)], False, 0),
    "float_division": (lambda a, b: (a // b, a % b, torch.fmod(a, b), torch.remainder(a, -b)),
                       lambda: [_rn(9, 13) * 10, _rn(9, 13)], False, 1e-5),
    "nan_propagation": (lambda x: (x.amax(1), x.amin(0), x.amax(), torch.maximum(x, torch.zeros_like(x)),
                                   torch.minimum(x, x.flip(0)), x.isnan(), torch.nan_to_num(x)),
                        lambda: [_with_nans(6, 5)], False, 1e-6),
    "bool_any_all": (lambda x: ((x > 0).any(1), (x > -3).all(0), (x > 0).logical_xor(x < 1), ~(x > 0)),
                     lambda: [_rn(10, 20)], False, 0),
    "math": (lambda x, y: (torch.erfinv(x.clamp(-0.99, 0.99)), torch.digamma(y.abs() + 0.1), torch.lgamma(y),
                           torch.log1p(x.abs()), torch.expm1(x), torch.atan2(x, y), torch.sigmoid(x), x.floor(),
                           x.ceil(), (x * 4).round(), x.trunc(), x.sign(), torch.hypot(x, y), x.exp2(), x.log2().abs(),
                           torch.asinh(x), torch.rsqrt(x.abs() + 1), x.reciprocal(), x.pow(y.abs())),
             lambda: [_rn(20, 33), _rn(20, 33) * 3], False, 1e-4),
    "float64": (lambda x, w: torch.softmax(x * w, -1) + x.cos(), lambda: [_rn(5, 30, dtype=torch.float64),
                                                                          _rn(30, dtype=torch.float64)], True, 1e-10),
    "big_pointwise": (lambda x, y: torch.sigmoid(x) * y + x.exp() * 0.5, lambda: [_rn(512, 2048), _rn(2048)], True,
                      1e-5),
    "big_rows": (lambda x: torch.log_softmax(x, -1).sum(0), lambda: [_rn(1024, 512)], True, 1e-4),
    "big_full_reduction": (lambda x: (x.sum(), x.abs().amax(), (x * x).mean()), lambda: [_rn(300000)], True, 1e-3),
    "tiny": (lambda x, y: (x * y + 2, (x - y).abs().sum()), lambda: [_rn(1), torch.randn(())], True, 1e-6),
    # explicit vector loops (cpp_vec): rows longer than a vector with a scalar tail, masks, NaN/inf, indices
    # contiguous within a vector (bias rows: Mod; per-row values: floor)
    "vec_masked_softmax": (lambda x, m: torch.softmax(x.masked_fill(m, float("-inf")) / 4, -1),
                           lambda: [_rn(3, 40, 40), torch.ones(40, 40, dtype=torch.bool).triu(1)], True, 1e-5),
    "vec_nan_inf_rows": (lambda x, y: (x.amax(1), x.amin(1), torch.maximum(x, y), torch.minimum(y, x), x.exp(),
                                       torch.sigmoid(x), (x * y).sum(1), (x.abs() + 0.5).prod(1)),
                         lambda: [_extremes(9, 37), _rn(9, 37)], False, 1e-5),
    "vec_bool": (lambda x, y: ((x > y), (x > 0) & (y < 0.5), ~(x > 0), torch.where(x > y, x, -y),
                               (x > 0).float() * y, (x == y) | (x != x)),
                 lambda: [_rn(7, 48), _rn(7, 48)], False, 0),
    # pieces of cat / select backward are masks that hold for a whole vector (loads only where they hold)
    "vec_cat_select_back": (lambda x, y: (torch.cat([x, y * 2], -1).exp(), torch.stack([x, y.sin()], 1) + 1),
                            lambda: [_rn(6, 32), _rn(6, 32)], True, 1e-5),
    "vec_bias_rows": (lambda x, b, z: ((x + b) * z, torch.relu(x * b - z), (x - z).abs().amax(0)),
                      lambda: [_rn(33, 64), _rn(64), _rn(33, 1)], True, 1e-5),
}


def _extremes(*shape: int) -> torch.Tensor:
    t = torch.randn(*shape) * 60
    t.view(-1)[::7] = float("nan")
    t.view(-1)[3::11] = float("inf")
    t.view(-1)[5::13] = float("-inf")
    t.view(-1)[6::17] = -95.0          # exp underflows into the denormals (ember flushes those to 0)
    return t


def _compile(fn, inputs):
    gm = torch.fx.symbolic_trace(fn)
    built = []

    def compile_graph(g, kind):
        out = codegen.compile_graph(g, kind, OPTS)
        built.append(out)
        return out
    return aot_compile(gm, inputs, decompose=True, compile_graph=compile_graph), built


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _close(a: torch.Tensor, b: torch.Tensor, tol: float, what: str) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, (what, a.dtype, b.dtype, a.shape, b.shape)
    if tol == 0 or not a.dtype.is_floating_point:
        assert torch.equal(a, b), f"{what}: {a} vs {b}"
    else:
        torch.testing.assert_close(a, b, rtol=tol, atol=tol, equal_nan=True, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("name", list(CASES))
def test_matches_eager(name: str) -> None:
    fn, make, train, tol = CASES[name]
    torch.manual_seed(0)
    inputs = make()
    if train:
        inputs = [t.requires_grad_(t.is_floating_point()) for t in inputs]
    compiled, built = _compile(fn, inputs)
    fresh = [t.requires_grad_(train and t.is_floating_point()) for t in make()]
    outs = _flat(compiled(*fresh))
    assert built and all(isinstance(b, CompiledGraph) for b in built), f"{name}: not compiled to kernels: {built}"
    assert any('extern "C"' in s for b in built for s in b.kernel_sources), f"{name}: no C++ kernel ran"
    ref_in = [t.detach().clone().requires_grad_(t.requires_grad) for t in fresh]
    refs = _flat(fn(*ref_in))
    for i, (o, r) in enumerate(zip(outs, refs)):
        _close(o.detach(), r.detach(), tol, f"{name} output {i}")
    if train:
        ws = [torch.randn_like(r) for r in refs]
        g = torch.autograd.grad(sum((o * w).sum() for o, w in zip(outs, ws)), [t for t in fresh if t.requires_grad])
        gr = torch.autograd.grad(sum((r * w).sum() for r, w in zip(refs, ws)), [t for t in ref_in if t.requires_grad])
        assert len(built) >= 2, f"{name}: no backward graph compiled"
        for i, (a, b) in enumerate(zip(g, gr)):
            _close(a, b, tol * 10, f"{name} grad {i}")


def test_parallel_and_vectorized_kernels_generated() -> None:
    _, built = _compile(lambda x: torch.softmax(x, -1), [_rn(1024, 512)])
    src = "\n".join(s for b in built for s in b.kernel_sources)
    # rows of 512: vector accumulators, reduced across lanes once per row, and vector exp
    assert "omp parallel for" in src and "ember_vmaximum(" in src and "ember_hsum(" in src
    assert "ember_vexpf(" in src
    # rows of 7: too short for a vector, the scalar `omp simd` reduction remains
    _, built = _compile(lambda x: torch.softmax(x, -1), [_rn(64, 7)])
    src = "\n".join(s for b in built for s in b.kernel_sources)
    assert "omp simd reduction(max:" in src and "ember_vmaximum(" not in src
    _, built = _compile(lambda x: x * 2, [_rn(3, 4)])
    src = "\n".join(s for b in built for s in b.kernel_sources)
    assert "parallel" not in src and "omp simd" in src


def test_softmax_stashes_exp_instead_of_recomputing() -> None:
    # loop 2 stores exp(x - max) into the output, loop 3 loads it back: one exp per element, not two
    _, built = _compile(lambda x: torch.softmax(x, -1), [_rn(64, 512)])
    src = built[0].kernel_sources[0]
    assert src.count("ember_vexpf(") == 1 and src.count("ember_vstore(p_buf") == 2, src
    _, built = _compile(lambda x: torch.softmax(x, -1), [_rn(64, 7)])      # scalar loops stash the same way
    src = built[0].kernel_sources[0]
    assert src.count("ember_expf(") == 1, src


def test_source_names_fused_prims() -> None:
    _, built = _compile(lambda x: (x.exp() + 1).sum(-1), [_rn(4, 8)])
    src = built[0].kernel_sources[0]
    assert src.startswith("// kernel0:") and "sum" in src and "exp" in src


def _bodies(fn, inputs):
    from ember.autograd.aot import aot_compile as aot
    from ember.loopir.kernel import kernel_body
    from ember.loopir.lower import lower
    from ember.loopir.schedule import Kernel, schedule
    graphs = []
    aot(torch.fx.symbolic_trace(fn), inputs, decompose=True, compile_graph=lambda g, k: graphs.append(g) or g)
    sched = schedule(lower(graphs[0], "g"))
    return [kernel_body(s, persistent=False) for s in sched.steps if isinstance(s, Kernel)]


def test_disk_cache_warm_start(tmp_path) -> None:
    bodies = _bodies(lambda x: torch.tanh(x) * 3 + math.pi, [_rn(5, 7)])
    cold = CppCache(tmp_path)
    (k1,) = cpp.compile_kernels(bodies, OPTS, "g_cold", cache=cold)
    assert cold.compiler_runs == 1
    warm = CppCache(tmp_path)            # a fresh process: nothing loaded, the .so is on disk
    (k2,) = cpp.compile_kernels(bodies, OPTS, "g_warm", cache=warm)
    assert warm.compiler_runs == 0 and warm.hits == 1
    x = _rn(5, 7)
    o1, o2 = torch.empty(5, 7), torch.empty(5, 7)
    k1(x, o1)
    k2(x, o2)
    torch.testing.assert_close(o1, torch.tanh(x) * 3 + math.pi)
    assert torch.equal(o1, o2)


def test_compile_error_names_source_and_graph(tmp_path, monkeypatch) -> None:
    bodies = _bodies(lambda x: x + 1, [_rn(3)])
    monkeypatch.setattr(cpp, "PRELUDE", cpp.PRELUDE + "\nthis is not C++;\n")
    with pytest.raises(CppCompileError) as err:
        cpp.compile_kernels(bodies, OPTS, "graph_with_error", cache=CppCache(tmp_path))
    msg = str(err.value)
    assert "graph_with_error" in msg and str(tmp_path) in msg and ".cpp" in msg
    path = msg.split("generated source: ")[1].split()[0]
    assert "this is not C++" in open(path).read()


def test_per_channel_parameters_over_short_rows_are_vectorized() -> None:
    """``x * w + b`` with rows of 4 (NHWC batch norm over 4 channels, a bias over 4 features): the parameters
    repeat within a vector, so the loop stays vectorized with a lane-built parameter vector."""
    from ember.codegen.cpp import vector_width
    fn = lambda x, w, b: torch.relu(x * w + b)      # noqa: E731
    for n in (64, 67):                              # with and without a scalar tail
        ins = [_rn(n, 4), _rn(4), _rn(4)]
        compiled, built = _compile(fn, ins)
        _close(_flat(compiled(*ins))[0], fn(*ins), 1e-6, "per-channel rows of 4")
    src = "\n".join(s for b in built for s in b.kernel_sources)
    if vector_width() > 4:
        assert "ember_vperiodic(" in src and "ember_vstore(" in src, src


def test_argmax_is_one_kernel_not_an_aten_call() -> None:
    """argmax/argmin lower to the loop IR (the best value, then the first position holding it), fused into one
    kernel with the values ``torch.max`` also returns: no ATen call in the wrapper."""
    x = _rn(8, 300)
    _, built = _compile(lambda x: (torch.max(x, 1), x.argmin(0)), [x])
    src = "\n".join(b.source for b in built)
    assert "extern" not in src, src
    calls = [ln for ln in src.splitlines() if ln.lstrip().startswith("kernel")]
    assert len(calls) == 2 and all("amax" in ln or "amin" in ln for ln in calls), src


def test_bf16_loops_are_vector_loops_and_round_as_eager() -> None:
    """bf16 loads widen into float lanes and stores round to nearest even (NaN stays NaN): a pointwise bf16
    chain is a vector loop, bit for bit eager's (each op rounded to bf16), including ties, infinities and NaN."""
    x = (_rn(8, 300) * 100).bfloat16()
    y = _rn(8, 300).bfloat16()
    x[0, :4] = torch.tensor([float("inf"), float("-inf"), float("nan"), 65504.0])
    y[1, :3] = torch.tensor([float("nan"), 0.0, -0.0])
    fn = lambda x, y: ((x * y + 1) * 0.3 - x, (x.float() / 7).bfloat16(),       # noqa: E731
                       torch.full_like(x, 0.1) + torch.zeros_like(x))
    compiled, built = _compile(fn, [x, y])
    src = "\n".join(s for b in built for s in b.kernel_sources)
    # values computed in the loop are bf16 already (stored as their high halves); a broadcast constant rounds
    assert "ember_vload_bf16(" in src and "ember_vstore_bf16_exact(" in src, src
    for a, b in zip(compiled(x, y), fn(x, y)):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
        assert torch.equal(a.signbit() & ~a.isnan(), b.signbit() & ~b.isnan())


def test_vector_tanh_accuracy_and_special_values() -> None:
    """tanh in vector loops is a rational approximation (``ember_vtanh``): within 1e-6 of eager relatively on
    [-10, 10] and tiny values, +-1 exactly past its clamp and at +-inf, NaN kept, -0 kept."""
    special = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 7.95, -8.5, 1e30, 20.0, -3e-5])
    x = torch.cat([special, torch.linspace(-10, 10, 200_000), torch.logspace(-8, 1, 20_000),
                   -torch.logspace(-8, 1, 20_000)])                 # a multiple of 16 lanes: no scalar tail
    compiled, built = _compile(lambda x: torch.tanh(x), [x])
    src = "\n".join(s for b in built for s in b.kernel_sources)
    assert "ember_vtanh(" in src, src
    out, ref = compiled(x), torch.tanh(x)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=0, equal_nan=True)
    assert out[:2].tolist() == [1.0, -1.0] and out[7].item() == 1.0 and out[4].signbit() and out[2].isnan()


def test_lane_by_lane_ops_run_at_the_vector_width() -> None:
    """Ops without a vector rule (sqrt here) run lane by lane in an ``omp simd`` loop over a vector value. The
    loop must be as wide as the vector: with AVX-512 GCC prefers 256-bit loops, and a 16-lane vector then went
    through the stack in two halves, a store-forwarding stall per vector that made an Adam update 35% slower.
    Checked in the assembly: every ``vsqrtps`` works on whole vectors (zmm for 16 lanes, ymm for 8)."""
    import platform
    import subprocess
    import tempfile
    from pathlib import Path

    from ember.codegen import cpp_build, cpp_vec
    fn = lambda m, v, p: p - m / (torch.sqrt(v * 0.999) + 1e-8)      # noqa: E731
    xs = [_rn(4096), _rn(4096).abs(), _rn(4096)]
    compiled, built = _compile(fn, xs)
    torch.testing.assert_close(compiled(*xs), fn(*xs))
    src = "\n".join(s for b in built for s in b.kernel_sources)
    assert "simdlen(EMBER_VW)" in src, src
    if platform.machine() not in ("x86_64", "AMD64"):
        return
    decls, _ = cpp_build.vector_math_decls()
    width = cpp.vector_width()
    unit = "\n".join([cpp.PRELUDE, decls, f"#define EMBER_VW {width}", cpp_vec.PRELUDE, src])
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "k.cpp").write_text(unit)
        flags = [f for f in cpp_build.flags() if f not in ("-shared", "-lmvec")]
        subprocess.run([cpp_build.compiler(), *flags, "-S", "k.cpp", "-o", "k.s"], cwd=d, check=True)
        sqrts = [ln for ln in (Path(d) / "k.s").read_text().splitlines() if "vsqrtps" in ln]
    reg = {16: "zmm", 8: "ymm"}[width]
    assert sqrts and all(reg in ln for ln in sqrts), sqrts


@pytest.mark.parametrize("cols", [1000, 4096, 40000])
def test_bf16_softmax_stashes_exp_in_a_scratch_row(cols: int) -> None:
    """softmax of bf16 computes exp in float32, which the bf16 output cannot hold: the sum loop stores it into a
    per-row float scratch row (on the stack, while the row fits ``cpp_scratch_room``), and the output loop reads
    it back instead of computing exp again. Rows past the room recompute. Values stay eager's within bf16."""
    x = (_rn(6, cols) * 4).bfloat16()
    x[0, :3] = torch.tensor([float("-inf"), 1e4, float("nan")])
    x[1, :] = float("-inf")
    fn = lambda x: torch.softmax(x, -1)      # noqa: E731
    compiled, built = _compile(fn, [x])
    src = "\n".join(s for b in built for s in b.kernel_sources)
    fits = cols * 4 <= H.DEFAULT.cpp_scratch_room
    assert ("p_scratch0[" in src) == fits, src
    assert src.count("ember_vexpf(") == (1 if fits else 2), src
    torch.testing.assert_close(compiled(x), fn(x), equal_nan=True)


@pytest.mark.parametrize("nvec", [1, 2, 3, 8, 61])
def test_reduction_vector_loops_run_two_accumulator_sets(nvec: int) -> None:
    """Vector reduction loops without transcendental work run two vectors per step into two accumulator sets
    (sum, amax with its NaN flag, Welford with its own count), the odd vector and the scalar tail after; the
    sets fold together. Rows of 1, 2, 3, 8 and 61 vectors plus a tail; a NaN only in the second set's vector."""
    w = cpp.vector_width()
    x = _rn(5, nvec * w + 3) * 3 + 7
    if nvec >= 2:
        x[2, w + 1] = float("nan")          # the second vector of the row: the "_u1" set
    fn = lambda x: (x.sum(-1), x.amax(-1), torch.var_mean(x, -1), F.layer_norm(x, x.shape[-1:]))   # noqa: E731
    compiled, built = _compile(fn, [x])
    src = "\n".join(s for b in built for s in b.kernel_sources)
    assert "_u1_mean" in src and "ember_recip(++" in src, src
    got, want = compiled(x), fn(x)
    flat = lambda t: [u for v in t for u in (v if isinstance(v, tuple) else (v,))]   # noqa: E731
    for a, b in zip(flat(got), flat(want)):
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-5, equal_nan=True)


def test_vector_exp_accuracy_and_special_values() -> None:
    """exp in vector loops (``ember_vexpf``): within 2 ulp of eager's over the float range (results under
    FLT_MIN flush to 0), 0 at -inf and far below, inf at +inf and past 88.72, NaN kept; huge and non-finite
    inputs go through the reduction without a clamp and are replaced by the final selects."""
    special = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0, -87.33654, -87.3366, 88.72283,
                            88.7229, 1e30, -1e30, 3.4e38, -3.4e38, 1e-30, -1e-30, 127.0, -127.0, 1e9, -1e9, 0.5,
                            88.72283935546875, 88.72283172607421875, -87.33654022216796875, -87.33654785])
    x = torch.cat([special, torch.linspace(-100, 89, 400_000), torch.logspace(-8, 1.9, 20_000),
                   -torch.logspace(-8, 1.9, 20_000)])
    x = x[: x.numel() - x.numel() % 16]
    compiled, built = _compile(lambda x: torch.exp(x), [x])
    src = "\n".join(s for b in built for s in b.kernel_sources)
    assert "ember_vexpf(" in src, src
    out, ref = compiled(x), torch.exp(x)
    torch.testing.assert_close(out, ref, rtol=2.5e-7, atol=1.2e-38, equal_nan=True)
    assert out[:3].tolist()[:2] == [float("inf"), 0.0] and out[2].isnan()
    assert out[9].item() == float("inf") and out[10].item() == 0.0 and out[11].item() == float("inf")
    assert out[12].item() == 0.0 and out[17].item() == float("inf") and out[18].item() == 0.0
    # around the largest float whose exp is finite, and around FLT_MIN's log (below it: flushed to 0)
    assert out[20].item() == float("inf") and out[21].isfinite() and out[22].item() > 0 and out[23].item() == 0


def test_permuted_concatenation_runs_row_by_row_in_vector_loops() -> None:
    """The gradient of a fused qkv projection assembled from three head-split parts (one transposed): a
    pointwise node whose loads divide the flat index runs as (rows, last dim): no element divides its index
    by the row length (the flat form divided and took remainders by 192 at every element), and the row runs
    as one loop per part, conditions decided: the parts read along the row are vector loops (the transposed
    one stays scalar); values equal eager's."""
    def fn(q, k, v):
        b, h, t, d = q.shape
        parts = [q.transpose(1, 2), k.transpose(2, 3).transpose(1, 2), v.transpose(1, 2)]
        return torch.cat([p.reshape(b, t, h * d) for p in parts], -1) + 1
    q, k, v = _rn(2, 4, 32, 16), _rn(2, 4, 16, 32), _rn(2, 4, 32, 16)
    (body,) = _bodies(fn, [q, k, v])
    assert int(body.kernel.rnumel) == 192, body.kernel
    src = cpp.source(body)
    assert "192)" not in src and "% 192" not in src, src
    assert src.count("ember_vstore(") == 2 and "rindex < 128; ++rindex" in src, src
    _, built = _compile(fn, [q, k, v])
    q, k, v = _rn(2, 4, 32, 16), _rn(2, 4, 16, 32), _rn(2, 4, 32, 16)
    torch.testing.assert_close(built[0](q, k, v)[0], fn(q, k, v))


def test_graph_with_many_kernels_compiles_in_parallel_units(tmp_path, monkeypatch) -> None:
    """A graph with more than ``cpp_kernels_per_unit`` kernels per core compiles as one unit per core, the compilers
    running at once; every kernel loads from its unit and computes what eager does; a warm start runs none."""
    monkeypatch.setattr(H, "DEFAULT", dataclasses.replace(H.DEFAULT, cpp_kernels_per_unit=2))
    monkeypatch.setattr(cpp.os, "cpu_count", lambda: 2)

    def fn(x):
        return x.sum(0), x.amax(1), (x * 2).sum(), x.t().contiguous() + 1, x.softmax(0)
    bodies = _bodies(fn, [_rn(33, 65)])
    assert len(bodies) >= 3
    cold = CppCache(tmp_path)
    kernels = cpp.compile_kernels(bodies, OPTS, "g_many", cache=cold)
    assert cold.compiler_runs == 2 and len(kernels) == len(bodies)
    warm = CppCache(tmp_path)
    cpp.compile_kernels(bodies, OPTS, "g_many", cache=warm)
    assert warm.compiler_runs == 0 and warm.hits == 2
    _, built = _compile(fn, [_rn(33, 65)])
    x = _rn(33, 65)
    for i, (a, b) in enumerate(zip(built[0](x), fn(x))):
        _close(a, b, 1e-5, f"output {i}")      # the table's float32 tolerance (sums in another order)


def test_lane_folds_find_the_extreme_in_every_lane() -> None:
    """Vector max/min accumulators fold their lanes as a tree of rotations: a row's extreme at any lane (and
    any position of a 2-vector row) is found, and a NaN anywhere still wins."""
    x = _rn(64, 48)
    for i in range(64):
        x[i, i % 48] = 100.0 + i
    y = -x
    y[5, 17] = float("nan")
    _, built = _compile(lambda a, b: (a.amax(1), b.amin(1)), [x, y])
    a, b = built[0](x, y)
    torch.testing.assert_close(a, x.amax(1))
    torch.testing.assert_close(b, y.amin(1), equal_nan=True)
    assert torch.isnan(b[5]) and not torch.isnan(b[4])


def _nhwc(*shape: int) -> torch.Tensor:
    return _rn(*shape).to(memory_format=torch.channels_last)


def _column_stats(x, w):
    """Per-channel statistics of NHWC activations (a batch norm's and its gradient's reductions), a global
    average pool, column max/min and a weighted column sum."""
    vm = torch.var_mean(x, (0, 2, 3))
    return (vm[0], vm[1], x.sum((0, 2, 3)), (x * w.view(1, -1, 1, 1)).mean((0, 2, 3)),
            x.mean((2, 3)), x.amax((0, 2, 3)), x.amin((0, 2, 3)),
            F.batch_norm(x, None, None, w, None, training=True))


@pytest.mark.parametrize("shape", [(4, 8, 6, 6), (2, 8, 7, 7), (3, 4, 5, 5), (2, 16, 5, 5), (3, 40, 4, 4),
                                   (2, 32, 3, 3), (2, 3, 5, 5)])
def test_column_reductions_vectorize_across_outer_points(shape) -> None:
    """Reductions over an NHWC tensor's outer dims read each channel at a stride: C++ vectorizes them across
    channels (``cpp_colred``): blocks of a vector's width of channels (``XVec``; 40 channels: two blocks and a
    scalar tail of 8), or, with fewer channels than lanes, one interleaved run whose lanes repeat every C
    (``Flat``; 8 x 49 points per channel: a scalar tail). Values and gradients equal eager's, NaN propagates."""
    from ember.codegen.cpp import vector_width
    torch.manual_seed(0)
    n, c, h, w_ = shape
    fn = _column_stats
    x, w = _nhwc(*shape).requires_grad_(), _rn(c).requires_grad_()
    compiled, built = _compile(fn, [x, w])
    for nan in (False, True):       # with a NaN: one channel's max/min/statistics are NaN (values only)
        x2, w2 = _nhwc(*shape).requires_grad_(), _rn(c).requires_grad_()
        if nan:
            x2.data[1, c - 1, 1, 1] = float("nan")
        outs = _flat(compiled(x2, w2))
        xr, wr = x2.detach().clone().requires_grad_(), w2.detach().clone().requires_grad_()
        refs = _flat(fn(xr, wr))
        for i, (o, r) in enumerate(zip(outs, refs)):
            _close(o.detach(), r.detach(), 1e-4, f"{shape} output {i}")
        if nan:
            continue
        gs = [torch.randn_like(r) for r in refs]
        g = torch.autograd.grad(sum((o * g_).sum() for o, g_ in zip(outs, gs)), [x2, w2])
        gr = torch.autograd.grad(sum((r * g_).sum() for r, g_ in zip(refs, gs)), [xr, wr])
        for i, (a, b) in enumerate(zip(g, gr)):
            _close(a, b, 1e-3, f"{shape} grad {i}")
    src = "\n".join(s for b in built for s in b.kernel_sources)
    vw = vector_width()
    if c >= vw:
        assert "xindex += EMBER_VW" in src, src
    elif vw % c == 0 and c > 1:
        assert "outer points interleaved" in src, src


def test_per_channel_parameters_are_built_once_before_the_loop() -> None:
    """An NHWC batch norm over 8 channels (16 float lanes): ``w[x % 8]`` holds the same lanes in every step of
    the vector loop, so it and what is computed from it alone (``rsqrt(var + eps) * w``) are built once before
    the loop; with a scalar tail (rows not a multiple of the width) the values stay eager's."""
    from ember.codegen.cpp import vector_width
    fn = lambda x, w, v: torch.relu((x - 1.0) * (torch.rsqrt(v + 1e-5) * w))     # noqa: E731
    for n in (64, 67):
        ins = [_rn(n, 8), _rn(8), _rn(8).abs()]
        compiled, built = _compile(fn, ins)
        _close(_flat(compiled(*ins))[0], fn(*ins), 1e-5, "per-channel rows of 8")
    src = "\n".join(s for b in built for s in b.kernel_sources)
    if vector_width() > 8:
        head = src.split("for (int64_t xindex")[0]
        assert head.count("ember_vperiodic(") == 2 and "sqrtf(" in head, src


def test_bool_vectors_load_and_store_whole_vectors() -> None:
    """Bool inputs and outputs of vector loops (a masked softmax's mask, a comparison's result) are loaded and
    stored as whole vectors of bytes: values equal eager's, with a scalar tail (rows of 37)."""
    fn = lambda s, m: (torch.softmax(s.masked_fill(m, float("-inf")), -1), s > 0, m & (s < 1))   # noqa: E731
    s, m = _rn(64, 37), torch.rand(64, 37) > 0.7
    m[:, 0] = False
    compiled, built = _compile(fn, [s, m])
    for i, (a, b) in enumerate(zip(_flat(compiled(s, m)), fn(s, m))):
        _close(a, b, 1e-5, f"output {i}")
    src = "\n".join(x for b in built for x in b.kernel_sources)
    assert "ember_vload_mask(" in src and "ember_vstore_mask(" in src, src
