"""The ``ember`` backend: AOT autograd with decompositions to prims, then the kernel compiler (loop IR,
fusion scheduler, Triton kernels for CUDA tensors and C++/OpenMP kernels for CPU tensors, and a generated
Python wrapper per graph)."""
from __future__ import annotations

from typing import Any, Callable

from ..autograd.aot import aot_compile
from ..codegen import compile_graph
from . import register_backend


@register_backend("ember", factory=True)
def ember_factory(options: Any) -> Callable:
    def ember(gm, example_inputs):
        return aot_compile(gm, example_inputs, options, decompose=True,
                           compile_graph=lambda g, kind: compile_graph(g, kind, options))
    return ember
