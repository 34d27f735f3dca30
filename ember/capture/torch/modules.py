"""nn.Module values: guarded by identity, parameters and buffers as graph inputs found through
``_parameters``/``_buffers``, submodules inlined (their ``forward`` runs in the trace), attribute writes
replayed with ``setattr`` so ``Module.__setattr__`` keeps its meaning."""
from __future__ import annotations

import types

import torch

from .. import rules as R
from ..interpreter import NULL, UserException
from ..lookups import class_lookup, not_in_instance, not_in_module, not_readable, resolved_type_attr
from ..objects import _descriptor_get, _is_data_descriptor, lookup_type_attr
from ..sources import AttrSource, InstAttrSource, ItemSource
from ..values import BoundMethod, Const, ObjectVar
from .hookguard import watch_hooks

_Module = torch.nn.Module


class NNModuleVar(ObjectVar):
    __slots__ = ()
    use_setattr = True          # the glue replays writes with setattr (Module.__setattr__)

    def describe(self):
        return f"{type(self.obj).__name__} module"


_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOK_DICTS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                      "_global_backward_pre_hooks")


def _has_hooks(m: _Module, d=None) -> bool:
    """Whether calling ``m`` runs hooks. With the trace's domain ``d``, a hook dict the trace has changed
    (``register_forward_hook`` earlier in the same trace, ``handle.remove()``) counts as the trace sees it."""
    from torch.nn.modules import module as mm

    def nonempty(dct) -> bool:
        if dct is None:
            return False
        tv = d.by_id.get(id(dct)) if d is not None else None
        return bool(tv.items) if tv is not None and hasattr(tv, "items") else bool(dct)
    return (any(nonempty(getattr(m, n, None)) for n in _HOOK_DICTS)
            or any(nonempty(getattr(mm, n, None)) for n in _GLOBAL_HOOK_DICTS))


def _own_getattribute(t: type) -> bool:
    """Whether module class ``t`` defines its own ``__getattribute__`` (nn.Module inherits object's)."""
    return lookup_type_attr(t, "__getattribute__") is not object.__getattribute__


@R.GETATTR.register(NNModuleVar)
def _module_getattr(d, f, v: NNModuleVar, name: str):
    m = v.obj
    t = type(m)
    if name in v.overlay:
        x = v.overlay[name]
        if x is not NULL:
            return x
        raise UserException(AttributeError(f"'{t.__name__}' object has no attribute '{name}'"))
    if name == "__class__":
        return Const(t)
    if _own_getattribute(t) and v.source is not None:
        # a class that rewrites attribute reads: read through it, as the guards then do on every call
        try:
            value = getattr(m, name)
        except AttributeError as e:
            not_readable(d, v.source, name)
            raise UserException(e) from None
        return d.wrap(value, AttrSource(v.source, name))
    cattr = lookup_type_attr(t, name)
    if cattr is not NULL and _is_data_descriptor(cattr):
        class_lookup(d, t, name, cattr)
        return _descriptor_get(d, f, v, cattr, name, t)
    inst = m.__dict__
    if name in inst:
        return d.wrap(inst[name], InstAttrSource(v.source, name) if v.source else None)
    if cattr is not NULL:       # the instance does not shadow it (a parameter or submodule cannot)
        not_in_instance(d, v.source, m, name)
        class_lookup(d, t, name, cattr)
        return _descriptor_get(d, f, v, cattr, name, t)
    for dict_name in ("_parameters", "_buffers", "_modules"):
        dct = inst.get(dict_name)
        if dct is not None and name in dct:
            src = None
            if v.source:
                holder = InstAttrSource(v.source, dict_name)
                d.cg.hoist(holder)          # a module's _modules / _parameters dict: read once per call
                src = ItemSource(holder, name)
            return d.wrap(dct[name], src)
    # found nowhere: every place Module's lookup (and a class's own __getattr__) would look is guarded
    not_in_module(d, v.source, m, name)
    class_lookup(d, t, name)
    ga = lookup_type_attr(t, "__getattr__")
    class_lookup(d, t, "__getattr__", ga)
    if type(ga) is types.FunctionType and ga is not _Module.__getattr__:
        return d.inline(f, ga, [v, Const(name)], {})
    raise UserException(AttributeError(f"'{t.__name__}' object has no attribute '{name}'"))


