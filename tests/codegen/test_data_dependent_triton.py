"""Data-dependent shapes (tests/autograd/data_dependent_programs.py) on ember's Triton kernels, run by Triton's
interpreter on CPU tensors (``cpu_backend="triton"``; tests/codegen/conftest.py sets TRITON_INTERPRET): values
and gradients equal eager for random, all-false and all-true masks, one graph, no fallback, and the graphs run
on the kernels (the unbacked sizes are plain int arguments of the Triton kernels)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "autograd"))
from data_dependent_programs import PROGRAMS  # noqa: E402
from test_data_dependent import cases, check  # noqa: E402

# a sample of the table (the interpreter is slow): each data-dependent op once, forward and backward
SAMPLE = ["mask_get", "nonzero_2d_plus", "masked_select_bcast", "unique_counts", "item_arange",
          "index_select_nonzero", "index_add_nonzero", "moe_top2"]


@pytest.mark.parametrize("prog, training", cases([p for p in PROGRAMS if p.name in SAMPLE]))
def test_program_on_triton(prog, training):
    stats = check(prog, training, options={"cpu_backend": "triton"})
    assert not stats["eager_hints"], stats["eager_hints"]
