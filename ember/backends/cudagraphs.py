"""The ``cudagraphs`` backend: AOT autograd (ATen graphs, no decompositions unless ``aot_decompose``), each
final graph (inference, forward, backward) run by eager ATen kernels inside a recorded CUDA graph
(``ember.runtime.cudagraphs``). Training works: the forward and backward graphs are both recorded, into one
memory pool per ``ember.compile`` call. Graphs on the CPU run as plain FX graphs."""
from __future__ import annotations

from typing import Any, Callable

from ..autograd.aot import aot_compile
from . import register_backend


def _make(options: Any) -> Callable:
    from ..runtime.cudagraphs import (CudaGraphPool, cudagraphify, graph_on_cuda, graph_static_shapes,
                                      note_cpu_graph)
    pool = CudaGraphPool()

    def compile_one(g, kind):
        if graph_on_cuda(g) is False:
            note_cpu_graph(kind)
            return g
        return cudagraphify(g, kind, options, pool, static_shapes=graph_static_shapes(g))

    def cudagraphs(gm, example_inputs):
        return aot_compile(gm, example_inputs, options, compile_graph=compile_one)
    return cudagraphs


@register_backend("cudagraphs", factory=True)
def cudagraphs_factory(options: Any) -> Callable:
    return _make(options)


def cudagraphs(gm, example_inputs):
    """``torch.compile(model, backend=ember.backends.cudagraphs.cudagraphs)``: one pool per captured graph."""
    return _make(None)(gm, example_inputs)
