"""Symbolic versions of the Python builtins (and a few stdlib functions) for arguments that are not all
known constants: ``len`` of a list of tensors, ``zip`` over modules, ``isinstance`` of a tensor, ``sum`` of
tensors... A rule returns ``NotImplemented`` to fall back to the generic pure-call path."""
from __future__ import annotations

import builtins
import collections
import functools
import operator
import traceback
import types
import weakref
from typing import Any, Callable

from .containers import DictView, sort_values
from .identity import existing_object, guard_address
from .interpreter import NULL, UserException
from .lookups import resolved_type_attr
from .objects import all_const, bare_instance, call_real, construct, lookup_type_attr
from .symbolic import SymbolicDomain
from .values import (BoundMethod, Const, DictVar, FuncVar, IterVar, ListVar, MethodOf, NotConst, ObjectVar,
                     PartialVar, SetVar, SuperVar, TupleVar, Value)

BUILTIN_RULES: dict[Any, Callable] = {}


def rule(*fns):
    def deco(h):
        for fn in fns:
            BUILTIN_RULES[fn] = h
        return h
    return deco


def _items(d, f, v) -> list[Value]:
    if isinstance(v, DictView):
        return v.list()
    return d.unpack_all(f, v)


def type_of(v: Value) -> type:
    return v.python_type()


@rule(len)
def _len(d, f, args, kwargs):
    if len(args) != 1:
        raise UserException(TypeError(f"len() takes exactly one argument ({len(args)} given)"))
    n = d.len(f, args[0])
    return n if isinstance(n, Value) else Const(n)     # a symbolic size stays a value


@rule(isinstance)
def _isinstance(d, f, args, kwargs):
    v, cls = args
    c = d.as_python(f, cls)
    if type(v) is Const:
        try:
            return Const(isinstance(v.value, c))
        except TypeError as e:
            raise UserException(e) from None
    return Const(_instance_of(d, f, v, c))


# Metaclass checks whose answer is the instance's type (ABCMeta, typing's _ProtocolMeta: their checks run C
# code the interpreter does not inline) or torch's own (torch.nn.Parameter's, decided by the type ember tracks).
_TYPE_DECIDED = ("abc", "_py_abc", "typing", "torch")


def _instance_of(d, f, v: Value, c) -> bool:
    """CPython's ``isinstance`` of a traced value: a tuple is any of its members; an exact type match is True;
    otherwise the metaclass's ``__instancecheck__`` decides: the value's own answer (a tensor's dtype and device
    for torch.FloatTensor), a Python-level check inlined (it may read the instance's attributes), or the type."""
    if type(c) is tuple:
        return any(_instance_of(d, f, v, m) for m in c)
    t = type_of(v)
    if t is c:
        return True
    own = v.instance_check(c)
    if own is not None:
        return own
    check = lookup_type_attr(type(c), "__instancecheck__")
    if isinstance(check, types.FunctionType) and not check.__module__.split(".")[0] in _TYPE_DECIDED:
        return d.truth(f, d.call(f, Const(check), [Const(c), v], {}))
    try:
        return issubclass(t, c)
    except TypeError as e:
        raise UserException(e) from None


@rule(issubclass)
def _issubclass(d, f, args, kwargs):
    return call_real(d, f, issubclass, args, kwargs) if all_const(args, kwargs) else NotImplemented


@rule(type)
def _type(d, f, args, kwargs):
    if len(args) == 1 and not kwargs:
        return Const(type_of(args[0]))
    raise d.unsupported(f, "creating a class with type(name, bases, dict)")


@rule(callable)
def _callable(d, f, args, kwargs):
    v = args[0]
    if type(v) is Const:
        return Const(callable(v.value))
    if isinstance(v, (FuncVar, BoundMethod, PartialVar, MethodOf)):
        return Const(True)
    if isinstance(v, ObjectVar):        # a __call__ defined on the class later makes it callable: guarded
        return Const(resolved_type_attr(d, type(v.obj), "__call__") is not NULL)
    return Const(lookup_type_attr(type_of(v), "__call__") is not NULL)


