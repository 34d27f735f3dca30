"""The ``ember`` backend: AOT autograd with decompositions to prims, then the kernel compiler (loop IR,
fusion scheduler, Triton kernels for CUDA tensors and C++/OpenMP kernels for CPU tensors, and a generated
Python wrapper per graph)."""
from __future__ import annotations

from typing import Any, Callable

import torch

from ..autograd.aot import aot_compile
from ..codegen import compile_graph, kernel_backend
from . import register_backend


@register_backend("ember", factory=True)
def ember_factory(options: Any) -> Callable:
    compile_one = lambda g, kind: compile_graph(g, kind, options)  # noqa: E731
    if getattr(options, "cuda_graphs", False):
        # mode reduce-overhead: one CudaGraphPool per ember.compile call (this factory runs once per call), shared
        # by every graph compiled for it: inference, forward, backward, graphs between breaks, recompiles
        from ..runtime.cudagraphs import (CudaGraphPool, cudagraphify, graph_on_cuda, graph_static_shapes,
                                          note_cpu_graph)
        pool = CudaGraphPool()

        def compile_one(g, kind):
            fn = compile_graph(g, kind, options)
            on_cuda = graph_on_cuda(g)
            if on_cuda is False:
                note_cpu_graph(kind)
                return fn
            return cudagraphify(fn, kind, options, pool, static_shapes=graph_static_shapes(g))

    def ember(gm, example_inputs):
        if any(isinstance(x, torch.Tensor) and kernel_backend(x.device, options) is None for x in example_inputs):
            # meta, mps, ...: no kernel backend; ATen runs the graphs, as aot_eager (the prim graphs would
            # broadcast a 0-dim CPU scalar into a CPU tensor that eager's ops refuse next to these devices)
            return aot_compile(gm, example_inputs, options)
        if any(isinstance(x, torch.Tensor) and x.device.type == "cuda" for x in example_inputs):
            from ..codegen.triton_pool import start
            start()       # workers import torch and triton while this graph is traced and lowered
        return aot_compile(gm, example_inputs, options, decompose=True, compile_graph=compile_one)
    return ember
