"""The aot_eager model and graph-break suites again, with every graph decomposed to ember prims.

Backend ``aot_eager`` runs ATen ops (as torch's does); ember's compiler runs the same AOT graphs decomposed to
prims (``aot_compile(..., decompose=True)``), so this file runs what test_models.py and test_graph_breaks.py run
with aot_eager through the decomposed path: losses, gradients, BatchNorm buffers, printed output, side effects
and RNG consumption must equal eager's. The one difference allowed is in the last bits of printed floats:
decomposed layer norm / GELU round differently from ATen's vectorized CPU kernels (a few ulps), so printed
numbers are compared as numbers, with float32 tolerance, and all other text exactly.
"""
from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import pytest
import torch

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repo root, for `tests.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ember  # noqa: E402
from ember.autograd.aot import aot_compile  # noqa: E402
# pytest imports this directory's test files as top-level modules (no __init__.py here); importing them under
# the same names shares one copy (a second copy would register the graph-break program table twice)
import test_graph_breaks as gb  # noqa: E402
import test_models as tm  # noqa: E402
from tests.capture.graph_break_models import LoopPrintingStack, PrintingStack  # noqa: E402
from tests.capture.harness import assert_same, cotangent_loss  # noqa: E402
from tests.models import ZOO  # noqa: E402

BUILT: list = []


def decomposed(gm, example_inputs):
    """A torch.compile-contract backend: ember's AOT autograd with graphs of ember prims."""
    fn = aot_compile(gm, example_inputs, decompose=True)
    BUILT.append(fn)
    return fn


def _graphs_are_prims() -> None:
    """At least one compiled variant ran prims, and no op that has a decomposition was left as ATen."""
    from ember.decomp import has_decomposition

    assert BUILT, "nothing was compiled"
    seen_prims = False
    for fn in BUILT:
        for built, _, _ in fn.__ember_aot__.values():
            graphs = [getattr(built, "fwd", None), getattr(built, "bwd", None)]
            for g in graphs:
                if not isinstance(g, torch.fx.GraphModule):
                    continue
                targets = [n.target for n in g.graph.nodes if n.op == "call_function"]
                seen_prims |= any(str(t).startswith("prims.") for t in targets)
                left = [str(t) for t in targets if isinstance(t, torch._ops.OpOverload) and has_decomposition(t)]
                assert not left, f"ATen ops with a decomposition left in a decomposed graph: {left}"
    assert seen_prims, "no graph contains ember prims"


@pytest.fixture
def built(fresh_ember):
    BUILT.clear()
    yield BUILT
    BUILT.clear()


# ------------------------------------------------------------------------------------------------ model zoo
@pytest.mark.parametrize("spec", ZOO, ids=[s.name for s in ZOO])
def test_training_step_decomposed(spec, built):
    tm._training_steps(spec, decomposed)
    _graphs_are_prims()


@pytest.mark.parametrize("grad_mode", ["no_grad", "grad"])
@pytest.mark.parametrize("spec", ZOO, ids=[s.name for s in ZOO])
def test_inference_decomposed(spec, grad_mode, built):
    model, make_batch = spec.factory(0)
    model.eval()
    eager = copy.deepcopy(model)
    compiled = ember.compile(model, backend=decomposed, fullgraph=True)
    for seed in (1, 2):
        batch = make_batch(seed)
        with torch.set_grad_enabled(grad_mode == "grad"):
            expected, actual = eager(*batch.args), compiled(*batch.args)
        assert_same(actual, expected)
        if grad_mode == "grad":
            cotangent_loss(actual).backward()
            cotangent_loss(expected).backward()
            names, params = tm.named_params(model)
            tm.assert_grads_same(params, tm.named_params(eager)[1], names)
    _graphs_are_prims()


# --------------------------------------------------------------------------------------- graph-break programs
@pytest.mark.parametrize("prog", gb._params("aot", gb.PROGRAMS))
def test_break_program_decomposed(prog, fresh_ember):
    gb._run_and_compare(prog, decomposed)


# ------------------------------------------------------------------------------- 12 layers, a print in each
_NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")


def _assert_printed_close(actual: str, expected: str, what: str) -> None:
    """Same text; the floats in it equal to float32 tolerance (decomposed rounding differs by ulps)."""
    assert _NUMBER.sub("#", actual) == _NUMBER.sub("#", expected), f"{what}\n--- eager:\n{expected}--- ember:\n{actual}"
    got = [float(v) for v in _NUMBER.findall(actual)]
    want = [float(v) for v in _NUMBER.findall(expected)]
    assert got and len(got) == len(want)
    torch.testing.assert_close(torch.tensor(got, dtype=torch.float64), torch.tensor(want, dtype=torch.float64),
                               rtol=1e-5, atol=1e-6, msg=lambda m: f"{what}: printed values differ: {m}")


def test_printed_close_can_fail():
    _assert_printed_close("mean square 0.5000001\n", "mean square 0.5\n", "ulps")
    with pytest.raises(AssertionError):
        _assert_printed_close("mean square 0.51\n", "mean square 0.5\n", "value")
    with pytest.raises(AssertionError):
        _assert_printed_close("mean sq 0.5\n", "mean square 0.5\n", "text")


@pytest.mark.parametrize("cls", [PrintingStack, LoopPrintingStack], ids=["print_in_block", "print_in_loop"])
def test_twelve_layer_model_with_print_per_layer_decomposed(cls, built):
    torch.manual_seed(0)
    eager = cls(d=32, n=12)
    model = copy.deepcopy(eager)
    compiled = ember.compile(model, backend=decomposed)
    for run in range(3):
        x = torch.randn(4, 32, generator=torch.Generator().manual_seed(run))
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        before = gb._stats_compiled()
        expected, e_out, _ = gb._call_capturing(eager, (xe,), {}, ())
        actual, c_out, _ = gb._call_capturing(compiled, (xc,), {}, ())
        assert e_out.count("\n") == 12
        _assert_printed_close(c_out, e_out, f"run {run}: printed output differs")
        assert_same(actual, expected)
        cotangent_loss(expected).backward()
        cotangent_loss(actual).backward()
        torch.testing.assert_close(xc.grad, xe.grad)
        for (n, p), pe in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, pe.grad, msg=lambda m, n=n: f"run {run}: grad of {n}: {m}")
        model.zero_grad()
        eager.zero_grad()
        if run >= 1 and cls is PrintingStack:
            assert gb._stats_compiled() == before, f"run {run}: the call compiled again"
    _graphs_are_prims()