@rule(getattr)
def _getattr(d, f, args, kwargs):
    name = d.as_python(f, args[1])
    if type(name) is not str:
        raise UserException(TypeError("attribute name must be string"))
    try:
        return d.getattr(f, args[0], name)
    except UserException as ue:
        if len(args) > 2 and isinstance(ue.exc, AttributeError):
            return args[2]
        raise


@rule(hasattr)
def _hasattr(d, f, args, kwargs):
    try:
        d.getattr(f, args[0], d.as_python(f, args[1]))
        return Const(True)
    except UserException as ue:
        if isinstance(ue.exc, AttributeError):
            return Const(False)
        raise


@rule(setattr)
def _setattr(d, f, args, kwargs):
    d.setattr(f, args[0], d.as_python(f, args[1]), args[2])
    return Const(None)


@rule(delattr)
def _delattr(d, f, args, kwargs):
    d.delattr(f, args[0], d.as_python(f, args[1]))
    return Const(None)


@rule(traceback.clear_frames)
def _clear_frames(d, f, args, kwargs):
    """Only frees the frames' locals for the collector (unittest's assertRaises calls it): nothing to replay,
    and a traceback seen by the trace holds ember's own frames, which must not be cleared."""
    return Const(None)


@rule(format)
def _format(d, f, args, kwargs):
    if kwargs or not 1 <= len(args) <= 2:
        return NotImplemented
    return d.format(f, args[0], args[1] if len(args) > 1 else None)


@rule(iter)
def _iter(d, f, args, kwargs):
    if len(args) != 1:
        raise d.unsupported(f, "iter(callable, sentinel)")
    return d.iter(f, args[0])


@rule(next)
def _next(d, f, args, kwargs):
    it = args[0]
    has_next = isinstance(it, ObjectVar) and lookup_type_attr(type_of(it), "__next__") is not NULL
    if not isinstance(it, IterVar) and not has_next:     # IterVar subclasses too: a container's SeqIterVar
        if type(it) is Const and hasattr(type(it.value), "__next__"):
            return NotImplemented
        raise UserException(TypeError(f"'{type_of(it).__name__}' object is not an iterator"))
    ok, v = d.next(f, it)
    if not ok and len(args) > 1:
        return args[1]
    from .generators import stop_if_done
    return stop_if_done(d, f, ok, v)


@rule(list)
def _list(d, f, args, kwargs):
    return ListVar(_items(d, f, args[0]) if args else [])


@rule(tuple)
def _tuple(d, f, args, kwargs):
    if args and type(args[0]) is TupleVar and args[0].cls is None:
        return args[0]          # tuple(t) of an exact tuple is t itself, as in CPython
    return TupleVar(_items(d, f, args[0]) if args else [])


@rule(set, frozenset)
def _set(d, f, args, kwargs):
    s = SetVar({}, frozen=False)
    for x in (_items(d, f, args[0]) if args else []):
        s.items[d.hash_key(f, x)] = x
    return s


def _set_frozen(d, f, args, kwargs):
    if args and type(args[0]) is SetVar and args[0].frozen:
        return args[0]          # frozenset(fs) of an exact frozenset is fs itself, as in CPython
    s = _set(d, f, args, kwargs)
    s.frozen = True
    return s


BUILTIN_RULES[frozenset] = _set_frozen


@rule(dict)
def _dict(d, f, args, kwargs):
    r = DictVar({}, {})
    if args:
        d.call(f, MethodOf(r, "update"), [args[0]], {})
    for k, v in kwargs.items():
        r.items[k] = v
        r.keys.setdefault(k, Const(k))
    r.mutated = False
    return r


