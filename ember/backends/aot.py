"""The ``aot_eager`` backend: AOT autograd (ATen tracing of forward and backward, functionalization,
partitioning) with graphs run by eager ATen kernels. ``EMBER_LOGS=aot_graphs`` prints the forward and backward
graphs and what the partitioner saved and recomputed."""
from __future__ import annotations

from typing import Any, Callable

from ..autograd.aot import aot_compile
from . import register_backend


@register_backend("aot_eager", factory=True)
def aot_eager_factory(options: Any) -> Callable:
    def aot_eager(gm, example_inputs):
        return aot_compile(gm, example_inputs, options)
    return aot_eager


def aot_eager(gm, example_inputs):
    """``torch.compile(model, backend=ember.backends.aot.aot_eager)``: PyTorch's capture, ember's AOT autograd."""
    return aot_compile(gm, example_inputs, None)
