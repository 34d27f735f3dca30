"""GPU vendors' batch-norm kernels, recorded as the portable ``native_batch_norm`` ops.

ATen's ``batch_norm`` picks its kernel by device before any dispatch mode sees the call: ``cudnn_batch_norm`` on
CUDA (``miopen_batch_norm`` on ROCm). Those kernels update the running statistics in place, but their schemas
declare no write (``Tensor? running_mean``, not ``Tensor(a!)?``). A graph that records them therefore hides a
mutation from functionalization: the write is lost wherever the running statistics are a temporary. Instance
norm is such a case: ATen repeats the running statistics per sample, runs batch norm on the copies and writes
their mean back, and a functional graph reads the copies as never written, so the statistics never moved.

The tracer records each of these ops as ``native_batch_norm`` (whose schema declares the write, and which ember's
functionalization, shape rules and decompositions know), and the vendor backward as
``native_batch_norm_backward``. The numbers are batch norm's in every case; the outputs keep the vendor op's
arity (cuDNN's fourth output, its workspace, is an empty byte tensor nobody reads but its own backward).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

aten = torch.ops.aten

# ``call(op, args, kwargs)``: record ``op`` in the trace and return its (fake) result
Call = Callable[[Any, tuple, dict], Any]


def _bound(op: Any, args: tuple, kwargs: dict) -> list[Any]:
    """The op's arguments in schema order, defaults filled in."""
    values = list(args)
    for arg in op._schema.arguments[len(args):]:
        values.append(kwargs[arg.name] if arg.name in kwargs else arg.default_value)
    return values


def _forward(op: Any, workspace: bool) -> Callable[[Call, tuple, dict], Any]:
    def record(call: Call, args: tuple, kwargs: dict) -> Any:
        x, weight, bias, running_mean, running_var, training, momentum, eps = _bound(op, args, kwargs)
        out, mean, invstd = call(aten.native_batch_norm.default,
                                 (x, weight, bias, running_mean, running_var, training, momentum, eps), {})
        if not workspace:
            return out, mean, invstd
        empty = call(aten.empty.memory_format, ([0],), {"dtype": torch.uint8, "device": x.device})
        return out, mean, invstd, empty
    return record


def _backward(op: Any) -> Callable[[Call, tuple, dict], Any]:
    """The vendor backward runs only for training-mode batch norm (eval's derivative is already
    ``native_batch_norm_backward``): the saved mean and inverse std are the forward's."""
    def record(call: Call, args: tuple, kwargs: dict) -> Any:
        x, grad, weight, running_mean, running_var, save_mean, save_invstd, eps = _bound(op, args, kwargs)[:8]
        return call(aten.native_batch_norm_backward.default,
                    (grad, x, weight, running_mean, running_var, save_mean, save_invstd, True, eps,
                     [True, True, True]), {})
    return record


REDIRECTS: dict[Any, Callable[[Call, tuple, dict], Any]] = {
    aten.cudnn_batch_norm.default: _forward(aten.cudnn_batch_norm.default, workspace=True),
    aten.miopen_batch_norm.default: _forward(aten.miopen_batch_norm.default, workspace=False),
    aten.cudnn_batch_norm_backward.default: _backward(aten.cudnn_batch_norm_backward.default),
    aten.miopen_batch_norm_backward.default: _backward(aten.miopen_batch_norm_backward.default),
}