def _gen(fn, materialize: bool = False):
    """A builtin returning a lazy iterator, implemented as a Python generator over values. With
    ``materialize``, over containers only (nothing runs while iterating them), the items are taken at once,
    so the iterator can be rebuilt at a graph break (``for i, (a, b) in enumerate(zip(xs, ys))``)."""
    def h(d, f, args, kwargs):
        name = fn.__name__.strip("_")
        if materialize and name in ("enumerate", "zip"):    # these call iter() on their iterables at once
            n = 1 if name == "enumerate" else len(args)     # enumerate(it, start): start is a number
            args = [a if _is_container(a) or i >= n else d.iter(f, a) for i, a in enumerate(args)]
        iterables = args[:1] if name == "enumerate" else args       # (enumerate's start is a number)
        if materialize and all(_is_container(a) for a in iterables):
            from .values import SeqIterVar
            return SeqIterVar(list(fn(d, f, *args, **kwargs)), f"{name} iterator")
        return IterVar(fn(d, f, *args, **kwargs), name, None, _remake(name, args, kwargs))
    return h


def _remake(name: str, args: list, kwargs: dict):
    """How to make the iterator again, unstarted (``return zip(xs, gen_fn(t))``: see the IterVar glue): the
    builtin and its arguments, when each iterable argument is a container or a generator (remade on its own,
    unstarted, or refused); None when one is a user iterable, whose ``__iter__`` would run twice."""
    real = _REMAKE.get(name)
    if real is None:        # itertools' iterators and reversed(): not remade
        return None
    its = args[1:] if name in ("map", "filter") else args[:1] if name == "enumerate" else args
    if all(_is_container(a) or (type(a) is IterVar and a.frame is not None) for a in its):
        return real, list(args), dict(kwargs)
    return None


_REMAKE = {"zip": zip, "map": map, "filter": filter, "enumerate": enumerate}


def _is_container(v) -> bool:
    from .values import SeqIterVar, is_immutable
    if isinstance(v, (TupleVar, ListVar, DictView, DictVar, SetVar)):
        return True
    if type(v) is Const:
        return is_immutable(v.value) and isinstance(v.value, (range, str, bytes, tuple, frozenset))
    return type(v) is SeqIterVar and isinstance(v.seq, list) and v.pos == 0     # a fresh snapshot iterator


def _enumerate(d, f, it, start=Const(0)):
    it = d.iter(f, it)
    i = d.as_python(f, start)
    while True:
        ok, v = d.next(f, it)
        if not ok:
            return
        yield TupleVar([Const(i), v])
        i += 1


def _zip(d, f, *its, strict=Const(False)):
    its = [d.iter(f, x) for x in its]
    if not its:
        return
    while True:
        row = []
        for n, it in enumerate(its):
            ok, v = d.next(f, it)
            if not ok:
                if d.as_python(f, strict) and (n or any(d.next(f, o)[0] for o in its[1:])):
                    raise UserException(ValueError("zip() argument lengths differ"))
                return
            row.append(v)
        yield TupleVar(row)


def _map(d, f, fn, *its):
    its = [d.iter(f, x) for x in its]
    while True:
        row = []
        for it in its:
            ok, v = d.next(f, it)
            if not ok:
                return
            row.append(v)
        yield d.call(f, fn, row, {})


def _filter(d, f, fn, it):
    it = d.iter(f, it)
    while True:
        ok, v = d.next(f, it)
        if not ok:
            return
        keep = v if d.is_none(f, fn) else d.call(f, fn, [v], {})
        if d.truth(f, keep):
            yield v


def _reversed(d, f, seq):
    if isinstance(seq, (ListVar, TupleVar)):
        items = list(seq.items)
    elif isinstance(seq, DictView) or isinstance(seq, DictVar):
        items = _items(d, f, seq)
    elif type(seq) is Const:
        items = [d.from_python(x) for x in reversed(seq.value)]
        items.reverse()
    elif isinstance(seq, ObjectVar) and resolved_type_attr(d, type(seq.obj), "__reversed__") is not NULL:
        yield from _items(d, f, d.call_method(f, seq, "__reversed__", [], {}))
        return
    else:
        items = _items(d, f, seq)
    yield from reversed(items)


