"""Rules for attribute access and calls on functions, classes, modules and user objects.

Attribute lookup follows CPython: data descriptors on the type, then the instance (overlay, then the real
``__dict__`` through its source), then non-data descriptors and class attributes, then ``__getattr__``.
Python functions are inlined; built-in functions run for real when every argument is a known constant and
the function is pure; anything else asks the builtin and plugin tables or is reported unsupported.
"""
from __future__ import annotations

import enum
import math
import types
import weakref
from typing import Any

from ..emit import object_name
from . import rules as R
from . import dunders, exc_values, polyfills, subclasses
from .instance_attrs import attr_error as _attr_error, guard_absent, is_data_descriptor as _is_data_descriptor
from .instance_attrs import container_dict, lookup_type_attr, real_instance_attr  # noqa: F401  (lookup_type_attr: part of this module's interface)
from .interpreter import NULL, UserException
from .logging_calls import defer_logging, is_logger_method
from .purity import PURE_BUILTINS, is_numpy_function, is_pure_callable, plain_numpy_args  # noqa: F401  (is_pure_callable: part of this module's interface)
from .class_attrs import class_written
from .lookups import class_lookup, namespace_lookup, not_in_instance, resolved_type_attr, slot_empty
from .sources import AttrSource, ConstSource, ItemSource, Source, instance_dict_source
from .symbolic import SliceVar, SymbolicDomain
from .values import (SeqIterVar, is_python_class, BoundMethod, Const, DictVar, FuncVar, IterVar, ListVar, MethodOf, NotConst,
                     ObjectVar, PartialVar, SetVar, SuperVar, TupleVar, Value, is_immutable, is_plain_builtin,
                     make_mapping, make_tuple, NUMPY_VALUES)

