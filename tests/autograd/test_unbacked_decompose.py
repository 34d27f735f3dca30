"""Ops after a data-dependent size are decomposed to prims like any other op (issue 34 part 3).

Only the op that makes an unbacked size (``nonzero``, a boolean mask's ``index``, ``masked_select``,
``_unique2``, ``item``) stays an ATen call, so the kernel compiler fuses what follows it. The check ran on
fake tensors' ``SymInt`` sizes only: once the op before had been decomposed (its value a prim's ``TensorMeta``
with sympy sizes), every op after it looked data-dependent and stayed an ATen call: the mixture of experts
ran its GELU, products, matmuls and sums one ATen call each.

Table: every program of data_dependent_programs.py with a gradient (forward and backward), its values and
gradients equal eager's (``test_data_dependent.check``), and the ATen ops left in its graphs are only those
without a decomposition or that make a data-dependent size.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ember.decomp import MISSING
from ember.decomp.registry import has_decomposition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data_dependent_programs import PROGRAMS  # noqa: E402
from test_data_dependent import check  # noqa: E402

# ops whose result size depends on values: they stay ATen calls, the wrapper reads the size from the result
MAKES_A_SIZE = {"nonzero", "argwhere", "index", "masked_select", "_unique2", "unique_dim",
                "unique_consecutive", "_local_scalar_dense"}


@pytest.mark.parametrize("prog", [p for p in PROGRAMS if p.grad],
                         ids=lambda p: p.name)
def test_only_the_size_making_op_stays_aten(prog):
    MISSING.clear()
    check(prog, True)
    left = sorted({str(op) for op in MISSING if has_decomposition(op)
                   and op.overloadpacket.__name__ not in MAKES_A_SIZE})
    assert not left, f"{prog.name}: decomposable ATen ops left undecomposed after an unbacked size: {left}"


# Gathers and scatters whose index count is data-dependent (``x[tok]``, ``out.index_add(0, tok, h)``,
# ``w[tok, slot]``) are kernels, fused with what feeds them, not ATen calls. Boolean masks' index_put stays
# ATen (a mask with one value per selected point).
SCATTERS = ("prims.index", "prims.index_put", "prims.gather", "prims.index_select", "prims.scatter",
            "prims.scatter_add")
INDEXED = ["index_select_nonzero", "index_add_nonzero", "mask_then_gather", "moe_top2"]


@pytest.mark.parametrize("training", [False, True], ids=["infer", "train"])
@pytest.mark.parametrize("name", INDEXED)
def test_gathers_and_scatters_by_a_data_dependent_count_are_kernels(name, training):
    from ember.loopir.lower import MISSING_LOWERINGS
    prog = next(p for p in PROGRAMS if p.name == name)
    MISSING_LOWERINGS.clear()
    check(prog, training)
    left = {k: v for k, v in MISSING_LOWERINGS.items() if k in SCATTERS}
    assert not left, f"{name}: ran as ATen calls: {left}"