BUILTIN_RULES[enumerate] = _gen(_enumerate, materialize=True)
BUILTIN_RULES[zip] = _gen(_zip, materialize=True)
BUILTIN_RULES[map] = _gen(_map)
BUILTIN_RULES[filter] = _gen(_filter)
BUILTIN_RULES[reversed] = _gen(_reversed, materialize=True)


@rule(range)
def _range(d, f, args, kwargs):
    return Const(range(*[d.as_python(f, a) for a in args]))


@rule(sorted)
def _sorted(d, f, args, kwargs):
    items = _items(d, f, args[0])
    rev = d.as_python(f, kwargs["reverse"]) if "reverse" in kwargs else False
    return ListVar(sort_values(d, f, items, kwargs.get("key"), rev))


@rule(sum)
def _sum(d, f, args, kwargs):
    items = _items(d, f, args[0])
    acc = args[1] if len(args) > 1 else kwargs.get("start", Const(0))
    for x in items:
        acc = d.binary(f, "+", acc, x)
    return acc


def _minmax(op):
    def h(d, f, args, kwargs):
        key = kwargs.get("key")
        items = _items(d, f, args[0]) if len(args) == 1 else list(args)
        if not items:
            if "default" in kwargs:
                return kwargs["default"]
            raise UserException(ValueError(f"{'min' if op == '<' else 'max'}() iterable argument is empty"))
        best, bkey = items[0], (d.call(f, key, [items[0]], {}) if key is not None else items[0])
        for x in items[1:]:
            k = d.call(f, key, [x], {}) if key is not None else x
            if d.truth(f, d.compare(f, op, k, bkey)):
                best, bkey = x, k
        return best
    return h


BUILTIN_RULES[min] = _minmax("<")
BUILTIN_RULES[max] = _minmax(">")


@rule(any)
def _any(d, f, args, kwargs):
    it = d.iter(f, args[0])
    while True:
        ok, v = d.next(f, it)
        if not ok:
            return Const(False)
        if d.truth(f, v):
            return Const(True)


@rule(all)
def _all(d, f, args, kwargs):
    it = d.iter(f, args[0])
    while True:
        ok, v = d.next(f, it)
        if not ok:
            return Const(True)
        if not d.truth(f, v):
            return Const(False)


@rule(abs)
def _abs(d, f, args, kwargs):
    if type(args[0]) is Const:
        return call_real(d, f, abs, args, kwargs)
    return d.unary(f, "abs", args[0])


_NUMERIC = (int, float, complex)
_NUMERIC_TYPES = (int, float, complex, bool)     # symbolic numbers: their own rules, not their dunders


def _convert(pyfn, dunder):
    def h(d, f, args, kwargs):
        if pyfn is int and len(args) == 1 and not kwargs and type(args[0]).__name__ == "SymNumVar":
            return args[0]      # int() of a symbolic int is itself: it stays symbolic (checked before
            # all_const, whose as_python() would specialize it)
        if all_const(args, kwargs):
            return call_real(d, f, pyfn, [Const(a.as_python()) for a in args], kwargs)
        v = args[0] if args else None
        name = dunder
        # which dunder runs is decided on the class: guarded (resolved_type_attr), so a method defined on
        # the class after the compile (``Cls.__str__ = ...``) is not ignored
        if pyfn is str and isinstance(v, ObjectVar) and \
                resolved_type_attr(d, type(v.obj), "__str__") is object.__str__:
            name = "__repr__"           # object.__str__ is repr(): the class's own __repr__ runs
        if isinstance(v, ObjectVar) and resolved_type_attr(d, type(v.obj), name) is not NULL:
            return d.call_method(f, v, name, [], {})
        if pyfn in _NUMERIC and len(args) == 1 and not kwargs and type_of(v) not in _NUMERIC_TYPES \
                and lookup_type_attr(type_of(v), name) is not NULL:
            return d.call_method(f, v, name, [], {})      # float(t) is t.__float__(): a tensor's own rule
        if pyfn is bool and v is not None:
            return Const(d.truth(f, v))
        return NotImplemented
    return h


