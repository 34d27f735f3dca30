"""The dynamic-shapes program table (tests/dynamic_programs.py) on ember's Triton kernels, run by Triton's
interpreter on CPU tensors (``cpu_backend="triton"``; tests/codegen/conftest.py sets TRITON_INTERPRET): outputs
and gradients equal eager, graph counts at most torch.compile's, no fallback to eager."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "autograd"))
from dynamic_programs import PROGRAMS, torch_graph_count  # noqa: E402
from test_dynamic_table import run  # noqa: E402


@pytest.mark.parametrize("training", [False, True], ids=["infer", "train"])
@pytest.mark.parametrize("prog", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_program_on_triton(prog, training):
    stats = run(prog, "ember", training, options={"cpu_backend": "triton"})
    assert stats["fallbacks_to_eager"] == 0, stats
    assert stats["graphs_compiled"] <= torch_graph_count(prog.name), stats
