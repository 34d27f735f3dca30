"""Triton kernels writing over dead buffers (``ember.loopir.inplace.reused_buffers(..., reductions=True)``): a
reduction kernel's last node, pointwise, takes the memory of a same-layout buffer that dies there (a softmax over
its scores), so a CUDA graph's pool holds one such buffer fewer. Values are checked in
tests/loopir/test_inplace.py on every backend, Triton interpreted included."""
from __future__ import annotations

import torch

from ember.options import make_options
from tests.loopir.test_inplace import (looped_rows_with_a_store_needing_no_reduction, looped_softmax_over_scores,
                                      reduction_reads_after_a_store, softmax_over_scores)


def _built_source(fn, args, options):
    from ember.autograd.aot import aot_compile
    from ember.codegen import compile_graph
    built = []

    def hook(g, kind):
        built.append(compile_graph(g, kind, options))
        return built[-1]
    aot_compile(torch.fx.symbolic_trace(fn), args, decompose=True, compile_graph=hook)
    return built[0].source


def test_triton_softmax_writes_over_its_dead_scores():
    """On Triton a reduction kernel's last node, pointwise, takes the memory of a same-layout buffer dying there
    (less memory held by a CUDA graph's pool); not its other stored nodes, which come before loads of it."""
    opts = make_options(None, {"cpu_backend": "triton"})
    src = _built_source(softmax_over_scores, [torch.randn(64, 16), torch.randn(48, 16)], opts)
    assert src.count("new value stored in place") == 1, src
    src = _built_source(reduction_reads_after_a_store, [torch.randn(8, 16), torch.randn(16, 40)], opts)
    assert src.count("new value stored in place") == 1, src


def test_a_store_in_an_earlier_loop_than_loads_of_the_buffer_takes_no_memory():
    """Looped rows: a last node needing no reduction is computed in the first loop, before the reductions' loops
    load the dead buffer again, so it gets its own memory; a softmax's probabilities, stored in the last loop,
    still take the scores' memory."""
    opts = make_options(None, {"cpu_backend": "triton"})
    src = _built_source(looped_rows_with_a_store_needing_no_reduction, [torch.randn(4, 16), torch.randn(16, 8192)],
                        opts)
    assert "new value stored in place" not in src, src
    src = _built_source(looped_softmax_over_scores, [torch.randn(4, 16), torch.randn(16, 8192)], opts)
    assert src.count("new value stored in place") == 1, src