for _fn, _d in ((int, "__int__"), (float, "__float__"), (bool, "__bool__"), (str, "__str__"),
                (repr, "__repr__"), (complex, "__complex__"), (hash, "__hash__")):
    BUILTIN_RULES[_fn] = _convert(_fn, _d)


@rule(slice)
def _slice(d, f, args, kwargs):
    """``slice(...)`` is BUILD_SLICE: bounds that are not constants (a tensor, a symbolic int) make a slice
    value the subscript rules take, as ``x[a:b]`` does."""
    if kwargs or not 1 <= len(args) <= 3:
        raise UserException(TypeError(f"slice expected 1 to 3 positional arguments, got {len(args)}"
                                      + (" and keyword arguments" if kwargs else "")))
    return d.build_slice(f, [Const(None), args[0]] if len(args) == 1 else list(args))


@rule(print)
def _print(d, f, args, kwargs):
    raise d.unsupported(f, "print() inside compiled code",
                        "move the print outside the compiled function, or log after it returns")


@rule(super)
def _super(d, f, args, kwargs):
    if args:
        return SuperVar(d.as_python(f, args[0]), args[1])
    code = f.code
    if "__class__" not in f.locals or not code.co_argcount:
        raise UserException(RuntimeError("super(): no arguments"))
    first = f.locals[code.co_varnames[0]]
    if code.co_varnames[0] in code.co_cellvars:
        first = d.cell_get(first)
    return SuperVar(d.as_python(f, d.cell_get(f.locals["__class__"])), first)


@rule(object.__setattr__)
def _object_setattr(d, f, args, kwargs):
    from .setattrs import generic_setattr
    obj, name, v = args
    if not isinstance(obj, ObjectVar):
        raise d.unsupported(f, "object.__setattr__ on a non-object value")
    generic_setattr(d, f, obj, d.as_python(f, name), v)
    return Const(None)


@rule(object.__new__)
def _object_new(d, f, args, kwargs):
    if len(args) != 1 or kwargs:
        return NotImplemented
    cls = d.as_python(f, args[0])
    if not isinstance(cls, type):
        raise UserException(TypeError(f"object.__new__(X): X is not a type object ({type(cls).__name__})"))
    return bare_instance(d, cls)


@rule(object.__init__)
def _object_init(d, f, args, kwargs):
    return Const(None)


@rule(tuple.__new__)
def _tuple_new(d, f, args, kwargs):
    cls = d.as_python(f, args[0])
    if not (isinstance(cls, type) and issubclass(cls, tuple)):
        raise UserException(TypeError(f"tuple.__new__({cls.__name__}): {cls.__name__} is not a subtype of tuple"
                                      if isinstance(cls, type) else
                                      f"tuple.__new__(X): X is not a type object ({type(cls).__name__})"))
    if kwargs or len(args) > 2:     # CPython's checks, as tuple(...) itself makes them
        raise UserException(TypeError("tuple() takes no keyword arguments" if kwargs else
                                      f"tuple expected at most 1 argument, got {len(args) - 1}"))
    items = _items(d, f, args[1]) if len(args) > 1 else []
    return TupleVar(items, None if cls is tuple else cls)


