"""Triton backend: compiled graphs (values and gradients) equal eager PyTorch.

Every case goes through ``aot_compile(..., decompose=True)`` with the Triton kernel backend: here CPU tensors
under Triton's interpreter (``cpu_backend="triton"``; tests/codegen/conftest.py sets TRITON_INTERPRET), and
in tests/gpu/test_ember_triton.py the same table on CUDA in float32 and bfloat16. A case passes only if every
final graph was turned into Triton kernels (no silent FX or eager fallback).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import math
from collections.abc import Callable
from typing import Any

import pytest
import sympy
import torch
import torch.nn.functional as F

import ember.heuristics as H
from ember import codegen
from ember.autograd.aot import aot_compile
from ember.codegen.wrapper import CompiledGraph
from ember.options import CompileOptions

HAVE_TRITON = importlib.util.find_spec("triton") is not None


def _interpreting() -> bool:
    if not HAVE_TRITON:
        return False
    from ember.codegen.triton_helpers import interpreting
    return interpreting()


pytestmark = [
    pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed (pip install triton)"),
    pytest.mark.skipif(HAVE_TRITON and torch.cuda.is_available(),
                       reason="CUDA machine: Triton compiles here; tests/gpu/test_ember_triton.py runs this table"),
]

from tests.codegen.inputs import (_distinct_rows, _ints, _rms, _rn, _special_rows, _stats_rows,  # noqa: E402
                                  _with_nans)

OPTS = CompileOptions(cpu_backend="triton")


# -- the table (shared with tests/gpu/test_ember_triton.py) --------------------------------------------------------


def _ce(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(x, t)


# name: (fn, inputs factory, train, tolerance, float_only). float_only: the case is about float32 (or fixed
# dtypes) and is not rerun in bfloat16 on the GPU.
CASES: dict[str, tuple[Callable, Callable[[], list], bool, float, bool]] = {
    "pointwise_chain": (lambda x: (x.sin() * torch.exp(-x) + x.abs().sqrt()).tanh() * 2 - 1,
                        lambda: [_rn(37, 29)], True, 1e-5, False),
    "broadcast": (lambda x, y, z: ((x * y + 1).sin() / (z.exp() + 1)).tanh(),
                  lambda: [_rn(33, 65), _rn(65), _rn(33, 1)], True, 1e-5, False),
    "softmax": (lambda x: torch.softmax(x, -1), lambda: [_rn(37, 129)], True, 1e-5, False),
    "softmax_dim0": (lambda x: torch.softmax(x, 0), lambda: [_rn(37, 20)], True, 1e-5, False),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), lambda: [_rn(16, 100)], True, 1e-5, False),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (64,), w, b), lambda: [_rn(17, 64), _rn(64), _rn(64)], True,
                   1e-4, False),
    "rms_norm": (_rms, lambda: [_rn(9, 96), _rn(96)], True, 1e-4, False),
    "var_mean": (lambda x: torch.var_mean(x, dim=1), lambda: [_rn(12, 50)], True, 1e-4, False),
    # Welford's M2 (ember.loopir.welford): rows held whole and looped, columns, NCHW batch statistics, a single
    # point, rows with NaN/inf/constant/offset values; long rows split on CUDA (20000: into chunks of whole
    # points; 20011, prime: shifted sums)
    "welford": (lambda r, c, b, p, q: (torch.var_mean(r, 1)[0], torch.var_mean(r, 1)[1], torch.std(r, 1),
                                       torch.var(c, 0), torch.var_mean(b, (0, 2, 3), correction=0)[0],
                                       torch.mean(b, (0, 2, 3)), torch.std_mean(p, 1)[0], torch.mean(p, 1),
                                       torch.var(q, 1), torch.var(r[:, :1], 1, correction=0)),
                lambda: [_stats_rows(6, 50), _rn(3000, 6), _rn(4, 3, 5, 7), _stats_rows(5, 20000),
                         _stats_rows(4, 20011)], False, 1e-4, True),
    "norms_train": (lambda x, w, b, g: (F.batch_norm(x, None, None, w, b, training=True), F.group_norm(g, 2, w[:4]),
                                        F.instance_norm(g)),
                    lambda: [_rn(4, 6, 5, 7), _rn(6), _rn(6), _rn(3, 4, 9)], True, 1e-4, True),
    "gelu_silu": (lambda x: F.gelu(x) + F.gelu(x * 0.5, approximate="tanh") + F.silu(x), lambda: [_rn(70, 33)],
                  True, 1e-5, False),
    "reductions_inner_outer_all": (lambda x: (x.sum(0), x.sum(-1), x.sum(), x.amax(1), x.amin(0),
                                              x.mean((0, 2)), (x * 0.1 + 1).prod(2)),
                                   lambda: [_rn(6, 7, 40)], True, 1e-4, False),
    "pad": (lambda x: (F.pad(x, (1, 2, 3, 0)) + 1, F.pad(x, (0, 3), value=-1.5).exp()), lambda: [_rn(6, 10)],
            False, 1e-6, False),
    "cat_slice_views": (lambda x, y: (torch.cat([x, y.t()], 1) * 2, x[:, 1::2].exp(), x.t().contiguous() * 3,
                                      x.reshape(4, 4, 10).permute(2, 0, 1) - 1, x[3:9, 2:7].sum(1)),
                        lambda: [_rn(16, 10), _rn(5, 16)], True, 1e-5, False),
    "casts": (lambda x: ((x.bfloat16() * 2 + 1).float(), x.to(torch.int32), (x > 0.5).float(),
                         torch.softmax(x.bfloat16(), -1), x.half() * 3, x.double().exp(), x.to(torch.int8),
                         (x * 100).to(torch.int64), x.bool(), (x > 0).to(torch.int32).sum(1)),
              lambda: [_rn(11, 40) * 4], False, 1e-2, True),
    "bf16_inputs": (lambda x, y: (x * y + 1, torch.softmax(x, -1), (x.float() * 2).sum(-1), x.sum(0)),
                    lambda: [_rn(12, 33, dtype=torch.bfloat16), _rn(12, 33, dtype=torch.bfloat16)], True, 2e-2,
                    True),
    "where_masks": (lambda x, y: (torch.where(x > 0, x, y * 2) + torch.where(y < 0, 1.0, x),
                                  x.masked_fill(x < -0.5, 0.25), F.relu(x) * y),
                    lambda: [_rn(8, 9), _rn(8, 9)], True, 1e-5, False),
    "int_ops": (lambda a, b: (a // b, a % b, a / b, torch.div(a, b, rounding_mode="trunc"), torch.fmod(a, b),
                              a << 3, a >> 2, a & b, a | b, a ^ b, ~a, a * b - a, torch.maximum(a, b),
                              a.abs(), a.sign(), a.sum(1), a.amax(0), a.amin(1), a.pow(2), (a > b).sum()),
                lambda: [_ints(9, 13), _ints(9, 13, nonzero=True)], False, 0, True),
    "int32_ops": (lambda a, b: (a // b, a % b, a * 3 + b, a.sum(0)),
                  lambda: [_ints(7, 5).int(), _ints(7, 5, nonzero=True).int()], False, 0, True),
    "float_division": (lambda a, b: (a // b, a % b, torch.fmod(a, b), torch.remainder(a, -b), a / b),
                       lambda: [_rn(9, 13) * 10, _rn(9, 13)], False, 1e-5, True),
    "nan_propagation": (lambda x: (x.amax(1), x.amin(0), x.amax(), torch.maximum(x, torch.zeros_like(x)),
                                   torch.minimum(x, x.flip(0)), x.isnan(), torch.nan_to_num(x), x.isinf(),
                                   x.isfinite()),
                        lambda: [_with_nans(6, 5)], False, 1e-6, True),
    "bool_any_all": (lambda x: ((x > 0).any(1), (x > -3).all(0), (x > 0).logical_xor(x < 1), ~(x > 0),
                                (x > 0).logical_and(x < 1), (x > 0).logical_or(x < -1), (x > 2).any()),
                     lambda: [_rn(10, 20)], False, 0, True),
    "math": (lambda x, y: (torch.erfinv(x.clamp(-0.99, 0.99)), torch.digamma(y.abs() + 0.1), torch.lgamma(y),
                           torch.log1p(x.abs()), torch.expm1(x), torch.atan2(x, y), torch.sigmoid(x), x.floor(),
                           x.ceil(), (x * 4).round(), x.trunc(), x.sign(), torch.hypot(x, y), x.exp2(),
                           x.log2().abs(), torch.asinh(x), torch.rsqrt(x.abs() + 1), x.reciprocal(),
                           x.pow(y.abs()), torch.erf(x), torch.erfc(x), torch.tan(x * 0.3), torch.asin(x * 0.2),
                           torch.acos(x * 0.2), torch.atan(x), torch.sinh(x), torch.cosh(x), torch.atanh(x * 0.2),
                           torch.acosh(x.abs() + 1), x.log10().abs(), torch.copysign(x, y), torch.cos(x),
                           torch.digamma(-y.abs() - 0.5)),
             lambda: [_rn(20, 33), _rn(20, 33) * 3], False, 1e-4, True),
    "iota": (lambda x: (x + torch.arange(8, dtype=torch.float32, device=x.device),
                        torch.arange(24, device=x.device).view(3, 8) * x.sum()),
             lambda: [_rn(3, 8)], False, 1e-5, True),
    "cross_entropy": (_ce, lambda: [_rn(16, 100), torch.randint(0, 100, (16,))], True, 1e-4, False),
    "float64": (lambda x, w: torch.softmax(x * w, -1) + x.cos(),
                lambda: [_rn(5, 30, dtype=torch.float64), _rn(30, dtype=torch.float64)], True, 1e-10, True),
    "uneven_sizes": (lambda x: (x * 2 + 1, x.sum(1), torch.softmax(x, 0)), lambda: [_rn(1031, 3)], True, 1e-4,
                     False),
    "looped_inner": (lambda x: (torch.softmax(x, -1), x.sum(-1), x.amax(-1), torch.log_softmax(x, -1).sum(0)),
                     lambda: [_rn(3, 9000)], True, 1e-4, False),
    "looped_outer": (lambda x: (x.sum(0), x.amin(0), (x * x).mean(0)), lambda: [_rn(5000, 6)], True, 1e-3, False),
    "looped_full": (lambda x: (x.sum(), x.abs().amax(), (x * x).mean()), lambda: [_rn(30000)], True, 1e-3, False),
    "tiny": (lambda x, y: (x * y + 2, (x - y).abs().sum()), lambda: [_rn(1), torch.randn(())], True, 1e-6, False),
    # looped (online) softmax over rows with -inf, inf and NaN: the same values as eager's two passes
    "looped_softmax_special": (lambda x: (torch.softmax(x, -1), torch.log_softmax(x, -1), torch.logsumexp(x, -1)),
                               lambda: [_special_rows(6, 9000)], False, 1e-4, True),
    "looped_cross_entropy": (_ce, lambda: [_rn(6, 20000) * 3, torch.randint(0, 20000, (6,))], True, 1e-4, False),
    # an LM head over an odd vocabulary (on CUDA: zero-padded to aligned sizes, ember/loopir/matmul_align.py)
    "odd_vocab_head": (lambda x, w, t: (x @ w.t(), F.cross_entropy((x @ w.t()).float(), t)),
                       lambda: [_rn(16, 64), _rn(2051, 64) * 0.1, torch.randint(0, 2051, (16,))], True, 1e-4,
                       False),
    # log_sigmoid_forward returns an empty buffer on CUDA and a full one on the CPU: decomposed, no buffer is used;
    # a 0-d input's scalar load meets a block in minimum()
    "logsigmoid": (lambda x, s: (F.logsigmoid(x * 10), F.logsigmoid(s)), lambda: [_rn(9, 40), torch.randn(())],
                   True, 1e-5, False),
    # argmax/argmin as two fused reductions: NaN rows (the first NaN wins), ties (the first index wins), long
    # rows (looped, or split on CUDA), integer inputs
    "argmax_argmin": (lambda a, t, l, i: (a.argmax(1), a.argmin(0), a.argmax(), t.argmax(1), t.argmin(0),
                                       torch.max(t, 1)[1], torch.min(l, 1)[0], torch.min(l, 1)[1],
                                       l.argmax(1, keepdim=True), l.argmin(), i.argmax(0), i.argmin(1)),
                      lambda: [_with_nans(6, 5), torch.randint(0, 3, (9, 40)).float(), _rn(4, 5000), _ints(9, 13)], False, 1e-6, True),
    # reductions over a zero-size dim (OpInfo's linear with no rows: its bias gradient sums nothing): every lane
    # is masked, the result is the identity
    "zero_size_reductions": (lambda x, w, b: (F.linear(x, w, b), x.sum(0), (x + 1).prod(0), (x > 0).any(0),
                                              x.amax(1)),
                             lambda: [_rn(0, 3), _rn(4, 3), _rn(4)], True, 1e-5, True),
    # inputs that are views with a storage offset (kernels index from the tensor's own data pointer)
    # scatters (ember.loopir.scatter): atomic adds, plain stores at loaded positions, and their backwards (the
    # gradient of a scatter's input is itself a scatter of zeros; the embedding's is a scatter-add)
    "scatter_ops": (lambda x, i, j, s: (torch.scatter_add(x, 1, i, s) * 2, torch.scatter(x, 0, j, s[:3]) + 1),
                    lambda: [_rn(6, 40), torch.randint(0, 40, (6, 25)), _distinct_rows(6, 3, 25), _rn(6, 25)],
                    True, 1e-5, False),
    "index_put_accumulate": (lambda x, i, k, v: (x.index_put((i,), v, accumulate=True) * 3,
                                                 x.index_put((k,), v[:5]).exp()),
                             lambda: [_rn(20, 8), torch.randint(-20, 20, (30,)), torch.randperm(20)[:5] - 10,
                                      _rn(30, 8)], True, 1e-5, False),
    "scatter_counts": (lambda i, x: (torch.zeros(7, dtype=torch.int64, device=i.device).scatter_add(
                           0, i, torch.ones_like(i)), x.index_put((i,), torch.ones((), device=x.device),
                                                                   accumulate=True)),
                       lambda: [torch.randint(0, 7, (40,)), _rn(7)], False, 1e-5, True),
    "embedding_backward": (lambda w, i: F.embedding(i, w, padding_idx=2).sin(),
                           lambda: [_rn(30, 16), torch.randint(0, 30, (7, 9))], True, 1e-5, False),
    "offset_inputs": (lambda x, t, w: (F.cross_entropy(x, t), x.exp() @ w.t(), x.t()[1:] * 2),
                      lambda: [_rn(12, 40)[4:], torch.randint(0, 40, (12,))[4:], _rn(8, 60)[2:, 10:50]],
                      True, 1e-4, True),
}


# -- the differential check ---------------------------------------------------------------------------------
def compile_case(fn: Callable, inputs: list, opts: Any = OPTS) -> tuple[Callable, list]:
    gm = torch.fx.symbolic_trace(fn)
    built: list = []

    def compile_graph(g: Any, kind: str) -> Any:
        out = codegen.compile_graph(g, kind, opts)
        built.append(out)
        return out
    return aot_compile(gm, inputs, decompose=True, compile_graph=compile_graph), built


def _flat(out: Any) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def close(a: torch.Tensor, b: torch.Tensor, tol: float, what: str) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, (what, a.dtype, b.dtype, a.shape, b.shape)
    if tol == 0 or not a.dtype.is_floating_point:
        assert torch.equal(a, b), f"{what}: {a} vs {b}"
    else:
        torch.testing.assert_close(a, b, rtol=tol, atol=tol, equal_nan=True, msg=lambda m: f"{what}: {m}")


def check_case(name: str, device: str = "cpu", dtype: torch.dtype | None = None, opts: Any = OPTS,
               tol: float | None = None, grad_tol: float | None = None) -> None:
    """Compile case ``name`` (inputs on ``device``; float32 inputs converted to ``dtype``), compare outputs and
    (for training cases) gradients with eager on fresh inputs."""
    fn, make, train, case_tol, _ = CASES[name]
    tol = case_tol if tol is None else tol
    grad_tol = tol * 10 if grad_tol is None else grad_tol

    def fresh_inputs() -> list:
        ts = make()
        return [t.to(device=device, dtype=dtype) if dtype is not None and t.dtype == torch.float32 else
                t.to(device) for t in ts]
    torch.manual_seed(0)
    inputs = fresh_inputs()
    differentiable = [t.is_floating_point() for t in inputs]
    if train:
        inputs = [t.requires_grad_(d) for t, d in zip(inputs, differentiable)]
    compiled, built = compile_case(fn, inputs, opts)
    fresh = [t.requires_grad_(train and d) for t, d in zip(fresh_inputs(), differentiable)]
    outs = _flat(compiled(*fresh))
    assert built and all(isinstance(b, CompiledGraph) for b in built), f"{name}: not compiled to kernels: {built}"
    assert any("@triton.jit" in s for b in built for s in b.kernel_sources), f"{name}: no Triton kernel ran"
    ref_in = [t.detach().clone().requires_grad_(t.requires_grad) for t in fresh]
    refs = _flat(fn(*ref_in))
    assert len(outs) == len(refs)
    for i, (o, r) in enumerate(zip(outs, refs)):
        close(o.detach(), r.detach(), tol, f"{name} output {i}")
    if train:
        diff_in = [(a, b) for a, b in zip(fresh, ref_in) if a.requires_grad]
        pairs = [(o, r) for o, r in zip(outs, refs) if r.requires_grad]
        ws = [torch.randn_like(r) for _, r in pairs]
        g = torch.autograd.grad(sum((o * w).sum() for (o, _), w in zip(pairs, ws)), [a for a, _ in diff_in])
        gr = torch.autograd.grad(sum((r * w).sum() for (_, r), w in zip(pairs, ws)), [b for _, b in diff_in])
        assert len(built) >= 2, f"{name}: no backward graph compiled"
        for i, (a, b) in enumerate(zip(g, gr)):
            close(a, b, grad_tol, f"{name} grad {i}")


@pytest.mark.parametrize("name", list(CASES))
def test_matches_eager(name: str) -> None:
    assert _interpreting(), "triton was imported before tests/codegen/conftest.py set TRITON_INTERPRET=1"
    check_case(name)


# -- generated code ---------------------------------------------------------------------------------------------
def _sources(fn: Callable, inputs: list) -> str:
    _, built = compile_case(fn, inputs)
    return "\n".join(s for b in built for s in b.kernel_sources)


def test_source_names_fused_prims_and_picks_reduction_kind() -> None:
    src = _sources(lambda x: (x.exp() + 1).sum(-1), [_rn(4, 8)])
    assert "# fuses: " in src and "sum" in src and "exp" in src and "@triton.jit" in src
    assert "persistent" in src and "for roffset" not in src and "xmask" not in src   # 4 rows x 8: no masks
    src = _sources(lambda x: x.sum(-1), [_rn(3, 9000)])
    assert "looped" in src and "for roffset in range(0, 9000, " in src and "rmask" in src
    src = _sources(lambda x: x * 2, [_rn(1000)])
    assert "xmask = xindex < 1000" in src and "tl.arange(0, 1024)" in src


def test_per_channel_reduction_over_nchw_planes_reads_rows_in_memory_order() -> None:
    """A batch norm's statistics over an NCHW tensor reduce each channel over N planes of H*W adjacent points:
    the row is contiguous in runs of H*W, so it gets the inner-reduction tile (one row per program, a wide
    RBLOCK), not the outer one (a 64x64 tile over 64 rows, few programs, strided loads)."""
    from ember.codegen.triton_gen import inner_reduction
    from ember.loopir.indexing import RINDEX, XINDEX
    src = _sources(lambda x: (x.sum((0, 2, 3)), ((x - 1) ** 2).sum((0, 2, 3))), [_rn(4, 3, 20, 20)])
    assert "XBLOCK=1 " in src or "XBLOCK=2 " in src, src
    plane = 112 * sympy.Mod(sympy.floor(RINDEX / 112), 112) + sympy.Mod(RINDEX, 112) + 12544 * XINDEX
    assert inner_reduction([plane])
    assert not inner_reduction([64 * RINDEX + XINDEX])                # NHWC: the channel is the contiguous dim
    assert not inner_reduction([sympy.Mod(RINDEX, 4) + 4 * XINDEX])   # runs of 4: too short to count


def test_pointwise_stays_out_of_an_outer_reduction() -> None:
    """``x * 2`` over the same points as ``x.sum(0)`` would sit on the reduction's [x, r] by its flat index,
    reading along rindex while the reduction reads along xindex (its kept dim is the contiguous one): such joined
    kernels ran at 40% of the bandwidth of the others on an H100 (a ResNet's batch-norm backward), and as strided
    scalar loops on the CPU. It runs in a kernel of its own; the sum takes the outer 64-wide tile."""
    src = _sources(lambda x: (x * 2, x.sum(0)), [_rn(300, 40)])
    assert "fuses: buf0=sum" in src and "fuses: buf1=mul" in src and "looped XBLOCK=64 RBLOCK=64" in src, src


def test_column_sum_with_per_row_statistics_takes_the_outer_tile() -> None:
    """A LayerNorm's weight gradient sums ``g * (x - mean[r]) * rstd[r]`` over rows: its big loads are contiguous
    in the kept dim, the per-row statistics in the reduced one. The statistics are the same for every column of
    a tile, so they do not decide: the outer tile (64 columns per program, coalesced), not one column per program
    reading a strided column. In BERT's training on the H100 the column-per-program kernel took 94-139 us for
    4096x768, three times a coalesced read. The split of such sums on CUDA uses the same rule."""
    from ember.codegen.triton_gen import inner_reduction
    from ember.loopir.indexing import RINDEX, XINDEX
    from ember.loopir.lowerings import _kept_dim_contiguous
    from ember.loopir.expr import Load, Op
    fn = lambda g, x, mean, rstd: (g * (x - mean[:, None]) * rstd[:, None]).sum(0)      # noqa: E731
    ins = [_rn(300, 40), _rn(300, 40), _rn(300), _rn(300).abs()]
    src = _sources(fn, ins)
    assert "looped XBLOCK=64 RBLOCK=64" in src, src
    assert not inner_reduction([768 * RINDEX + XINDEX, RINDEX, 768 * RINDEX + XINDEX])
    assert inner_reduction([RINDEX + 768 * XINDEX, RINDEX])
    x0, r0 = sympy.Symbol("x0"), sympy.Symbol("r0")
    body = Op("mul", (Load("g", 40 * r0 + x0, torch.float32), Load("m", r0, torch.float32)), torch.float32)
    assert _kept_dim_contiguous(body, [x0], [r0])
    compiled, _ = compile_case(fn, ins)
    for a, b in zip(_flat(compiled(*ins)), _flat(fn(*ins))):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_low_precision_computes_in_float32() -> None:
    src = _sources(lambda x: x.exp() * 2, [_rn(64, dtype=torch.bfloat16)])
    assert ".to(tl.float32)" in src and ".to(tl.bfloat16)" in src


def test_int64_indexing_only_when_needed() -> None:
    from ember.codegen.triton_ops import needs_int64
    from ember.loopir.indexing import RINDEX, XINDEX
    small = {XINDEX: 1024, RINDEX: 1024}
    assert not needs_int64([XINDEX * 1024 + RINDEX], small)
    assert needs_int64([XINDEX * 2 ** 22 + RINDEX], small)
    assert needs_int64([sympy.Integer(0)], {XINDEX: 2 ** 31, RINDEX: 1})
    assert not needs_int64([sympy.floor(XINDEX * 2 ** 20 / 3) % 7], {XINDEX: 1000, RINDEX: 1})


def test_gathered_index_is_bounded_by_its_dimension() -> None:
    """An address that depends on a loaded index (embedding, gather, a pooling backward's windows) is bounded
    by the indexed dimension's size: a small table does not make the kernel 64-bit; a huge one does."""
    from ember.codegen.triton_gen import index_ranges
    from ember.codegen.triton_ops import needs_int64
    from ember.loopir.expr import bound_symbol

    def emb(w, i):
        return F.embedding(i, w) * 2
    src = _sources(emb, [_rn(50, 16), torch.randint(0, 50, (4, 7))])
    assert " int64" not in src.split("@triton.jit")[0], src
    body = _bodies(emb, [_rn(50, 16), torch.randint(0, 50, (4, 7))])[0]
    (var, extent), = body.extents.items()
    assert extent == 50 and index_ranges(body)[bound_symbol(var)] == 50
    assert needs_int64([bound_symbol("tmp0") * 2 ** 20], {bound_symbol("tmp0"): 2 ** 12})


def test_only_arguments_the_wrapper_did_not_allocate_are_checked_for_alignment() -> None:
    """A kernel is specialized on which pointers are 16-byte aligned: the graph's inputs may be views at any
    offset, so their alignment is checked per call; the buffers the wrapper allocates are always aligned."""
    from ember.codegen.triton import TritonKernel
    _, built = compile_case(lambda x: ((x * 2).exp() + 1).sum(-1) * x[:, 0], [_rn(8, 33)])
    kernels = [v for b in built for v in b.__globals__.values() if isinstance(v, TritonKernel)]
    assert kernels and all(k.checked is not None for k in kernels)
    src = "\n".join(b.source for b in built)
    for k in kernels:
        call = next(ln for ln in src.splitlines() if f" {k.name}_" in ln or f"({k.name}_" in ln)
        names = call.split("#")[0].rstrip().rsplit("(", 1)[1].rstrip(")").split(", ")
        assert [names[i] for i in k.checked] == [n for n in names if n.startswith("arg")], (call, k.checked)


def test_aligned_calls_launch_through_the_rebound_launcher() -> None:
    """The wrapper checks the alignment of the inputs kernels take once per call (``_aligned``): when all are
    aligned, a kernel launches through a name its first such call rebinds to its launcher; a misaligned input
    (a view at a 4-byte offset) takes the kernel's checked path. Either order, every call is right."""
    from ember.codegen.wrapper import FirstLaunch

    def f(x, y):
        return (x * 2).exp() + y, (x + y).sum(-1)
    base = _rn(8 * 33 + 1)
    views = {"aligned": base[:-1].view(8, 33), "offset": base[1:].view(8, 33)}
    for order in (("offset", "aligned", "offset"), ("aligned", "offset", "aligned")):
        y = _rn(8, 33)
        compiled, built = compile_case(f, [views[order[0]], y])
        (wrapper,) = built
        assert "_aligned = not ((" in wrapper.source and "a if _aligned else " in wrapper.source, wrapper.source
        firsts = [k for k, v in wrapper.__globals__.items() if isinstance(v, FirstLaunch)]
        assert firsts
        for i, which in enumerate(order):
            x = views[which]
            for o, r in zip(compiled(x, y), f(x, y)):
                close(o, r, 1e-5, which)
            rebound = [k for k in firsts if not isinstance(wrapper.__globals__[k], FirstLaunch)]
            seen_aligned = "aligned" in order[:i + 1]
            assert len(rebound) == (len(firsts) if seen_aligned else 0), (order, which)


def test_index_printer_python_semantics_for_negative_dividends() -> None:
    from ember.codegen.triton_ops import IndexPrinter
    from ember.loopir.indexing import XINDEX
    p = IndexPrinter({XINDEX: 10})
    assert p(sympy.floor(XINDEX / 4)) == "(xindex // 4)"
    assert "_h.floordiv_int" in p(sympy.floor((XINDEX - 3) / 4))
    assert "_h.remainder_int" in p(sympy.Mod(3 - XINDEX, 4))


def test_disk_cache_written_and_reused(tmp_path, monkeypatch) -> None:
    from ember.codegen import triton_modules as tb
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    src = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
           f"def k(p):\n    tl.store(p + tl.arange(0, 4), tl.arange(0, 4) * {math.pi})\n")
    monkeypatch.setattr(tb, "_MODULES", {})
    mod = tb.load_module(src)
    files = list((tmp_path / "triton").glob("k*.py"))
    assert len(files) == 1 and files[0].read_text() == src
    out = torch.zeros(4)
    mod.k[(1,)](out)
    torch.testing.assert_close(out, torch.arange(4) * math.pi)
    assert tb.load_module(src) is mod                       # same process: no re-import
    monkeypatch.setattr(tb, "_MODULES", {})
    assert tb.load_module(src) is not mod and list((tmp_path / "triton").glob("k*.py")) == files


def _bodies(fn: Callable, inputs: list) -> list:
    from ember.codegen.triton import persistent
    from ember.loopir.kernel import kernel_body
    from ember.loopir.lower import lower
    from ember.loopir.schedule import Kernel, schedule
    graphs: list = []
    aot_compile(torch.fx.symbolic_trace(fn), inputs, decompose=True, compile_graph=lambda g, k: graphs.append(g) or g)
    sched = schedule(lower(graphs[0], "g"))
    return [kernel_body(s, persistent=persistent(s)) for s in sched.steps if isinstance(s, Kernel)]


def test_cpu_kernels_need_interpreter(monkeypatch) -> None:
    from ember.codegen import triton as tb
    from ember.codegen import triton_helpers
    (body,) = _bodies(lambda x: x + 1, [_rn(3)])
    monkeypatch.setattr(triton_helpers, "interpreting", lambda: False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        tb.compile_kernel(body, OPTS)


def test_kernel_callable_direct() -> None:
    from ember.codegen import triton as tb
    (body,) = _bodies(lambda x: torch.softmax(x, -1), [_rn(5, 300)])
    k = tb.compile_kernel(body, OPTS)
    x, out = _rn(5, 300), torch.empty(5, 300)
    k(*[x if role == "in" else out for _, role in body.buffers.values()])
    torch.testing.assert_close(out, torch.softmax(x, -1))
    assert tb.source(body) == k.source and "(p0, p1):" in k.source and "# parameters: p0=arg0, p1=" in k.source


def test_looped_cross_entropy_reads_each_row_once() -> None:
    """Max and sum of exp over a long row come from one loop (online softmax), not two; both fold the one
    value loaded per point, into a running max and sum per row (``[XBLOCK, 1]``): per step the block's max, one
    exp per point and one to rescale the row's sum."""
    src = _sources(_ce, [_rn(4, 20000), torch.randint(0, 20000, (4,))])
    head = next(k for k in src.split("@triton.jit") if "for roffset" in k)
    assert head.count("for roffset") == 1, src
    assert head.count("tl.load(") == 3, head      # the target, its logit, and the row
    loop = head.split("for roffset")[1]
    assert loop.count("tl.exp(") == 2 and "tl.reduce(" in loop, head
    assert 'acc0 = tl.full([1, 1], float("-inf"), tl.float32)' in head, head      # the running max: one per row


def test_many_long_rows_take_a_row_per_program(monkeypatch) -> None:
    """Looped inner reductions over many long rows (cross-entropy over a large vocabulary) run a row per
    program, 4096 points per step (thresholds lowered here so the interpreter runs it quickly): the row's tail
    is masked and the values stay eager's."""
    from ember.codegen import triton_gen
    monkeypatch.setattr(H, "DEFAULT", dataclasses.replace(H.DEFAULT, triton_wide_rows_min_x=4,
                                                          triton_wide_rows_min_r=1000))
    x, t = _rn(6, 5000), torch.randint(0, 5000, (6,))
    src = _sources(_ce, [x, t])
    assert "looped XBLOCK=1 RBLOCK=4096 num_warps=8" in src, src
    compiled, _ = compile_case(_ce, [x, t])
    torch.testing.assert_close(compiled(x, t), _ce(x, t), rtol=1e-5, atol=1e-5)
