"""``torch.utils.checkpoint.checkpoint`` inside compiled code.

The checkpointed function is inlined into the graph between two marker calls (``ember.autograd.regions``
``enter``/``exit``): its values and gradients are the function's own, and AOT autograd tags the region's ops so
the partitioner recomputes them in the backward instead of saving them, as eager checkpointing does.

Eager's reentrant form (``use_reentrant=True``, and the default when it is not given) computes the function
under ``no_grad`` and differentiates only through its tensor inputs: with no input that requires grad, the
result does not require grad and the parameters inside get no gradient. That case runs natively (a graph
break) so its behaviour stays eager's; every other call is captured. ``context_fn`` (selective checkpointing
policies) is not captured yet: a graph break says so.
"""
from __future__ import annotations

import itertools

import torch
from torch.utils import checkpoint as _ckpt

from ember.autograd import regions

from ..values import Const
from .graph import TensorVar
from .ops import record

_REGIONS = itertools.count()
_IGNORED = ("determinism_check", "debug", "early_stop", "preserve_rng_state")


def _const(d, f, kwargs: dict, name: str, default):
    v = kwargs.pop(name, None)
    return default if v is None else d.as_python(f, v)


def call_checkpoint(d, f, args, kwargs):
    if not args:
        raise d.unsupported(f, "torch.utils.checkpoint.checkpoint() without a function")
    fn, *inputs = args
    kwargs = dict(kwargs)
    reentrant = _const(d, f, kwargs, "use_reentrant", True)
    context_fn = kwargs.pop("context_fn", None)
    if context_fn is not None and not (type(context_fn) is Const and context_fn.value is _ckpt.noop_context_fn):
        raise d.unsupported(f, "torch.utils.checkpoint with a context_fn (selective checkpointing policy) is "
                               "not captured yet", "it runs eagerly at this graph break")
    for name in _IGNORED:
        kwargs.pop(name, None)
    if reentrant:
        if kwargs:
            raise d.unsupported(f, "reentrant torch.utils.checkpoint with keyword arguments (eager raises)")
        if d.torch.grad_enabled and not any(type(v) is TensorVar and v.meta.requires_grad for v in inputs):
            raise d.unsupported(f, "reentrant torch.utils.checkpoint where no input requires grad (eager then "
                                   "computes no gradient through it)", "pass use_reentrant=False")
    region = next(_REGIONS)
    record(d, f, "call_function", regions.enter, [Const(region)], {}, meta_fn=lambda *a: None)
    out = d.call(f, fn, list(inputs), kwargs)
    record(d, f, "call_function", regions.exit, [Const(region)], {}, meta_fn=lambda *a: None)
    return out


RULES = {_ckpt.checkpoint: call_checkpoint}
_ = torch