@rule(dict.fromkeys)
def _dict_fromkeys(d, f, args, kwargs, cls: type = dict):
    """``cls.fromkeys(iterable, value=None)``: CPython builds a plain dict directly; for a subclass it calls
    ``cls()`` and stores each key with ``r[key] = value`` (an overridden ``__setitem__`` runs)."""
    if kwargs and issubclass(cls, collections.OrderedDict) and set(kwargs) <= {"iterable", "value"}:
        # OrderedDict.fromkeys has its own signature (iterable, value=None), keywords allowed
        args = list(args) + [kwargs.pop(k) for k in ("iterable", "value") if k in kwargs]
    if kwargs:
        raise UserException(TypeError(f"{cls.__name__}.fromkeys() takes no keyword arguments"))
    if not 1 <= len(args) <= 2:
        raise UserException(TypeError(f"fromkeys expected at {'least 1 argument' if not args else 'most 2 arguments'}"
                                      f", got {len(args)}"))
    val = args[1] if len(args) > 1 else Const(None)
    if cls is not dict:
        r = d.call(f, Const(cls), [], {})
        for k in d.each(f, args[0]):
            d.setitem(f, r, k, val)
        return r
    r = DictVar({}, {})
    for k in _items(d, f, args[0]):
        hk = d.hash_key(f, k)
        r.items[hk] = val
        r.keys.setdefault(hk, k)
    return r


def classmethod_rule(fn):
    """The rule of a C classmethod bound to a subclass (``OrderedDict.fromkeys``, ``MyDict.fromkeys``), which
    is a different object from the one bound to the base that BUILTIN_RULES holds; None if there is none."""
    owner = getattr(fn, "__self__", None)
    if type(fn) is types.BuiltinMethodType and fn.__name__ == "fromkeys" and isinstance(owner, type) \
            and issubclass(owner, dict):
        return lambda d, f, args, kwargs: _dict_fromkeys(d, f, args, kwargs, owner)
    if type(fn) is types.BuiltinMethodType and fn.__name__ == "__subclasses__" and isinstance(owner, type):
        return lambda d, f, args, kwargs: _subclasses(d, f, owner, args, kwargs)
    return None


def _subclasses(d, f, cls: type, args, kwargs):
    """``C.__subclasses__()``: the live subclasses (weakly held by CPython, so the answer changes as classes are
    made and collected) as a new list, guarded on being the same classes in the same order."""
    if args or kwargs:
        raise UserException(TypeError("type.__subclasses__() takes no arguments"))
    subs = cls.__subclasses__()
    cg = d.cg
    d.guards.add(f"{cg.bind(cls, 'cls')}.__subclasses__() == {cg.bind(subs, 'subclasses')}",
                 f"{cls.__qualname__} has the subclasses {[c.__qualname__ for c in subs]}")
    return ListVar([Const(c) for c in subs])


@rule(functools.partial)
def _partial(d, f, args, kwargs):
    return PartialVar(args[0], list(args[1:]), dict(kwargs))


@rule(functools.reduce)
def _reduce(d, f, args, kwargs):
    fn, seq = args[0], args[1]
    items = _items(d, f, seq)
    if len(args) > 2:
        acc = args[2]
    elif items:
        acc = items.pop(0)
    else:
        raise UserException(TypeError("reduce() of empty iterable with no initial value"))
    for x in items:
        acc = d.call(f, fn, [acc, x], {})
    return acc


@rule(vars)
def _vars(d, f, args, kwargs):
    if not args and not kwargs:         # vars() is locals()
        return _locals(d, f, args, kwargs)
    if len(args) != 1 or kwargs:
        raise UserException(TypeError(f"vars expected at most 1 argument, got {len(args) + len(kwargs)}"))
    try:
        return d.getattr(f, args[0], "__dict__")
    except UserException as ue:
        if isinstance(ue.exc, AttributeError):
            raise UserException(TypeError("vars() argument must have __dict__ attribute")) from None
        raise


@rule(globals)
def _globals(d, f, args, kwargs):
    raise d.unsupported(f, "globals() inside compiled code")


