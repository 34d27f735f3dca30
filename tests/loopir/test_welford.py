"""Welford's M2 (``ember.loopir.welford``): var_mean is a sum and a ``welford`` reduction of the shifted data in
one loop; the reference interpreter, the Python, C++ and (interpreted) Triton backends agree with eager, also on
data whose mean dwarfs its spread, where the sum of squares minus the squared sum cancels to nothing."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember
import ember.loopir.lowerings as lowerings
from ember.autograd.aot import aot_compile
from ember.codegen import compile_graph
from ember.loopir.interp import run_loop_graph
from ember.loopir.ir import Reduction
from ember.loopir.lower import lower
from ember.options import CompileOptions

from .backends import CPU_BACKENDS

FNS = {
    "rows": lambda x: torch.var_mean(x, -1),
    "cols": lambda x: torch.var_mean(x, 0, correction=0),
    "cols_float64": lambda x: torch.var_mean(x.double(), 0),      # C++: blocks of outer points (tiled loops)
    "all": lambda x: torch.std_mean(x),
    "keepdim": lambda x: torch.var_mean(x, (0,), keepdim=True),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "offset": lambda x: torch.std(x * 0.01 + 1e4, -1),
}


def _loop_graph(fn, x):
    graphs = []

    def hook(gr, kind):
        graphs.append(gr)
        return compile_graph(gr, kind, None)
    aot_compile(torch.fx.symbolic_trace(fn), [x], decompose=True, compile_graph=hook)
    return lower(graphs[0], "forward")


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


@pytest.mark.parametrize("name", list(FNS))
def test_interpreter_runs_welford(name):
    x = torch.randn(6, 300, generator=torch.Generator().manual_seed(1))
    g = _loop_graph(FNS[name], x)
    kinds = [n.reduce_type for n in g.nodes if isinstance(n, Reduction)]
    assert "welford" in kinds, g.python()
    assert "reduction('welford'" in g.python()
    for a, b in zip(_flat(run_loop_graph(g, x)), _flat(FNS[name](x))):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("name", list(FNS))
@pytest.mark.parametrize("shape", [(6, 300), (3, 20000), (2000, 5), (1, 1)])
def test_backends_match_eager(backend, name, shape):
    if shape == (1, 1) and name == "offset":
        shape = (3, 1)
    ember.reset()
    f = ember.compile(FNS[name], options={"cpu_backend": backend})
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(2))
    for a, b in zip(_flat(f(x)), _flat(FNS[name](x))):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)


def test_offset_data_keeps_its_variance():
    """std 0.01 around 1e4 over long rows: a float32 running mean near 1e4 would stall (the shift keeps it near
    zero), and ``sum(x*x) - sum(x)**2 / n`` would cancel to nothing; the float64 result is the reference."""
    x = 1e4 + 0.01 * torch.randn(3, 50000, generator=torch.Generator().manual_seed(3))
    for backend in CPU_BACKENDS:
        # rows (C++: vector lanes), and strided columns (C++: a scalar loop over the shifted sums)
        for data, dim in ((x, -1), (x.t().contiguous(), 0)):
            ember.reset()
            out = ember.compile(lambda x: x.std(dim), options={"cpu_backend": backend})(data)
            torch.testing.assert_close(out, data.double().std(dim).float(), rtol=1e-3, atol=0)


def test_var_mean_reads_the_row_in_one_loop():
    """The sum and the M2 share one reduction loop (the row is read once), in C++ and in a looped Triton kernel."""
    x = torch.randn(4, 4096)
    _, built = _compile_cpp(lambda x: torch.var_mean(x, -1), x)
    src = "\n".join(s for b in built for s in b.kernel_sources)
    # one pass over the row: two vectors per step (rindex_s), in the blocks of the sum's cascade (rindex_s_1;
    # ember.codegen.cpp_cascade), and no odd vector or tail loop (4096 points are whole pairs of vectors)
    assert src.count("for (int64_t rindex_s = ") == 1 and "ember_wf_combine" in src, src
    assert src.count("for (int64_t rindex") == 2 and "for (int64_t rindex_s_1 = 0;" in src, src


def _compile_cpp(fn, x, backend="cpp"):
    built = []

    def hook(gr, kind):
        out = compile_graph(gr, kind, CompileOptions(cpu_backend=backend))
        built.append(out)
        return out
    return aot_compile(torch.fx.symbolic_trace(fn), [x], decompose=True, compile_graph=hook), built


@pytest.mark.parametrize("factor", [7, 16])
@pytest.mark.parametrize("rows", [168, 167])     # 167 is prime: no chunks of whole points, shifted squares
def test_split_rows(factor, rows, monkeypatch):
    """Split statistics (the GPU's few long rows): chunks of whole points with their M2s combined by Chan's
    formula, or shifted sums of squares where the row has no divisor near the split count."""
    monkeypatch.setattr(lowerings, "_split_factor", lambda dev, x, r, outer=False: factor if r >= 40 else 1)
    x = torch.randn(3, rows, generator=torch.Generator().manual_seed(rows)) * 0.01 + 1e4
    fn = lambda x: (torch.var_mean(x, -1), torch.var_mean(x, 0))     # noqa: E731
    g = _loop_graph(fn, x)
    reds = [n for n in g.nodes if isinstance(n, Reduction) and n.reduction_ranges != (3,)]    # the rows'
    assert any(n.reduce_type == "welford" for n in reds) == (rows == 168), g.python()
    for backend in CPU_BACKENDS:
        ember.reset()
        out = ember.compile(fn, options={"cpu_backend": backend})(x)
        ref = (torch.var_mean(x.double(), -1), torch.var_mean(x.double(), 0))
        for a, b in zip(out, ref):
            torch.testing.assert_close(a[0], b[0].float(), rtol=2e-3, atol=1e-9)
            torch.testing.assert_close(a[1], b[1].float(), rtol=1e-6, atol=0)
