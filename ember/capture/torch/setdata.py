"""``t.data = y`` inside a trace.

Eager keeps the Python object ``t`` (and its autograd identity) and gives it ``y``'s storage, shape and
dtype, detached. The trace does the same to its value: the TensorVar stays the same object (so every
reference to ``t`` in the trace, and ``is``, see the change) and reads ``y.detach()`` from then on. When
``t`` is a tensor the caller can see (it has a source), the glue replays the assignment on the caller's
object after the graph ran, in program order, so afterwards the caller's tensor shares ``y``'s storage as in
eager.

Only a target that does not require grad is captured: for one that does, later ops would have to
differentiate to the leaf ``t`` while reading ``y``'s values, which a graph of values cannot express; that
stays a graph break.
"""
from __future__ import annotations

from ..values import Const
from .graph import TensorVar


def _assign_data(t, value) -> None:
    t.data = value


def set_data(d, f, t: TensorVar, value) -> None:
    from .ops import record
    if type(value) is not TensorVar:
        raise d.unsupported(f, f"setting Tensor.data to a {value.describe()} inside compiled code",
                            "assign a tensor, or set it outside the compiled function")
    if t.meta.requires_grad:
        raise d.unsupported(f, "setting Tensor.data of a tensor that requires grad inside compiled code",
                            "set .data outside the compiled function")
    if t.device != value.device:
        raise d.unsupported(f, f"setting Tensor.data across devices ({t.device} -> {value.device}) inside "
                               "compiled code", "set .data outside the compiled function")
    new = record(d, f, "call_method", "detach", [value], {})
    t.node, t.meta, t.sym = new.node, new.meta, new.sym
    if t.source is not None:
        d.deferred_calls.append((Const(_assign_data), [t, value]))
