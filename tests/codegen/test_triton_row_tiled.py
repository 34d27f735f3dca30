"""Row-tiled pointwise kernels and zero-padded matmul operands under Triton's interpreter (CUDA runs them by
default; here both are switched on for CPU tensors): the GPU test of cross-entropy over an odd vocabulary,
on CPU tensors."""

import dataclasses

import ember.heuristics as H
import ember.loopir.matmul_align as MA
import ember.loopir.schedule as S
from tests.codegen.inputs import INTERPRETED as _interpreted


@_interpreted
def test_cross_entropy_over_odd_vocab_is_row_tiled_and_padded(monkeypatch):
    from tests.gpu.test_ember_triton import check_odd_vocab_cross_entropy
    monkeypatch.setattr(S, "ROW_TILED_DEVICES", {"cuda", "cpu"})
    monkeypatch.setattr(MA, "DEVICES", {"cuda", "cpu"})
    monkeypatch.setattr(H, "DEFAULT", dataclasses.replace(H.DEFAULT, row_tiled_min=64, align_min_macs=1))
    check_odd_vocab_cross_entropy(16, 1001, "cpu")      # a persistent row
    check_odd_vocab_cross_entropy(16, 5001, "cpu")      # a looped one
