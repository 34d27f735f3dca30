"""Explicit calls of the operator dunders of built-in containers: ``set.__or__(p, q)``, ``[1].__add__([2])``,
``s.__eq__(t)``, ``super().__ior__(x)`` in a subclass. Each runs the operator itself (so the same rules as
``p | q`` apply), and returns ``NotImplemented`` where CPython's C slot does: a set operator or comparison whose
other operand is not a set/frozenset, a comparison between a list, tuple or dict and another type, ``dict |``
a non-dict."""
from __future__ import annotations

from .values import Const, DictVar, Value

_OPS = {"add": "+", "sub": "-", "mul": "*", "and": "&", "or": "|", "xor": "^"}
BINARY = {f"__{n}__": op for n, op in _OPS.items()}
REFLECTED = {f"__r{n}__": op for n, op in _OPS.items()}
INPLACE = {f"__i{n}__": op + "=" for n, op in _OPS.items()}
COMPARE = {"__eq__": "==", "__ne__": "!=", "__lt__": "<", "__le__": "<=", "__gt__": ">", "__ge__": ">="}
NAMES = frozenset(BINARY) | frozenset(REFLECTED) | frozenset(INPLACE) | frozenset(COMPARE)


def _kind(t: type) -> type | None:
    for k in (frozenset, set, list, tuple, dict):
        if issubclass(t, k):
            return set if k is frozenset else k
    return None


def _not_implemented(op: str, mine: type, other: type) -> bool:
    """Whether the C slot of a ``mine`` container answers NotImplemented to an ``other`` operand."""
    kind, okind = _kind(mine), _kind(other)
    if op in COMPARE.values() or kind is set:
        return kind is not okind
    if kind is dict and op == "|":
        return okind is not dict
    return False


def call(d, f, v: Value, name: str, args: list[Value]) -> Value:
    """``type(v).<name>(v, *args)`` for an operator dunder ``name`` of a built-in container."""
    from .interpreter import UserException
    if len(args) != 1:
        raise UserException(TypeError(f"expected 1 argument, got {len(args)}"))
    other = args[0]
    if name in COMPARE:
        op = COMPARE[name]
        if _not_implemented(op, v.python_type(), other.python_type()):
            return Const(NotImplemented)
        return d.compare(f, op, v, other)
    if name in ("__mul__", "__rmul__", "__imul__") and _kind(v.python_type()) in (list, tuple) \
            and not issubclass(other.python_type(), int):     # the slot wrapper's own index conversion
        raise UserException(TypeError(f"'{other.python_type().__name__}' object cannot be interpreted as an "
                                      "integer"))
    if name == "__ior__" and type(v) is DictVar:       # dict |= merges any mapping or iterable of pairs
        from . import rules as R
        R.METHOD.find(DictVar)(d, f, v, "update", [other], {})
        return v
    if name in INPLACE:
        op = INPLACE[name]
        if _kind(v.python_type()) in (set, dict) and _not_implemented(op[:-1], v.python_type(), other.python_type()):
            return Const(NotImplemented)
        return d.binary(f, op, v, other)
    op = BINARY.get(name) or REFLECTED[name]
    if _not_implemented(op, v.python_type(), other.python_type()):
        return Const(NotImplemented)
    return d.binary(f, op, v, other) if name in BINARY else d.binary(f, op, other, v)


def object_compare(d, f, name: str, a: Value, b: Value) -> Value:
    """``object.__eq__``/``__ne__``/... called explicitly (``super().__ne__(other)`` in a class whose base is
    object): ``==`` is identity, ``!=`` inverts ``type(a).__eq__(a, b)`` unless that is NotImplemented, and
    the orderings are NotImplemented. Re-dispatching to ``a != b`` instead would run the override again."""
    if name == "__eq__":
        return Const(True) if d.is_(f, a, b, False).value else Const(NotImplemented)
    if name != "__ne__":
        return Const(NotImplemented)
    r = d.call_method(f, a, "__eq__", [b], {})
    if type(r) is Const and r.value is NotImplemented:
        return r
    return Const(not d.truth(f, r))


_NUMBERS = (int, float, complex)        # bool is an int


def number_slot_declines(fn, args, kwargs) -> Value | None:
    """``(3).__add__(t)``, ``int.__mul__(3, t)``, ``(1.5).__eq__(obj)`` with a tensor, a container or a user
    object: a number's operator slot answers NotImplemented to any operand that is not a number (the other
    operand's reflected method is what would run in ``3 + t``). None when this is not such a call, or the
    operand may be a number whose value the trace does not know."""
    import types
    if kwargs or fn.__name__ not in NAMES:
        return None
    if type(fn) is types.MethodWrapperType and type(fn.__self__) in _NUMBERS + (bool,) and len(args) == 1:
        other = args[0]
    elif type(fn) is types.WrapperDescriptorType and fn.__objclass__ in _NUMBERS and len(args) == 2 \
            and type(args[0]) is Const and isinstance(args[0].value, fn.__objclass__):
        other = args[1]
    else:
        return None
    t = other.python_type()
    return None if issubclass(t, _NUMBERS) or type(other) is Const else Const(NotImplemented)