@rule(locals)
def _locals(d, f, args, kwargs):
    return DictVar({k: v for k, v in f.locals.items() if isinstance(v, Value)},
                   {k: Const(k) for k, v in f.locals.items() if isinstance(v, Value)})


@rule(dir)
def _dir(d, f, args, kwargs):
    """``dir()`` lists the names of the traced frame (run natively, it listed the interpreter's own); with an
    argument it is an ordinary pure call."""
    if args or kwargs:
        return NotImplemented
    return d.from_python(sorted(k for k, v in f.locals.items() if isinstance(v, Value)))


@rule(id)
def _id(d, f, args, kwargs):
    ro = existing_object(d, args[0])
    if ro is NULL or getattr(args[0], "is_new", False):
        # a value made by the trace has no object yet: it is identified by its Value, and a sentinel kept
        # alive with the compiled code lends it an id that no other object has (copy.deepcopy keys its memo
        # on ids). Like eager's ids of new objects, the number says nothing but identity.
        tok = d.new_ids.get(id(args[0]))
        if tok is None:
            tok = d.new_ids[id(args[0])] = (args[0], object())
            d.keepalive.append(tok[1])
        return Const(id(tok[1]))
    guard_address(d, args[0], ro)
    return Const(id(ro))


# operator module on values maps to the interpreter's own operations
_BIN_OPS = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
            operator.floordiv: "//", operator.mod: "%", operator.pow: "**", operator.matmul: "@",
            operator.lshift: "<<", operator.rshift: ">>", operator.and_: "&", operator.or_: "|",
            operator.xor: "^", operator.iadd: "+=", operator.isub: "-=", operator.imul: "*=",
            operator.itruediv: "/=", operator.ifloordiv: "//=", operator.imod: "%=", operator.ipow: "**=",
            operator.imatmul: "@=", operator.iand: "&=", operator.ior: "|=", operator.ixor: "^="}
_CMP_OPS = {operator.lt: "<", operator.le: "<=", operator.eq: "==", operator.ne: "!=", operator.gt: ">",
            operator.ge: ">="}
for _fn, _op in _BIN_OPS.items():
    BUILTIN_RULES[_fn] = (lambda op: lambda d, f, a, k: d.binary(f, op, a[0], a[1]))(_op)
for _fn, _op in _CMP_OPS.items():
    BUILTIN_RULES[_fn] = (lambda op: lambda d, f, a, k: d.compare(f, op, a[0], a[1]))(_op)
BUILTIN_RULES[operator.neg] = lambda d, f, a, k: d.unary(f, "-", a[0])
BUILTIN_RULES[operator.pos] = lambda d, f, a, k: d.unary(f, "+", a[0])
BUILTIN_RULES[operator.invert] = lambda d, f, a, k: d.unary(f, "~", a[0])
BUILTIN_RULES[operator.not_] = lambda d, f, a, k: d.unary(f, "not", a[0])
BUILTIN_RULES[operator.truth] = lambda d, f, a, k: Const(d.truth(f, a[0]))
BUILTIN_RULES[operator.getitem] = lambda d, f, a, k: d.getitem(f, a[0], a[1])
BUILTIN_RULES[operator.contains] = lambda d, f, a, k: d.contains(f, a[1], a[0], False)
BUILTIN_RULES[operator.is_] = lambda d, f, a, k: d.is_(f, a[0], a[1], False)
BUILTIN_RULES[operator.is_not] = lambda d, f, a, k: d.is_(f, a[0], a[1], True)


@rule(operator.setitem)
def _op_setitem(d, f, args, kwargs):
    d.setitem(f, args[0], args[1], args[2])
    return Const(None)


def _concat(op):
    def h(d, f, args, kwargs):
        if len(args) == 2 and not kwargs and type(args[0]) is Const and type(args[1]) is Const:
            return call_real(d, f, operator.concat, args, kwargs)      # immutable: nothing to change in place
        if len(args) != 2 or kwargs or not isinstance(args[0], (ListVar, TupleVar)):
            return NotImplemented
        return d.binary(f, op, args[0], args[1])
    return h