@R.SETATTR.register(NNModuleVar)
def _module_setattr(d, f, v: NNModuleVar, name: str, value):
    m = v.obj
    if name in m._parameters and value is not NULL and not (type(value) is Const and value.value is None):
        raise d.unsupported(f, f"assigning to parameter {name!r} of a module inside compiled code",
                            "replace parameters outside the compiled function")
    sa = lookup_type_attr(type(m), "__setattr__")
    if sa is not _Module.__setattr__ and type(sa) is types.FunctionType:
        raise d.unsupported(f, f"{type(m).__name__} defines its own __setattr__")
    v.overlay[name] = value
    d.mark_mutated(v)


@R.CALL.register(NNModuleVar)
def _module_call(d, f, v: NNModuleVar, args, kwargs):
    m = v.obj
    call = resolved_type_attr(d, type(m), "__call__")
    if call is not _Module.__call__:            # the class overrides __call__: run it, as CPython does
        if type(call) is not types.FunctionType:
            raise d.unsupported(f, f"{type(m).__name__}.__call__ is not a Python function")
        return d.inline(f, call, [v] + list(args), kwargs)
    if _has_hooks(m, d):
        return d.inline(f, resolved_type_attr(d, type(m), "_call_impl"), [v] + list(args), kwargs)
    watch_hooks(d, m)       # a hook registered later must not be skipped
    fwd = m.__dict__.get("forward")
    if fwd is not None:
        return d.call(f, d.wrap(fwd, InstAttrSource(v.source, "forward") if v.source else None), args, kwargs)
    not_in_instance(d, v.source, m, "forward")      # a forward assigned to the instance later replaces it
    forward = resolved_type_attr(d, type(m), "forward")     # and one patched onto the class later
    if isinstance(forward, staticmethod) and type(forward.__func__) is types.FunctionType:
        return d.inline(f, forward.__func__, list(args), kwargs)
    if type(forward) is not types.FunctionType:
        raise d.unsupported(f, f"{type(m).__name__}.forward is not a Python function")
    if forward is _Module.forward:
        raise UserException(NotImplementedError(f'Module [{type(m).__name__}] is missing the required "forward" function'))
    return d.inline(f, forward, [v] + list(args), kwargs)


def construct_module(d, f, cls: type, args, kwargs):
    """Containers and parameter-free modules made inside forward are built for real at trace time (they
    hold only existing objects); modules that would create new parameters each call are reported."""
    real_args, real_kw = [], {}
    try:
        real_args = [_realize(a) for a in args]
        real_kw = {k: _realize(x) for k, x in kwargs.items()}
    except ValueError:
        raise d.unsupported(f, f"creating a {cls.__name__} from traced values inside compiled code") from None
    try:
        m = cls(*real_args, **real_kw)
    except Exception as e:      # noqa: BLE001
        raise UserException(e) from None
    if any(True for _ in m.parameters(recurse=False)) or any(True for _ in m.buffers(recurse=False)):
        raise d.unsupported(f, f"creating a {cls.__name__} (with its own parameters) inside compiled code",
                            "create the module once in __init__ and reuse it")
    from ..sources import ConstSource
    return d.wrap(m, ConstSource(id(m), m))


def _realize(v):
    from ..values import ListVar, TupleVar, DictVar
    if isinstance(v, (ListVar, TupleVar)):
        items = [_realize(x) for x in v.items]
        return items if isinstance(v, ListVar) else tuple(items)
    if isinstance(v, DictVar):
        real = {k: _realize(x) for k, x in v.items.items()}
        return real if v.cls is dict else v.cls(real)
    ro = v.real_object()
    if ro is NULL or getattr(v, "is_new", False) or getattr(v, "overlay", None):
        try:
            return v.as_python()
        except Exception:
            raise ValueError from None
    return ro


_ = BoundMethod
