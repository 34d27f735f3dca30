"""``torch.utils.checkpoint.checkpoint`` inside compiled code.

The checkpointed function is inlined into the graph between two marker calls (``ember.autograd.regions``
``enter``/``exit``): its values and gradients are the function's own, and AOT autograd tags the region's ops so
the partitioner recomputes them in the backward instead of saving them, as eager checkpointing does.

Eager's reentrant form (``use_reentrant=True``, and the default when it is not given) computes the function
under ``no_grad`` and differentiates only through its tensor inputs: with no input that requires grad, the
result does not require grad and the parameters inside get no gradient. That case runs natively (a graph
break) so its behaviour stays eager's; every other call is captured. A selective checkpointing policy
(``context_fn=functools.partial(create_selective_checkpoint_contexts, policy)``) is registered for the region
(``regions.set_policy``): the ops it says to save are saved, the rest recomputed. Another ``context_fn`` is a graph
break that says so.
"""
from __future__ import annotations

import functools
import itertools

import torch
from torch.utils import checkpoint as _ckpt

from ember.autograd import regions

from ..values import NULL, Const, ListVar, PartialVar, TupleVar
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
    policy = _policy(d, f, kwargs.pop("context_fn", None))
    for name in _IGNORED:
        kwargs.pop(name, None)
    if reentrant:
        if policy is not None:
            from ..interpreter import UserException
            raise UserException(ValueError("Passing context_fn or debug is only supported when "
                                           "use_reentrant=False."))
        if kwargs:
            raise d.unsupported(f, "reentrant torch.utils.checkpoint with keyword arguments (eager raises)")
        if d.torch.grad_enabled and not any(type(v) is TensorVar and v.meta.requires_grad for v in inputs):
            raise d.unsupported(f, "reentrant torch.utils.checkpoint where no input requires grad (eager then "
                                   "computes no gradient through it)", "pass use_reentrant=False")
    region = next(_REGIONS)
    if policy is not None:
        regions.set_policy(region, policy)
    record(d, f, "call_function", regions.enter, [Const(region)], {}, meta_fn=lambda *a: None)
    out = d.call(f, fn, list(inputs), kwargs)
    record(d, f, "call_function", regions.exit, [Const(region)], {}, meta_fn=lambda *a: None)
    return out


def _policy(d, f, context_fn):
    """The policy of ``context_fn=functools.partial(create_selective_checkpoint_contexts, policy)`` (a function
    or a list of ops), None for no context_fn; any other context_fn is a graph break."""
    if context_fn is None or (type(context_fn) is Const and context_fn.value is _ckpt.noop_context_fn):
        return None
    fn, args, kwargs = None, [], {}
    if type(context_fn) is PartialVar:
        fn, args, kwargs = _real(context_fn.func), context_fn.args, context_fn.kwargs
    elif type(context_fn) is Const and isinstance(context_fn.value, functools.partial):
        p = context_fn.value
        fn, args, kwargs = p.func, [Const(a) for a in p.args], {k: Const(v) for k, v in p.keywords.items()}
    if fn is not _ckpt.create_selective_checkpoint_contexts:
        raise d.unsupported(f, "torch.utils.checkpoint with a context_fn other than functools.partial("
                               "create_selective_checkpoint_contexts, policy) is not captured",
                            "it runs eagerly at this graph break")
    value = args[0] if args else kwargs.get("policy_fn_or_list")
    policy = _real(value) if value is not None else None
    if policy is None or not (callable(policy) or isinstance(policy, (list, tuple))):
        raise d.unsupported(f, "a selective checkpointing policy made inside the compiled function",
                            "define the policy function (or list of ops) outside it")
    return policy


def _real(v):
    """The Python object of a value that stands for an existing object (a constant, a global function)."""
    if type(v) is Const:
        return v.value
    if type(v) in (ListVar, TupleVar):
        items = [_real(x) for x in v.items]
        return None if any(x is None for x in items) else items
    try:
        return v.as_python()
    except Exception:     # noqa: BLE001 - not a constant: the object it stands for, if any
        real = v.real_object()
        return None if real is NULL else real


RULES = {_ckpt.checkpoint: call_checkpoint}
_ = torch