def call_real(d: SymbolicDomain, f, fn, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """Call a pure function on the real values of known arguments. Containers go in as copies; a result that
    is (or holds) one of those copies is mapped back to the argument's value, so identity survives:
    ``dict.get(d, k)`` gives the very list stored in ``d``, not a copy of it."""
    memo: dict[int, tuple[Any, Value]] = {}
    a = [_real(x, memo) for x in args]
    kw = {k: _real(v, memo) for k, v in kwargs.items()}
    try:
        r = fn(*a, **kw)
    except Exception as e:      # noqa: BLE001 - the program's own exception
        raise UserException(e) from None
    return _from_real(d, r, memo)


def _real(v: Value, memo: dict) -> Any:
    t = type(v)
    if t is Const:
        return v.value
    if t is ListVar:
        r = [_real(x, memo) for x in v.items]
    elif t is TupleVar:
        items = tuple(_real(x, memo) for x in v.items)
        r = make_tuple(v.cls, items)
    elif t is DictVar:
        plain = {k: _real(x, memo) for k, x in v.items.items()}
        df = None if v.default_factory is None else _real(v.default_factory, memo)
        r = make_mapping(v.cls, plain, df)
    elif t is SetVar and v.frozen:       # frozenset.copy(fs) is fs: the result maps back to this value
        r = v.as_python()
    else:
        return v.as_python()
    memo[id(r)] = (r, v)
    return r


def _from_real(d: SymbolicDomain, r: Any, memo: dict) -> Value:
    hit = memo.get(id(r))
    if hit is not None and hit[0] is r:
        return hit[1]
    t = type(r)
    if t is list:
        return ListVar([_from_real(d, x, memo) for x in r])
    if t is tuple:
        return TupleVar([_from_real(d, x, memo) for x in r])
    if t is dict:
        return DictVar({k: _from_real(d, x, memo) for k, x in r.items()}, {k: d.from_python(k) for k in r})
    return d.from_python(r)


def all_const(args, kwargs) -> bool:
    try:
        for a in args:
            a.as_python()
        for a in kwargs.values():
            a.as_python()
        return True
    except NotConst:
        return False


# -- getattr ---------------------------------------------------------------------------------------------
_ITER_DUNDERS = {"__iter__": iter, "__reversed__": reversed}
_CONST_ITERABLES = (range, tuple, str, bytes, frozenset)


@R.GETATTR.register(Const)
def _const_getattr(d: SymbolicDomain, f, v: Const, name: str) -> Value:
    obj = v.value
    if d.class_writes and isinstance(obj, type):
        w = class_written(d, obj, name)
        if w is not NULL:
            return w
    for p in d.plugins:
        r = p.const_getattr(d, f, v, name)
        if r is not None:
            return r
    try:
        attr = getattr(obj, name)
    except Exception as e:          # noqa: BLE001
        if isinstance(e, AttributeError):
            namespace_lookup(d, obj, name)
        raise UserException(e) from None
    if name in _ITER_DUNDERS and type(obj) in _CONST_ITERABLES:
        # range(3).__iter__() is iter(range(3)): an iterator the trace advances, not a constant made by a call
        return BoundMethod(Const(_ITER_DUNDERS[name]), v)
    if isinstance(obj, (types.ModuleType, type)) and not isinstance(obj, enum.EnumMeta):
        if is_immutable(attr) and not isinstance(attr, enum.Enum) and type(attr) is not type:
            base = v.source or ConstSource(id(obj), obj)
            return d.wrap(attr, AttrSource(base, name))
        if not is_immutable(attr) and not callable(attr) and not isinstance(attr, types.ModuleType):
            base = v.source or ConstSource(id(obj), obj)
            return d.wrap(attr, AttrSource(base, name))
        namespace_lookup(d, obj, name, attr)        # a function, class or module, used as a constant
        if isinstance(obj, type) and type(attr) is types.MethodType:      # classmethod
            return BoundMethod(Const(attr.__func__), v)
        return Const(attr)
    if type(obj) is types.FunctionType and is_immutable(attr) and name in obj.__dict__:
        # an attribute set on a function (a flag): guarded at its source, like a module's
        return d.wrap(attr, AttrSource(v.source or ConstSource(id(obj), obj), name))
    if is_immutable(attr) or callable(attr) or isinstance(attr, types.ModuleType):
        if type(attr) is types.MethodType and isinstance(attr.__func__, types.FunctionType):
            return BoundMethod(Const(attr.__func__), v)
        return Const(attr)
    return d.from_python(attr) if is_immutable(obj) else d.wrap(attr, AttrSource(v.source, name) if v.source else None)


def object_getattr(d: SymbolicDomain, f, v: ObjectVar, name: str, generic: bool = False) -> Value:
    """``getattr(v, name)``; with ``generic`` it is ``object.__getattribute__`` (no class-defined hook)."""
    t = type(v.obj)
    if name == "__class__":
        return Const(t)
    if not generic:
        hook = lookup_type_attr(t, "__getattribute__")
        if type(hook) is types.FunctionType:
            try:
                return d.inline(f, hook, [v, Const(name)], {})
            except UserException as ue:
                ga = lookup_type_attr(t, "__getattr__")
                if isinstance(ue.exc, AttributeError) and type(ga) is types.FunctionType:
                    return d.inline(f, ga, [v, Const(name)], {})
                raise
    if name == "__dict__":          # the real dict would not show the trace's pending attribute writes
        if lookup_type_attr(t, "__dict__") is NULL:
            raise _attr_error(t.__name__, name)
        if v.is_new:
            return _attrs_dict(v)
        return _existing_attrs_dict(d, f, v)
    cattr = lookup_type_attr(t, name)
    if cattr is not NULL and type(cattr) is types.MemberDescriptorType and (v.is_new or name in v.overlay):
        x = v.overlay.get(name, NULL)
        if x is NULL:
            raise _attr_error(t.__name__, name)
        return x
    class_lookup(d, t, name, cattr)     # the outcome below rests on what the class holds (and lacks)
    if cattr is not NULL and _is_data_descriptor(cattr):
        return _descriptor_get(d, f, v, cattr, name, t)
    if v.attrs is not None and not v.is_new:      # its __dict__ was read: that dict holds its attributes now
        x = v.attrs.items.get(name, NULL)
        if x is not NULL:
            return x
    elif name in v.overlay:
        x = v.overlay[name]
        if x is not NULL:
            return x
    elif not v.is_new:
        inst = getattr(v.obj, "__dict__", None)
        if inst is not None and name in inst:
            return d.wrap(inst[name], _instance_attr_source(d, v, name))
        not_in_instance(d, v.source, v.obj, name)
    if d.class_writes and (w := class_written(d, t, name)) is not NULL:
        return w                # a class attribute the trace wrote (plain data: no descriptor)
    if cattr is not NULL:
        return _descriptor_get(d, f, v, cattr, name, t)
    ga = lookup_type_attr(t, "__getattr__")
    class_lookup(d, t, "__getattr__", ga)
    if ga is not NULL and type(ga) is types.FunctionType:
        return d.inline(f, ga, [v, Const(name)], {})
    raise _attr_error(t.__name__, name)     # its absence from the instance is guarded above


R.GETATTR.register(ObjectVar)(object_getattr)


def _instance_attr_source(d: SymbolicDomain, v: ObjectVar, name: str) -> Source | None:
    """Where the generic lookup found attribute ``name`` of ``v``: its instance dict's item, read past a class's
    own ``__getattribute__`` (see ``InstDictSource``); ``v.source.name`` for other classes."""
    if v.source is None:
        return None
    inst = instance_dict_source(v.source, v.obj)
    if type(inst) is AttrSource:
        return AttrSource(v.source, name)
    d.cg.hoist(inst)        # read once per call
    return ItemSource(inst, name)


def _attrs_dict(v: ObjectVar) -> DictVar:
    """The ``__dict__`` of a new object: a dict whose items are the object's overlay itself, so writes
    through either show in both."""
    if v.attrs is None:
        v.attrs = DictVar({}, {k: Const(k) for k in v.overlay})
        v.attrs.items = v.overlay
    return v.attrs


def _existing_attrs_dict(d: SymbolicDomain, f, v: ObjectVar) -> DictVar:
    """The ``__dict__`` of an object that existed before the call: its real dict, wrapped once, with the
    trace's pending attribute writes applied. From then on it is the object's attribute store: attribute
    writes also go into it (setattrs.generic_setattr) and attribute reads come from it, so ``d = o.__dict__;
    o.c = 1; d['c']`` and ``o.__dict__['a'] = 1; o.a`` see each other as in CPython."""
    if v.attrs is not None:
        return v.attrs
    if v.source is None:
        raise d.unsupported(f, "reading __dict__ of an object reached without a source")
    dv = d.wrap(v.obj.__dict__, instance_dict_source(v.source, v.obj))
    if type(dv) is not DictVar:
        raise d.unsupported(f, f"reading __dict__ of a {type(v.obj).__name__} object")
    for name, x in v.overlay.items():
        if x is NULL:
            dv.items.pop(name, None)
            dv.keys.pop(name, None)
        else:
            dv.items[name] = x
            dv.keys.setdefault(name, Const(name))
        d.mark_mutated(dv)
    v.attrs = dv
    return dv


def _descriptor_get(d: SymbolicDomain, f, v: Value, cattr: Any, name: str, owner: type) -> Value:
    t = type(cattr)
    if t is types.FunctionType:
        return BoundMethod(Const(cattr), v)
    if t is staticmethod:
        return Const(cattr.__func__)
    if t is classmethod:
        return BoundMethod(Const(cattr.__func__), Const(owner))
    if t is property:
        if cattr.fget is None:
            raise UserException(AttributeError(f"property {name!r} has no getter"))
        return d.call(f, d.wrap(cattr.fget, None) if type(cattr.fget) is not types.FunctionType
                      else Const(cattr.fget), [v], {})
    get = lookup_type_attr(t, "__get__")
    if get is NULL:
        return d.wrap(cattr, AttrSource(ConstSource(id(owner), owner), name))
    if type(get) is types.FunctionType:       # a user descriptor written in Python
        return d.inline(f, get, [d.wrap(cattr, None), v, Const(owner)], {})
    ro = v.real_object()
    if t in (types.MemberDescriptorType, types.GetSetDescriptorType) and ro is not NULL and v.source is not None \
            and not getattr(v, "is_new", False) and name not in getattr(v, "overlay", {}):
        try:
            real = cattr.__get__(ro, owner)
        except AttributeError as e:     # an unset __slots__ member
            slot_empty(d, v.source, cattr, name)
            raise UserException(e) from None
        except Exception as e:  # noqa: BLE001
            raise UserException(e) from None
        return d.wrap(real, AttrSource(v.source, name))
    if t.__name__ == "_tuplegetter" and isinstance(v, TupleVar):
        return v.items[owner._fields.index(name)]
    if t.__name__ == "_lru_cache_wrapper" and t.__module__ == "functools":    # functools.cache on a method
        return BoundMethod(Const(cattr), v)
    if hasattr(t, "__get__") and t.__module__ == "functools" and t.__name__ == "cached_property":
        raise d.unsupported(f, f"functools.cached_property {name!r}")
    if t in (types.WrapperDescriptorType, types.MethodDescriptorType):     # methods written in C
        return BoundMethod(Const(cattr), v)
    raise d.unsupported(f, f"attribute {name!r} is a {t.__name__} descriptor, which is not supported")


@R.GETATTR.register(TupleVar, ListVar, DictVar, SetVar)
def _container_getattr(d, f, v, name):
    if isinstance(v, TupleVar) and v.cls is not None:
        fields = getattr(v.cls, "_fields", None) or getattr(v.cls, "__match_args__", None) or ()
        if name in fields:       # namedtuples and structseqs (torch.return_types)
            return v.items[fields.index(name)]
        cattr = lookup_type_attr(v.cls, name)
        if cattr is not NULL and lookup_type_attr(tuple, name) is not cattr:
            return _descriptor_get(d, f, v, cattr, name, v.cls)
    if name == "__class__":
        return Const(v.python_type())
    cls = v.python_type()
    if name == "__dict__" and (dv := container_dict(d, v)) is not None:
        return dv
    cattr = lookup_type_attr(cls, name)
    # what a Python subclass defines (a property, a method, a class attribute) is read as CPython reads it:
    # a data descriptor before the instance __dict__, the rest after
    own = cattr is not NULL and is_python_class(next(k for k in cls.__mro__ if name in k.__dict__))
    if own and _is_data_descriptor(cattr):
        return _descriptor_get(d, f, v, cattr, name, cls)
    inst = real_instance_attr(d, v, cattr, name)
    if inst is not NULL:
        return inst
    if own:
        return _descriptor_get(d, f, v, cattr, name, cls)
    if name == "default_factory" and isinstance(v, DictVar):
        return v.default_factory or Const(None)
    if lookup_type_attr(v.python_type(), name) is NULL:
        guard_absent(d, v, name)
        raise _attr_error(v.python_type().__name__, name)
    return MethodOf(v, name)


@R.GETATTR.register(FuncVar)
def _funcvar_getattr(d, f, v: FuncVar, name):
    if name in v.attrs:
        return v.attrs[name]
    if name == "__dict__":          # made on first read; later attribute writes by name land in it too
        v.attrs["__dict__"] = DictVar({}, {})
        return v.attrs["__dict__"]
    if "__dict__" in v.attrs and name in v.attrs["__dict__"].items:
        return v.attrs["__dict__"].items[name]
    if name == "__annotations__":   # one dict, made on first read (CPython keeps the one it made)
        a = v.annotations
        if isinstance(a, TupleVar):         # MAKE_FUNCTION's (name, value, ...) pairs
            a = DictVar({d.as_python(f, k): x for k, x in zip(a.items[::2], a.items[1::2])},
                        {d.as_python(f, k): k for k in a.items[::2]})
        v.attrs[name] = a if isinstance(a, DictVar) else DictVar({}, {})
        return v.attrs[name]
    doc = v.code.co_consts[0] if v.code.co_consts and type(v.code.co_consts[0]) is str else None
    simple = {"__name__": v.code.co_name, "__qualname__": v.qualname, "__code__": v.code,
              "__module__": v.f_globals.get("__name__"), "__doc__": doc}
    if name in simple:
        return d.const(simple[name])
    if name == "__defaults__":
        return v.defaults or Const(None)
    raise d.unsupported(f, f"reading {name!r} of a function made inside the compiled code")


@R.GETATTR.register(BoundMethod)
def _bound_getattr(d, f, v: BoundMethod, name):
    if name == "__self__":
        return v.self_
    if name == "__func__":
        return v.func
    return d.getattr(f, v.func, name)


@R.GETATTR.register(SuperVar)
def _super_getattr(d, f, v: SuperVar, name):
    obj = v.obj
    start_t = obj.value if type(obj) is Const and isinstance(obj.value, type) else obj.python_type()
    mro = start_t.__mro__
    i = mro.index(v.cls) + 1 if v.cls in mro else len(mro)
    for k in mro[i:]:
        if name in k.__dict__:
            a = k.__dict__[name]
            if type(obj) is Const and isinstance(obj.value, type):
                if type(a) is classmethod:
                    return BoundMethod(Const(a.__func__), obj)
                if type(a) is staticmethod:
                    return Const(a.__func__)
                return Const(a)
            return _descriptor_get(d, f, obj, a, name, start_t)
    raise UserException(AttributeError(f"'super' object has no attribute '{name}'"))


@R.METHOD.register(IterVar)
def _iter_method(d, f, v, name, args, kwargs):
    if name == "__iter__":
        return v
    if name != "__next__":
        from .generators import generator_method
        return generator_method(d, f, v, name, args, kwargs)
    from .generators import stop_if_done
    return stop_if_done(d, f, *d.next(f, v))


def _declined(d, f, args, kwargs):
    return NotImplemented


# -- calls -----------------------------------------------------------------------------------------------
def compiled_original(fn: types.FunctionType) -> tuple[str, Any] | None:
    """(attribute, function) that the compiled wrapper ``fn`` runs: ember.compile's dispatcher (its cache's
    function, ``__wrapped__``) or torch.compile's (``_torchdynamo_inline``); None for other functions.
    Called from compiled code, the wrapper's own machinery (a lock, its cache) is not the program: as
    torch.compile does for nested compiled functions, the outer trace runs the original and its compiler
    (backend, options) applies to it."""
    own = fn.__dict__
    cache = own.get("__ember_cache__")
    if cache is not None and getattr(cache, "fn", None) is not None and own.get("__wrapped__") is cache.fn:
        return "__wrapped__", cache.fn
    orig = own.get("_torchdynamo_inline")          # torch.compile's wrappers (a disable wrapper has none)
    if orig is not None and callable(orig) and not own.get("_torchdynamo_disable"):
        return "_torchdynamo_inline", orig
    return None


def _builtin_rule(fn: Any) -> Any:
    from .builtins_sym import BUILTIN_RULES, classmethod_rule
    try:
        return BUILTIN_RULES.get(fn) or classmethod_rule(fn)
    except TypeError:       # an unhashable callable
        return None


@R.CALL.register(Const)
def _const_call(d: SymbolicDomain, f, v: Const, args, kwargs) -> Value:
    fn = v.value
    for p in d.plugins:
        r = p.call(d, f, fn, args, kwargs)
        if r is not None:
            return r
    rule = _builtin_rule(fn)
    if rule is not None:
        r = rule(d, f, args, kwargs)
        if r is not NotImplemented:
            return r
    if is_logger_method(fn, args):
        return defer_logging(d, f, v, args, kwargs, _fn_name(fn))
    if getattr(fn, "__ember_disable__", False):
        raise d.unsupported(f, f"call to {_fn_name(fn)}, which is marked ember.disable",
                            "it runs eagerly; compile the code around it separately")
    if polyfills.marked_constant(fn) and all_const(args, kwargs):      # assume_constant_result: run it once
        return call_real(d, f, fn, args, kwargs)
    t = type(fn)
    if t is types.BuiltinMethodType and isinstance(fn.__self__, BaseException) \
            and fn.__name__ == "with_traceback":       # the trace's own exception object: run it
        return Const(fn(*[d.as_python(f, a) for a in args]))
    if t is types.FunctionType:
        orig = compiled_original(fn)
        if orig is not None:        # a compiled function called from compiled code: its code is traced here
            return d.call(f, d.wrap(orig[1], AttrSource(v.source, orig[0]) if v.source else None), args, kwargs)
        return d.inline(f, fn, args, kwargs, v.source)
    if t is types.MethodType:
        return d.call(f, BoundMethod(Const(fn.__func__), d.wrap(fn.__self__, None)), args, kwargs)
    if isinstance(fn, type):
        return construct(d, f, fn, args, kwargs)
    if t in (types.MethodDescriptorType, types.WrapperDescriptorType) and args \
            and isinstance(args[0], (TupleVar, ListVar, DictVar, SetVar)) and fn.__objclass__ in (tuple, list, dict, set):
        # dict.get(d, k), super().get(k) in a dict subclass: the base type's own method, not an override
        return R.METHOD.find(type(args[0]))(d, f, args[0], fn.__name__, list(args[1:]), kwargs)
    if any(fn is n for n in subclasses.NEWS) and args:      # super().__new__(cls), list.__new__(list)
        # before the pure-builtin path: dict.__new__ is a builtin of dict, and run on the real class it made a
        # real (mutable) instance that the trace then held as a constant
        return subclasses.new_instance(d, f, fn.__self__, d.as_python(f, args[0]), args[1:], kwargs)
    if is_pure_callable(fn):
        r = _call_pure(d, f, fn, args, kwargs)
        if r is not None:
            return r
    if t is types.BuiltinFunctionType and not is_plain_builtin(fn):
        recv = d.wrap(fn.__self__, None)
        if type(recv) is not Const:         # a Const receiver would give back this same builtin method
            return d.call_method(f, recv, fn.__name__, args, kwargs)
    if t in (types.MethodDescriptorType, types.WrapperDescriptorType) and args and isinstance(args[0], ObjectVar) \
            and subclasses.applies(fn, args[0], d):
        # OrderedDict.__setitem__(self, k, v), super().add(x) in a new dict/set-subclass object: its items
        return subclasses.part_method(d, f, args[0], fn.__name__, list(args[1:]), kwargs)
    if t is types.WrapperDescriptorType and fn.__objclass__ is object and fn.__name__ in dunders.COMPARE \
            and len(args) == 2 and not kwargs:      # super().__ne__(other): object's own slot, not an override
        return dunders.object_compare(d, f, fn.__name__, args[0], args[1])
    if t in (types.MethodDescriptorType, types.WrapperDescriptorType) and args and isinstance(args[0], ObjectVar) \
            and lookup_type_attr(type(args[0].obj), fn.__name__) is fn:
        r = polyfills.C_METHOD_RULES.get(fn, _declined)(d, f, args, kwargs)
        if r is NotImplemented:
            r = subclasses.scalar_base_call(d, f, fn, args, kwargs)     # str.split on a TorchVersion
        if r is not NotImplemented:
            return r
        raise d.unsupported(f, f"calling {_fn_name(fn)} (a method written in C) on a "
                               f"{type(args[0].obj).__name__} object")
    if t in (types.MethodDescriptorType, types.WrapperDescriptorType) and args and type(args[0]) is not Const:
        return d.call_method(f, args[0], fn.__name__, args[1:], kwargs)
    return _const_call_other(d, f, v, args, kwargs)


def _const_call_other(d: SymbolicDomain, f, v: Const, args, kwargs) -> Value:
    """The rest of ``_const_call``: cached wrappers, weak references, declined number slots, ``__call__``."""
    fn = v.value
    t = type(fn)
    inner = cache_wrapped(fn)
    if inner is not None:
        return d.inline(f, inner, args, kwargs)
    if t is weakref.ReferenceType and not args and not kwargs:     # r() of a reference to a traced object
        referent = fn()
        v = d.by_id.get(id(referent)) if referent is not None else Const(None)
        if v is not None:
            return v
    declined = dunders.number_slot_declines(fn, args, kwargs)
    if declined is not None:
        return declined
    call = resolved_type_attr(d, t, "__call__")
    if type(call) is types.FunctionType:
        return d.inline(f, call, [v] + args, kwargs)
    raise d.unsupported(f, f"call to {_fn_name(fn)} is not supported",
                        "ember captures Python functions, builtins on constants, and torch operations")


def _call_pure(d: SymbolicDomain, f, fn, args, kwargs) -> Value | None:
    """A pure builtin on known values. Lazy iterators among the arguments (``",".join(str(x) for x in xs)``)
    are drained first, as the builtin itself would; None when some argument is not a known value."""
    if any(isinstance(a, IterVar) for a in args):
        args = [ListVar(d.unpack_all(f, a)) if isinstance(a, IterVar) else a for a in args]
        if not all_const(args, kwargs):
            raise d.unsupported(f, f"call to {_fn_name(fn)} on an iterator of values that are not constants")
    if not all_const(args, kwargs):
        return None
    if is_numpy_function(fn):       # on plain numbers only, and only a number (not an array) comes back
        a, kw = [x.as_python() for x in args], {k: x.as_python() for k, x in kwargs.items()}
        r = call_real(d, f, fn, args, kwargs) if plain_numpy_args(a, kw) else None
        return r if type(r) is Const and is_immutable(r.value) else None
    return call_real(d, f, fn, args, kwargs)


def _fn_name(fn: Any) -> str:
    try:
        mod = getattr(fn, "__module__", None)
    except Exception:       # noqa: BLE001 - see object_name
        mod = None
    name = object_name(fn)
    return f"{mod}.{name}" if isinstance(mod, str) and mod and mod != "builtins" else name


def construct(d: SymbolicDomain, f, cls: type, args, kwargs) -> Value:
    if issubclass(cls, BaseException):
        if all_const(args, kwargs):
            return call_real(d, f, cls, args, kwargs)
        if exc_values.is_builtin_exception(cls) and not kwargs:
            return exc_values.make(d, cls, list(args))
        raise d.unsupported(f, f"creating {cls.__name__} with non-constant arguments")
    if isinstance(cls, enum.EnumMeta) and all_const(args, kwargs):
        return call_real(d, f, cls, args, kwargs)
    new = lookup_type_attr(cls, "__new__")
    if type(new) is staticmethod:
        new = new.__func__
    if new in subclasses.NEWS and type(cls).__call__ is type.__call__ and subclasses.container_base(cls) is not None:
        return subclasses.construct(d, f, cls, args, kwargs, lookup_type_attr)
    if new is object.__new__ and type(cls).__call__ is type.__call__:       # plain classes, ABCs, generics
        ov = bare_instance(d, cls)
        init = lookup_type_attr(cls, "__init__")
        if type(init) is types.FunctionType:
            r = d.inline(f, init, [ov] + args, kwargs)
            if not (type(r) is Const and r.value is None):
                raise UserException(TypeError("__init__() should return None"))
        elif init is not object.__init__:
            raise d.unsupported(f, f"creating {cls.__name__}: its __init__ is not Python code")
        elif args or kwargs:
            raise UserException(TypeError(f"{cls.__name__}() takes no arguments"))
        return ov
    if new is tuple.__new__ and type(cls).__call__ is type.__call__ and not is_immutable_type(cls):
        # a tuple subclass without a __new__ of its own: tuple.__new__(cls, iterable), then its __init__
        obj = d.call(f, Const(tuple.__new__), [Const(cls)] + args, kwargs)
        init = lookup_type_attr(cls, "__init__")
        if type(init) is types.FunctionType:
            d.inline(f, init, [obj] + args, kwargs)
        return obj
    if issubclass(cls, NUMPY_VALUES) and all_const(args, kwargs):      # np.finfo's __new__ calls into C
        return call_real(d, f, cls, args, kwargs)
    if type(new) is types.FunctionType:
        obj = d.inline(f, new, [Const(cls)] + args, kwargs)
        init = lookup_type_attr(cls, "__init__")
        if isinstance(obj, ObjectVar) and obj.base_part is not None and issubclass(obj.python_type(), cls):
            subclasses.run_init(d, f, obj, args, kwargs, lookup_type_attr)     # a container subclass's __init__
        elif type(init) is types.FunctionType and obj.python_type() is cls:
            d.inline(f, init, [obj] + args, kwargs)
        return obj
    if is_pure_callable(cls) and all_const(args, kwargs) and is_immutable_type(cls):
        return call_real(d, f, cls, args, kwargs)
    if subclasses.is_structseq(cls) and len(args) == 1 and not kwargs:
        return subclasses.structseq(d, f, cls, args[0])
    raise d.unsupported(f, f"creating a {cls.__qualname__} object in compiled code is not supported")


def bare_instance(d: SymbolicDomain, cls: type) -> ObjectVar:
    """``object.__new__(cls)``: a new instance, its ``__init__`` not run."""
    try:
        obj = object.__new__(cls)
    except TypeError as e:
        raise UserException(e) from None
    ov = ObjectVar(obj, None, is_new=True)
    d.new_objects.append(ov)
    return ov


def is_immutable_type(cls: type) -> bool:
    return cls in (int, float, bool, complex, str, bytes, frozenset, range, slice, type(None)) \
        or issubclass(cls, NUMPY_VALUES)


@R.CALL.register(FuncVar)
def _funcvar_call(d, f, v, args, kwargs):
    return d.inline(f, v, args, kwargs)


@R.CALL.register(BoundMethod)
def _bound_call(d, f, v, args, kwargs):
    return d.call(f, v.func, [v.self_] + args, kwargs)


@R.CALL.register(MethodOf)
def _methodof_call(d, f, v, args, kwargs):
    rule = R.METHOD.find(type(v.recv))
    if rule is None:
        raise d.unsupported(f, f"method {v.name} of {v.recv.describe()}")
    return rule(d, f, v.recv, v.name, args, kwargs)


@R.CALL.register(PartialVar)
def _partial_call(d, f, v, args, kwargs):
    return d.call(f, v.func, v.args + args, {**v.kwargs, **kwargs})


def cache_wrapped(fn: Any) -> types.FunctionType | None:
    """The Python function under a ``functools.lru_cache`` / ``functools.cache`` wrapper, or None. The trace
    calls it directly: its result depends only on the arguments, which the trace has; the cache itself (a C
    object) is neither read nor filled, so a program whose cached function has side effects differs."""
    t = type(fn)
    if t.__name__ == "_lru_cache_wrapper" and t.__module__ == "functools":
        inner = getattr(fn, "__wrapped__", None)
        if type(inner) is types.FunctionType:
            return inner
    return None


@R.CALL.register(ObjectVar)
def _object_call(d, f, v, args, kwargs):
    if polyfills.marked_constant(v.obj) and all_const(args, kwargs):
        return call_real(d, f, v.obj, args, kwargs)
    inner = cache_wrapped(v.obj)
    if inner is not None:
        return d.inline(f, inner, args, kwargs)
    call = resolved_type_attr(d, type(v.obj), "__call__")      # a __call__ patched onto the class later runs
    if call is NULL:
        raise UserException(TypeError(f"'{type(v.obj).__name__}' object is not callable"))
    if type(call) is types.FunctionType:
        return d.inline(f, call, [v] + args, kwargs)
    raise d.unsupported(f, f"calling a {type(v.obj).__name__} object")


# -- iteration, truth and len of objects -----------------------------------------------------------------
@R.ITER.register(ObjectVar)
def _object_iter(d, f, v):
    it = lookup_type_attr(type(v.obj), "__iter__")
    if it is NULL:
        gi = lookup_type_attr(type(v.obj), "__getitem__")
        if gi is NULL:
            raise UserException(TypeError(f"'{type(v.obj).__name__}' object is not iterable"))
        return IterVar(_getitem_iter(d, f, v), "getitem iterator")
    r = d.call_method(f, v, "__iter__", [], {})
    if isinstance(r, ObjectVar):
        return IterVar(_next_iter(d, f, r), "user iterator")
    return r


def _getitem_iter(d, f, v):
    i = 0
    while True:
        try:
            x = d.getitem(f, v, Const(i))
        except UserException as ue:
            if isinstance(ue.exc, (IndexError, StopIteration)):
                return
            raise
        yield x
        i += 1


def _next_iter(d, f, it):
    while True:
        try:
            x = d.call_method(f, it, "__next__", [], {})
        except UserException as ue:
            if isinstance(ue.exc, StopIteration):
                return
            raise
        yield x


@R.ITER.register(IterVar)
def _iter_iter(d, f, v):
    return v


@R.ITER.register(Const)
def _const_iter(d, f, v):
    try:
        items = list(iter(v.value)) if (is_immutable(v.value) or isinstance(v.value, enum.EnumMeta)) else NULL
    except Exception as e:      # noqa: BLE001
        raise UserException(e) from None
    if items is NULL:
        raise d.unsupported(f, f"iterating over {v.describe()}")
    return SeqIterVar([d.from_python(x) for x in items], f"iterator over {v.describe()}")


@R.GETITEM.register(ObjectVar)
def _object_getitem(d, f, v, k):
    if _typing_form(v.obj) and not v.is_new and not v.mutated:
        return _const_getitem(d, f, Const(v.obj), k)     # typing.List[X], Optional[X]: folded, not traced
    if lookup_type_attr(type(v.obj), "__getitem__") is NULL:
        raise UserException(TypeError(f"'{type(v.obj).__name__}' object is not subscriptable"))
    return d.call_method(f, v, "__getitem__", [k], {})


@R.SETITEM.register(ObjectVar)
def _object_setitem(d, f, v, k, value):
    name = "__setitem__" if value is not NULL else "__delitem__"
    if lookup_type_attr(type(v.obj), name) is NULL:
        raise UserException(TypeError(f"'{type(v.obj).__name__}' object does not support item assignment"))
    d.call_method(f, v, name, [k] + ([value] if value is not NULL else []), {})


def _real_key(k: Value) -> Any:
    """The real object a subscript key stands for when it is known without running the trace: a constant, an
    object that existed before the call, or a tuple of those; NULL otherwise."""
    if type(k) is Const:
        return k.value
    if (type(k) is TupleVar and k.cls is None) or type(k) is ListVar:     # ListVar: Callable[[int], int]
        keys = [_real_key(x) for x in k.items]
        return NULL if any(x is NULL for x in keys) else (tuple(keys) if type(k) is TupleVar else keys)
    if type(k) is ObjectVar and not k.is_new and not k.mutated:
        return k.obj
    return NULL


def _typing_form(x: Any) -> bool:
    """typing.List, Optional, Union, Dict, Callable... and list[int]: subscripting them makes a new alias (pure)."""
    return type(x).__module__ == "typing" or isinstance(x, (types.GenericAlias, types.UnionType))


@R.GETITEM.register(Const)
def _const_getitem(d, f, v, k):
    key = _real_key(k) if isinstance(v.value, type) or _typing_form(v.value) else NULL
    if key is not NULL:       # typing generics: list[int], Color['RED'], OrderedSet[T] (T a module's TypeVar)
        try:
            return Const(v.value[key])
        except Exception as e:      # noqa: BLE001
            raise UserException(e) from None
    if type(k) is SliceVar or not is_immutable(v.value):
        raise d.unsupported(f, f"indexing {v.describe()}")
    try:
        return d.from_python(v.value[d.as_python(f, k)])
    except UserException:
        raise
    except Exception as e:      # noqa: BLE001
        raise UserException(e) from None


__all__ = ["lookup_type_attr", "object_getattr", "construct",
           "call_real", "all_const", "is_pure_callable", "math", "ItemSource"]
