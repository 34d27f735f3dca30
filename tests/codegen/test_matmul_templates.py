"""Triton matmul templates with fused epilogues (max-autotune), under Triton's interpreter here.

Each case runs with the autotuner's choice forced to the ATen fallback (cuBLAS on a GPU, then the epilogue
kernel), the first and the last template configuration: values and gradients must equal eager every time.
Cases cover bias and activation epilogues, residuals, sizes no tile divides, an inner dimension no BLOCK_K
divides, transposed and batched operands, 2-D and broadcast biases, a matmul read again after its epilogue,
and bfloat16.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ember.codegen import autotune
from ember.options import CompileOptions
from tests.codegen import test_triton
from tests.codegen.test_triton import HAVE_TRITON, _bodies, _rn, check_case

pytestmark = [
    pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed (pip install triton)"),
    pytest.mark.skipif(HAVE_TRITON and torch.cuda.is_available(),
                       reason="CUDA machine: Triton compiles here; tests/gpu covers matmul templates"),
]

TUNED = CompileOptions(cpu_backend="triton", max_autotune=True)


def _attention(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) * 0.25, -1) @ v


def _mm_then_scatter_chain(x, w, h1, h2):
    """A matmul whose epilogue comes after an accumulation chain: the chain's copies leave the schedule (a
    scatter writes over the buffer it copied), and the template search must step over the empty steps."""
    y = x @ w
    dev = h1.device         # the GPU table runs it on CUDA inputs: eager needs the new tensors there too
    out = torch.zeros(6, 8, device=dev, dtype=h1.dtype).index_add(0, torch.tensor([0, 2, 5], device=dev), h1)
    out = out.index_add(0, torch.tensor([1, 2, 3], device=dev), h2)
    return (y + out.sum()).relu(), out


# name: (fn, inputs, train, tolerance, float_only), as in tests/codegen/test_triton.py's table
CASES = {
    "linear_gelu_residual": (lambda x, w, b, r: F.gelu(F.linear(x, w, b)) + r,
                             lambda: [_rn(10, 16), _rn(32, 16), _rn(32), _rn(10, 32)], True, 1e-4, False),
    "odd_sizes_odd_k": (lambda a, b: (a @ b).tanh(), lambda: [_rn(37, 20), _rn(20, 29)], True, 1e-4, False),
    "transposed_operands": (lambda a, b: a.t() @ b.t() * 2, lambda: [_rn(24, 17), _rn(9, 24)], True, 1e-4, False),
    "batched_attention": (_attention, lambda: [_rn(3, 12, 16), _rn(3, 12, 16), _rn(3, 12, 16)], True, 1e-4, False),
    "addmm_2d_bias": (lambda c, a, b: torch.addmm(c, a, b).relu(), lambda: [_rn(9, 18), _rn(9, 7), _rn(7, 18)],
                      True, 1e-4, False),
    "addmm_row_bias": (lambda c, a, b: torch.addmm(c, a, b), lambda: [_rn(1, 18), _rn(9, 7), _rn(7, 18)], True,
                       1e-4, False),
    "read_again": (lambda x, w: ((x @ w) * (x @ w) + (x @ w).exp(), (x @ w).sum(0)),
                   lambda: [_rn(19, 8), _rn(8, 21)], True, 1e-4, False),
    "epilogue_reads_a_reduction": (lambda x, w, y: x @ w + y.sum(-1, keepdim=True),
                                   lambda: [_rn(16, 8), _rn(8, 16), _rn(16, 33)], True, 1e-4, False),
    "mm_then_scatter_chain": (_mm_then_scatter_chain, lambda: [_rn(10, 16), _rn(16, 12), _rn(3, 8), _rn(3, 8)],
                              True, 1e-4, False),
    "mlp_block": (lambda x, w1, b1, w2, b2: x + F.linear(F.silu(F.linear(x, w1, b1)), w2, b2),
                  lambda: [_rn(20, 16), _rn(48, 16), _rn(48), _rn(16, 48), _rn(16)], True, 1e-4, False),
}


@pytest.fixture
def cases(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "_CHOICES", {})
    for name, case in CASES.items():
        monkeypatch.setitem(test_triton.CASES, name, case)


def _force(monkeypatch, which: str) -> list[list[str]]:
    """Make the autotuner pick the ATen fallback ('aten') or the first or last template configuration;
    returns the labels of every matmul step tuned."""
    seen: list[list[str]] = []

    def tune(self, args):
        if not self.labels[0].startswith("aten"):
            return 0                                   # a kernel's own configurations: the heuristic one
        seen.append(self.labels)
        if which == "padded":
            return next((i for i, lab in enumerate(self.labels) if lab.startswith("aten padded")), 0)
        first = next(i for i, lab in enumerate(self.labels) if lab.startswith("triton"))
        return {"aten": 0, "first": first, "last": len(self.choices) - 1}[which]
    monkeypatch.setattr(autotune.Autotuned, "tune", tune)
    return seen


@pytest.mark.parametrize("which", ["aten", "first", "last"])
@pytest.mark.parametrize("name", list(CASES))
def test_templates_match_eager(name, which, cases, monkeypatch):
    seen = _force(monkeypatch, which)
    check_case(name, opts=TUNED)
    assert seen and all(len(labels) >= 2 for labels in seen), f"{name}: no matmul template was tried"


@pytest.mark.parametrize("name", ["odd_sizes_odd_k", "transposed_operands", "addmm_row_bias", "read_again"])
def test_padded_aten_choice(name, cases, monkeypatch):
    """Misaligned inner or output sizes also try cuBLAS on zero-padded operands (max-autotune pads at run time
    instead of at lowering); forced here on the CPU, where it is otherwise not offered."""
    from ember.codegen import triton_mm
    monkeypatch.setattr(triton_mm, "PAD_DEVICES", {"cuda", "cpu"})
    seen = _force(monkeypatch, "padded")
    check_case(name, opts=TUNED)
    assert any(lab.startswith("aten padded") for labels in seen for lab in labels)


def test_epilogue_fused_into_the_template(cases):
    """bias + GELU + residual run in the template: one kernel for the forward."""
    from ember.codegen.triton_mm import epilogue_of, template_source, tile_configs
    from ember.loopir.ir import Extern
    from ember.loopir.lower import lower
    from ember.loopir.schedule import Kernel, schedule
    fn = CASES["linear_gelu_residual"][0]
    graphs: list = []
    test_triton.aot_compile(torch.fx.symbolic_trace(fn), [_rn(10, 16), _rn(32, 16), _rn(32), _rn(10, 32)],
                            decompose=True, compile_graph=lambda g, k: graphs.append(g) or g)
    sched = schedule(lower(graphs[0], "g"))
    bodies = {b.name: b for b in _bodies(fn, [_rn(10, 16), _rn(32, 16), _rn(32), _rn(10, 32)])}
    (i,) = [i for i, s in enumerate(sched.steps) if isinstance(s, Extern) and s.op == "addmm"]
    j = epilogue_of(sched, i, bodies)
    assert j is not None and isinstance(sched.steps[j], Kernel)
    e = sched.steps[i]
    src, _ = template_source(e, tile_configs(10, 32, 16, torch.float32)[0], bodies[sched.steps[j].name], False, "k")
    assert "tl.dot" in src and "tl.erf" in src and "tl.store(p_mm" not in src, src


def test_epilogue_fusion_option(cases, monkeypatch):
    """options={"epilogue_fusion": False}: templates compute the matmul alone; the epilogue kernel runs after."""
    import ember
    from ember.codegen import triton_mm
    steps: list = []
    real = triton_mm.use_templates

    def spy(*a, **k):
        out = real(*a, **k)
        steps.extend(s for s in out.steps if isinstance(s, triton_mm.MatmulStep))
        return out
    monkeypatch.setattr(triton_mm, "use_templates", spy)
    _force(monkeypatch, "last")
    fn, make = CASES["linear_gelu_residual"][:2]
    xs = make()
    for fusion in (True, False):
        steps.clear()
        f = ember.compile(fn, options={"cpu_backend": "triton", "max_autotune": True, "epilogue_fusion": fusion})
        torch.testing.assert_close(f(*xs), fn(*xs), rtol=1e-4, atol=1e-4)
        assert steps and all((s.kernel is not None) == fusion for s in steps), (fusion, steps)
