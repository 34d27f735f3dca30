"""Matmuls with misaligned sizes (GPT-2's vocabulary of 50257) get zero-padded operands and 16-byte aligned
rows (ember/loopir/matmul_align.py). That lowering is for CUDA; here it is switched on for the CPU so its
values, gradients and output strides are checked against eager on every CPU backend."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import ember.heuristics as H
import torch.nn.functional as F

import ember
import ember.loopir.matmul_align as MA

from .backends import CPU_BACKENDS


def lm_head(x, w):
    return (x @ w.t()).float().log_softmax(-1)


def linear_odd(x, w, b):
    return F.linear(x, w, b)        # addmm with 13 output features: the result itself is returned


def batched(a, b):
    return torch.bmm(a, b).relu() + 1


def chain(x, w1, w2):
    return (x @ w1).tanh() @ w2     # the first result (rows of 13) feeds the second matmul


CASES = {
    "lm_head": (lm_head, [(6, 12), (37, 12)]),
    "lm_head_8_rows": (lm_head, [(8, 12), (37, 12)]),   # the weight gradient takes the padded logits' gradient
    "lm_head_3d": (lm_head, [(2, 4, 12), (37, 12)]),     # ... through a reshape of (batch, sequence) rows
    "linear_odd": (linear_odd, [(5, 12), (13, 12), (13,)]),
    "batched": (batched, [(3, 5, 7), (3, 7, 9)]),
    "chain": (chain, [(6, 10), (10, 13), (13, 3)]),
}


@pytest.fixture
def on_cpu(monkeypatch):
    monkeypatch.setattr(MA, "DEVICES", {"cuda", "cpu"})
    monkeypatch.setattr(H, "DEFAULT", dataclasses.replace(H.DEFAULT, align_min_macs=1))


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_values_grads_and_strides(case, cpu_backend, on_cpu):
    fn, shapes = CASES[case]
    g = torch.Generator().manual_seed(1)
    args = [torch.randn(s, generator=g, requires_grad=True) for s in shapes]
    ref = fn(*args)
    ct = torch.randn(ref.shape, generator=g)
    ref_g = torch.autograd.grad((ref * ct).sum(), args)
    ember.reset()
    out = ember.compile(fn, options={"cpu_backend": cpu_backend})(*args)
    got_g = torch.autograd.grad((out * ct).sum(), args)
    torch.testing.assert_close(out, ref)
    # a returned padded product keeps its aligned rows (13 float32 columns in rows of 16, 3 in rows of 4), as
    # under torch.compile; gradients have eager's strides
    assert out.stride() == {"linear_odd": (16, 1), "chain": (4, 1), "lm_head_8_rows": (37, 1),
                            "lm_head_3d": (148, 37, 1)}.get(case, ref.stride())
    for a, b in zip(got_g, ref_g):
        torch.testing.assert_close(a, b)
        assert a.stride() == b.stride()


def _source(fn, shapes, grad=False):
    from ember.autograd.aot import aot_compile
    from ember.codegen import compile_graph
    built = []

    def hook(gr, kind):
        built.append(compile_graph(gr, kind, None))
        return built[-1]
    aot_compile(torch.fx.symbolic_trace(fn), [torch.randn(s, requires_grad=grad) for s in shapes], decompose=True,
                compile_graph=hook)
    return "\n".join(b.source for b in built)


def test_misaligned_sizes_are_padded(on_cpu):
    src = _source(*CASES["chain"])
    assert "empty_strided((12, 16)" in src, src     # w1 (10 x 13): K and N padded to 12 and 16 float32s
    assert "restride(buf2, (6, 16)" in src, src     # the first product has rows of 16


def test_cpu_default_is_unchanged():
    src = _source(*CASES["chain"])
    assert "(12, 16)" not in src and "(6, 16)" not in src, src


def test_transposed_operand_is_padded_in_its_own_order(on_cpu):
    src = _source(*CASES["lm_head"])     # x @ w.t(), w (37 x 12): w.t() padded to 40 columns, stored as w is
    fwd = src.split("def backward")[0]
    assert "empty_strided((40, 12), (12, 1)" in fwd and "(12, 40), (1, 12)" in fwd or \
        "empty_strided((12, 40), (1, 12)" in fwd, fwd       # allocated as the view the matmul takes
    assert "(12, 40), (40, 1)" not in fwd, fwd


@pytest.mark.parametrize("case", ["lm_head_8_rows", "lm_head_3d"])
def test_gradient_of_logits_is_stored_once_padded(case, on_cpu):
    """The logits' gradient feeds both gradient matmuls (one through a transpose): one kernel stores it with
    zero-padded rows of 40, and both matmuls take views of that buffer (no copy, no second padded store)."""
    src = _source(*CASES[case], grad=True)
    bwd = src.split("def backward")[1]
    assert bwd.count("empty_strided((8, 40), (40, 1)") + bwd.count("empty_strided((2, 4, 40), (160, 40, 1)") == 1, bwd
    assert "copy" not in bwd and "empty_strided((37, 8)" not in bwd and "as_strided(buf1, (37, 8), (1, 40)" in bwd, bwd


def test_float32_computed_right_operand_is_written_row_major(on_cpu):
    """Attention's scores in float32 (keys cast up, then transposed): the cast's kernel writes the keys'
    transpose row-major, as cuBLAS's float32 kernels take it faster; a bf16 product, or a right operand that
    is an input's transposed view (which would need a copy), keep their layouts. Values equal eager's."""
    def scores(q, k):
        return torch.bmm(q.float(), k.float().transpose(1, 2)).softmax(-1)

    def scores_bf16(q, k):
        return torch.bmm(q, k.transpose(1, 2)).float().softmax(-1)

    def scores_input(q, k):
        return torch.bmm(q, k.transpose(1, 2)).softmax(-1)
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(6, 32, 16, generator=g).bfloat16() for _ in range(2))
    for fn, args, row_major in ((scores, (q, k), True), (scores_bf16, (q, k), False),
                                (scores_input, (q.float(), k.float()), False)):
        ember.reset()
        torch.testing.assert_close(ember.compile(fn)(*args), fn(*args), atol=1e-2 if fn is scores_bf16 else 1e-5,
                                   rtol=1e-2 if fn is scores_bf16 else 1e-5)
        src = _source_of(fn, args)
        assert ("empty_strided((6, 16, 32), (512, 32, 1)" in src) == row_major, src


def _source_of(fn, args):
    from ember.autograd.aot import aot_compile
    from ember.codegen import compile_graph
    built = []

    def hook(gr, kind):
        built.append(compile_graph(gr, kind, None))
        return built[-1]
    aot_compile(torch.fx.symbolic_trace(fn), list(args), decompose=True, compile_graph=hook)
    return "\n".join(b.source for b in built)
