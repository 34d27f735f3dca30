"""``torch.autograd.Function.apply`` inside compiled code.

Where no input requires grad (or grad mode is off), eager's ``apply`` runs the class's ``forward`` under
``no_grad`` and records nothing for autograd, so the trace inlines ``forward`` the same way: its ops become
graph nodes and its outputs do not require grad. A ``ctx`` stands in for autograd's, with the methods a
``forward`` calls (``save_for_backward``, ``mark_dirty``, ...) as no-ops, since no backward will read them.
With an input that requires grad the call is a graph break: the class's own ``backward`` is not captured."""
from __future__ import annotations

import inspect
import types

import torch

from ..sources import ConstSource
from .ctx import set_grad
from .graph import TensorVar


class InferenceCtx:
    """The ``ctx`` of a ``forward`` run without autograd."""

    def __init__(self, n_inputs: int):
        self.needs_input_grad = (False,) * n_inputs
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        pass

    def mark_dirty(self, *tensors):
        pass

    def mark_non_differentiable(self, *tensors):
        pass

    def set_materialize_grads(self, value: bool):
        self.materialize_grads = value


APPLY = torch.autograd.Function.apply.__func__


def function_apply_class(fn, args) -> type | None:
    """The ``torch.autograd.Function`` subclass whose ``apply`` ``fn`` is (bound, or the plain function with
    the class as first argument, as a classmethod call reaches the trace), else None."""
    if type(fn) is types.MethodType and fn.__func__ is APPLY:
        cls = fn.__self__
    elif fn is APPLY and args and type(args[0]).__name__ == "Const":
        cls = args[0].value
    else:
        return None
    return cls if isinstance(cls, type) and issubclass(cls, torch.autograd.Function) else None


def _forward_of(cls: type):
    fwd = inspect.getattr_static(cls, "forward", None)
    fwd = fwd.__func__ if isinstance(fwd, (staticmethod, classmethod)) else fwd
    return fwd if type(fwd) is types.FunctionType else None


def _uses_setup_context(cls: type) -> bool:
    base = getattr(torch.autograd.function, "_SingleLevelFunction", torch.autograd.Function)
    return getattr(cls, "setup_context", None) is not getattr(base, "setup_context", None)


def call_function_apply(d, f, cls: type, args, kwargs):
    name = cls.__name__
    values = list(args) + list(kwargs.values())
    if d.torch.grad_enabled and any(type(v) is TensorVar and v.meta.requires_grad for v in values):
        raise d.unsupported(f, f"{name}.apply with an input that requires grad (a custom autograd.Function's "
                               "backward is not captured)", "it runs eagerly; under no_grad it is captured")
    fwd = _forward_of(cls)
    if fwd is None:
        raise d.unsupported(f, f"{name}.forward is not a Python function")
    lead = []
    if not _uses_setup_context(cls):
        ctx = InferenceCtx(len(args))
        lead = [d.wrap(ctx, ConstSource(id(ctx), ctx))]
    prev = d.torch.grad_enabled
    set_grad(d, f, False)
    out = d.inline(f, fwd, lead + list(args), dict(kwargs))
    set_grad(d, f, prev)
    return out
