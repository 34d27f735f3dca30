"""The ``ember`` backend: AOT autograd with decompositions to prims, then the kernel compiler (loop IR,
fusion scheduler, Triton kernels for CUDA tensors and C++/OpenMP kernels for CPU tensors, and a generated
Python wrapper per graph).

Each final graph is compiled in two steps: the kernel compiler's callable (what the whole-graph cache,
``ember.graphcache`` through ``GRAPH_CACHE``, records and stores), then ``finish`` (CUDA graphs in mode
reduce-overhead), which a graph read from the cache goes through as well."""
from __future__ import annotations

from typing import Any, Callable

import torch

from ..autograd.aot import aot_compile
from ..codegen import compile_graph, kernel_backend
from . import GRAPH_CACHE, register_backend


def _finisher(options: Any) -> tuple[Callable[[Any], Any], Callable[[Any, str, Any], Any]]:
    """``(info(g), finish(fn, kind, info))``: what ``finish`` needs to know of a graph, as plain data, and the
    step that makes the callable that runs."""
    if not getattr(options, "cuda_graphs", False):
        return (lambda g: None), (lambda fn, kind, info: fn)
    # mode reduce-overhead: one CudaGraphPool per ember.compile call (this factory runs once per call), shared
    # by every graph compiled for it: inference, forward, backward, graphs between breaks, recompiles
    from ..runtime.cudagraphs import (CudaGraphPool, cudagraphify, graph_on_cuda, graph_static_shapes,
                                      note_cpu_graph)
    pool = CudaGraphPool()

    def info(g: Any) -> list:
        return [graph_on_cuda(g), graph_static_shapes(g)]

    def finish(fn: Any, kind: str, info: Any) -> Any:
        on_cuda, static_shapes = info
        if on_cuda is False:
            note_cpu_graph(kind)
            return fn
        return cudagraphify(fn, kind, options, pool, static_shapes=static_shapes)
    return info, finish


@register_backend("ember", factory=True)
def ember_factory(options: Any) -> Callable:
    info, finish = _finisher(options)

    def compile_one(g: Any, kind: str) -> tuple[Any, Any]:
        return compile_graph(g, kind, options), info(g)

    def compile_finished(g: Any, kind: str) -> Any:
        fn, i = compile_one(g, kind)
        return finish(fn, kind, i)

    def ember(gm, example_inputs):
        if any(isinstance(x, torch.Tensor) and kernel_backend(x.device, options) is None for x in example_inputs):
            # meta, mps, ...: no kernel backend; ATen runs the graphs, as aot_eager (the prim graphs would
            # broadcast a 0-dim CPU scalar into a CPU tensor that eager's ops refuse next to these devices)
            return aot_compile(gm, example_inputs, options)
        cache = GRAPH_CACHE[0](gm, options, finish) if GRAPH_CACHE else None
        if any(isinstance(x, torch.Tensor) and x.device.type == "cuda" for x in example_inputs):
            from ..codegen.triton_cache import install
            from ..codegen.triton_pool import start
            install()     # Triton's signed cache manager, also for kernels a whole-graph cache hit loads
            # workers import torch and triton while this graph is traced and lowered; a graph the whole-graph
            # cache holds is neither, so they start only when it misses
            if cache is None:
                start()
            else:
                cache.on_miss = start
        compile_fn = cache.compiler(compile_one) if cache is not None else compile_finished
        return aot_compile(gm, example_inputs, options, decompose=True, compile_graph=compile_fn,
                           graph_cache=cache)
    return ember
