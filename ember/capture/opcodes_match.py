"""Opcode handlers for structural pattern matching (`match`/`case`) and class definitions.

The MATCH_* handlers follow CPython's ``match_class``/``match_keys`` in ceval.c but only use domain
operations (``isinstance``, ``getattr``, ``get``), so they run in both domains: on real values, and on
symbolic values where the type facts they rely on are already guarded.
"""
from __future__ import annotations

import collections.abc

from .interpreter import UserException
from .registry import register_opcode as op

# types whose class pattern with one positional sub-pattern matches the subject itself (_Py_TPFLAGS_MATCH_SELF)
_MATCH_SELF = (bool, bytearray, bytes, dict, float, frozenset, int, list, set, str, tuple)
_NOT_SEQUENCE = (str, bytes, bytearray)
_MISSING = object()


def _isinstance(f, v, cls) -> bool:
    d = f.dom
    return d.truth(f, d.call(f, d.builtin("isinstance"), [v, d.const(cls)], {}))


@op("MATCH_MAPPING")
def _match_mapping(f, ins):
    f.stack.append(f.dom.const(_isinstance(f, f.stack[-1], collections.abc.Mapping)))


@op("MATCH_SEQUENCE")
def _match_sequence(f, ins):
    v = f.stack[-1]
    ok = _isinstance(f, v, collections.abc.Sequence) and not _isinstance(f, v, _NOT_SEQUENCE)
    f.stack.append(f.dom.const(ok))


@op("MATCH_KEYS")
def _match_keys(f, ins):
    d = f.dom
    subject, keys = f.stack[-2], f.stack[-1]
    key_values = d.unpack_all(f, keys)
    if not key_values:
        f.stack.append(d.build_tuple(f, []))
        return
    get = d.getattr(f, subject, "get")
    dummy = d.const(_MISSING)
    seen, values = set(), []
    for k in key_values:
        real = d.as_python(f, k)
        try:
            dup = real in seen
            seen.add(real)
        except TypeError as e:
            raise UserException(e) from None
        if dup:
            raise UserException(ValueError(f"mapping pattern checks duplicate key ({real!r})"))
        v = d.call(f, get, [k, dummy], {})
        if v is dummy or d.truth(f, d.is_(f, v, dummy, False)):
            f.stack.append(d.const(None))
            return
        values.append(v)
    f.stack.append(d.build_tuple(f, values))


@op("MATCH_CLASS")
def _match_class(f, ins):
    d = f.dom
    names = d.as_python(f, f.stack.pop())
    cls_v = f.stack.pop()
    subject = f.stack.pop()
    cls = d.as_python(f, cls_v)
    if not isinstance(cls, type):
        raise UserException(TypeError(_not_a_class(f.dom.py)))
    if not _isinstance(f, subject, cls):
        f.stack.append(d.const(None))
        return
    attrs = _class_attrs(f, subject, cls_v, cls, ins.arg, names)
    f.stack.append(d.const(None) if attrs is None else d.build_tuple(f, attrs))


def _not_a_class(py: tuple[int, int]) -> str:
    if py == (3, 11):
        return "called match pattern must be a type"
    if py in ((3, 12), (3, 13)):
        return "called match pattern must be a class"
    raise NotImplementedError(f"MATCH_CLASS: CPython {py[0]}.{py[1]}'s error text is not known to ember")


def _class_attrs(f, subject, cls_v, cls: type, nargs: int, names: tuple):
    """The sub-pattern subjects of a class pattern (positional, then keyword), or None if one is missing."""
    seen: set[str] = set()
    out = []
    if nargs:
        match_args = _match_args(f, cls_v, cls)
        if match_args is _MISSING:
            allowed = 1 if issubclass(cls, _MATCH_SELF) else 0
        else:
            allowed = len(match_args)
        if allowed < nargs:
            raise UserException(TypeError(f"{cls.__name__}() accepts {allowed} positional sub-pattern"
                                          f"{'' if allowed == 1 else 's'} ({nargs} given)"))
        if match_args is _MISSING:
            out.append(subject)
        else:
            for name in match_args[:nargs]:
                if type(name) is not str:
                    raise UserException(TypeError(
                        f"__match_args__ elements must be strings (got {type(name).__name__})"))
                out.append(_class_attr(f, subject, cls, name, seen))
                if out[-1] is _MISSING:
                    return None
    for name in names:
        out.append(_class_attr(f, subject, cls, name, seen))
        if out[-1] is _MISSING:
            return None
    return out


def _match_args(f, cls_v, cls):
    d = f.dom
    try:
        ma = d.as_python(f, d.getattr(f, cls_v, "__match_args__"))
    except UserException as ue:
        if isinstance(ue.exc, AttributeError):
            return _MISSING
        raise
    if type(ma) is not tuple:
        raise UserException(TypeError(f"{cls.__name__}.__match_args__ must be a tuple (got {type(ma).__name__})"))
    return ma


def _class_attr(f, subject, cls, name, seen):
    if name in seen:
        raise UserException(TypeError(f"{cls.__name__}() got multiple sub-patterns for attribute {name!r}"))
    seen.add(name)
    try:
        return f.dom.getattr(f, subject, name)
    except UserException as ue:
        if isinstance(ue.exc, AttributeError):
            return _MISSING
        raise


@op("LOAD_BUILD_CLASS")
def _load_build_class(f, ins):
    f.stack.append(f.dom.load_build_class(f))
