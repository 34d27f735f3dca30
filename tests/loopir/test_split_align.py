"""The CPU's accuracy split of an outer float sum (``lowerings._accuracy_split``) reads its partials as a
column sum of a contiguous matrix (``loopir.split_align``): partial ``s`` adds every ``split``-th point of the
row, so the partials' C++ kernel loads whole vectors at affine offsets of ``rindex``, with no division, modulo
or mask (chunks of consecutive points, 46 of 45 over a batch norm's 8x16x16 rows, read each point through
divisions and ran 15x slower than the unsplit sum: the quick suite's ResNet training step was 8-10% slower).
Values equal eager's; the split is still there (its accuracy is test_reduction_accuracy.py's subject)."""
from __future__ import annotations

import re

import pytest
import torch

from ember.autograd.aot import aot_compile
from ember.codegen import compile_graph
from ember.options import CompileOptions

from .backends import CPU_BACKENDS


def _nhwc(*shape):
    return lambda g: (torch.rand(*shape, generator=g) + 1).to(memory_format=torch.channels_last)


def _bn_grad_sums(x, g, y):
    """A batch norm backward's per-channel sums of a ReLU-masked gradient, with that gradient returned."""
    dy = torch.where(y <= 0, 0.0, g)
    return dy, dy.sum((0, 2, 3)), (dy * x).sum((0, 2, 3))


# name: (function, input makers); rows of 2048-4096 points, all split for accuracy
CASES = {
    "nhwc_channel_sum_2048": (lambda x: x.sum((0, 2, 3)), [_nhwc(8, 8, 16, 16)]),
    "nhwc_var_mean_2048": (lambda x: torch.var_mean(x, (0, 2, 3), correction=0), [_nhwc(2, 16, 32, 32)]),
    "nhwc_avg_pool_2304": (lambda x: x.mean((2, 3)), [_nhwc(2, 16, 48, 48)]),
    "token_bias_grad_4096": (lambda x: x.reshape(-1, 24).sum(0),
                             [lambda g: torch.rand(2, 2048, 24, generator=g)]),
    "bn_backward_sums_2048": (_bn_grad_sums, [_nhwc(8, 8, 16, 16)] * 3),
}


_KEPT = r"\(*xindex [/%] \d+\)?( [/%] \d+)?"


def _compile_cpp(fn, args):
    built = []

    def hook(gr, kind):
        out = compile_graph(gr, kind, CompileOptions(cpu_backend="cpp"))
        built.append(out)
        return out
    return aot_compile(torch.fx.symbolic_trace(fn), args, decompose=True, compile_graph=hook), built


@pytest.mark.skipif("cpp" not in CPU_BACKENDS, reason="needs a C++ compiler")
@pytest.mark.parametrize("name", sorted(CASES))
def test_partials_are_a_contiguous_column_sum(name):
    fn, makers = CASES[name]
    g = torch.Generator().manual_seed(5)
    args = [m(g) for m in makers]
    compiled, built = _compile_cpp(fn, args)
    src = "\n".join(s for b in built for s in b.kernel_sources)
    # the partials' loads of the inputs (the final sum reads the partials buffer); divisions of ``xindex``
    # alone are the kept point's, the same for the whole reduction loop
    reads = [ln.strip() for ln in src.splitlines() if "rindex" in ln and "p_arg" in ln and "=" in ln]
    assert reads, f"no split partials kernel:\n{src}"
    bad = [ln for ln in reads if "ember_vload" not in ln or re.search(r"[/%]", re.sub(_KEPT, "", ln))]
    assert not bad, "\n".join(bad)
    got, want = compiled(*args), fn(*args)
    got, want = (v if isinstance(v, (tuple, list)) else [v] for v in (got, want))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