BUILTIN_RULES[operator.concat] = _concat("+")
BUILTIN_RULES[operator.iconcat] = _concat("+=")


@rule(operator.delitem)
def _op_delitem(d, f, args, kwargs):
    d.delitem(f, args[0], args[1])
    return Const(None)


@rule(operator.index)
def _op_index(d, f, args, kwargs):
    v = args[0]
    if type(v) is Const:
        return call_real(d, f, operator.index, args, kwargs)
    if isinstance(v, ObjectVar) and resolved_type_attr(d, type(v.obj), "__index__") is not NULL:
        return d.call_method(f, v, "__index__", [], {})
    return NotImplemented


def _apply_itemgetter(d, f, getter: operator.itemgetter, obj: Value) -> Value:
    keys = getter.__reduce__()[1]
    vals = [d.getitem(f, obj, d.const(k)) for k in keys]
    return vals[0] if len(vals) == 1 else TupleVar(vals)


def _apply_attrgetter(d, f, getter: operator.attrgetter, obj: Value) -> Value:
    names = getter.__reduce__()[1]
    out = []
    for n in names:
        v = obj
        for part in n.split("."):
            v = d.getattr(f, v, part)
        out.append(v)
    return out[0] if len(out) == 1 else TupleVar(out)


def call_getter(d: SymbolicDomain, f, fn: Any, args, kwargs):
    if isinstance(fn, operator.itemgetter):
        return _apply_itemgetter(d, f, fn, args[0])
    if isinstance(fn, operator.attrgetter):
        return _apply_attrgetter(d, f, fn, args[0])
    return NotImplemented


_ = (types, builtins, NotConst)


@rule(object.__getattribute__)
def _object_getattribute(d, f, args, kwargs):
    from .objects import object_getattr
    obj, name = args
    if isinstance(obj, ObjectVar):
        return object_getattr(d, f, obj, d.as_python(f, name), generic=True)
    return d.getattr(f, obj, d.as_python(f, name))


@rule(object.__delattr__)
def _object_delattr(d, f, args, kwargs):
    from .setattrs import generic_setattr
    obj, name = args
    if not isinstance(obj, ObjectVar):
        raise d.unsupported(f, "object.__delattr__ on a non-object value")
    generic_setattr(d, f, obj, d.as_python(f, name), NULL)
    return Const(None)


BUILTIN_RULES[__import__("sys").getrecursionlimit] = lambda d, f, a, k: Const(__import__("sys").getrecursionlimit())


@rule(collections.namedtuple)
def _namedtuple_factory(d, f, args, kwargs):
    """``collections.namedtuple(name, fields, ...)`` of known values makes its class when the trace runs (it
    ``eval``s generated source, which cannot be followed); the compiled code's instances are of that class."""
    if not all_const(args, kwargs):
        raise d.unsupported(f, "collections.namedtuple() of values that are not constants")
    return call_real(d, f, collections.namedtuple, args, kwargs)


@rule(weakref.ref)
def _weakref_ref(d, f, args, kwargs):
    """``weakref.ref(obj)`` of an object that existed before the call (``WeakKeyDictionary`` lookups make one
    per ``in`` / ``[]``): the real reference, a constant; CPython hands out one shared reference per object when
    no callback is given, so identity holds too. A callback, or an object made in the trace, is refused."""
    ro = NULL
    if len(args) == 1 and not kwargs and not getattr(args[0], "is_new", False):
        ro = args[0].real_object()
        ro = d.real_of.get(id(args[0]), NULL) if ro is NULL else ro       # an input tensor
    if ro is NULL:
        raise d.unsupported(f, "weakref.ref() of an object made in compiled code, or with a callback")
    try:
        return Const(weakref.ref(ro))
    except TypeError as e:      # not weakly referenceable: the program's own error
        raise UserException(e) from None
