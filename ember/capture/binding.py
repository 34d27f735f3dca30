"""Binding call arguments to a code object's parameters, as CPython's ``initialize_locals`` does: the same
order of checks and the same error messages (``missing_arguments``, ``too_many_positional``,
``positional_only_passed_as_keyword``). Torch-free; the caller's domain builds ``*args`` and ``**kwargs``."""
from __future__ import annotations

from collections.abc import Callable
from types import CodeType
from typing import Any

from .bytecode import since

CO_VARARGS, CO_VARKEYWORDS = 0x04, 0x08


def bind_arguments(code: CodeType, defaults: tuple, kwdefaults: dict | None, args: list, kwargs: dict,
                   make_tuple: Callable, make_dict: Callable, fname: str) -> dict[str, Any]:
    """Parameter name -> value. Raises a real TypeError, worded as CPython words it, for a bad call."""
    nargs, nkwonly = code.co_argcount, code.co_kwonlyargcount
    names = code.co_varnames
    out: dict[str, Any] = {names[i]: args[i] for i in range(min(len(args), nargs))}
    extra_kw = _bind_keywords(code, kwargs, out, fname)
    if len(args) > nargs and not code.co_flags & CO_VARARGS:
        raise TypeError(_too_many_positional(code, len(args), len(defaults or ()), out, fname))
    _fill_positional_defaults(code, defaults or (), out, fname)
    missing = []
    for n in names[nargs:nargs + nkwonly]:
        if n not in out:
            if kwdefaults and n in kwdefaults:
                out[n] = kwdefaults[n]
            else:
                missing.append(n)
    if missing:
        raise TypeError(_missing(fname, "keyword-only", missing))
    pos = nargs + nkwonly
    if code.co_flags & CO_VARARGS:
        out[names[pos]] = make_tuple(list(args[nargs:]))
        pos += 1
    if code.co_flags & CO_VARKEYWORDS:
        out[names[pos]] = make_dict(extra_kw)
    return out


def _bind_keywords(code: CodeType, kwargs: dict, out: dict, fname: str) -> dict:
    names = code.co_varnames
    nposonly, nnamed = code.co_posonlyargcount, code.co_argcount + code.co_kwonlyargcount
    settable = names[nposonly:nnamed]
    extra: dict = {}
    for k, v in kwargs.items():
        if not isinstance(k, str):
            raise TypeError(f"{fname}() keywords must be strings")
        if k not in settable:
            if code.co_flags & CO_VARKEYWORDS:
                extra[k] = v
                continue
            posonly = [n for n in names[:nposonly] if n in kwargs]
            if posonly:
                raise TypeError(f"{fname}() got some positional-only arguments passed as keyword "
                                f"arguments: '{', '.join(posonly)}'")
            raise TypeError(_unexpected_keyword(fname, k, names[:nnamed]))
        if k in out:
            raise TypeError(f"{fname}() got multiple values for argument '{k}'")
        out[k] = v
    return extra


def _unexpected_keyword(fname: str, k: str, candidates: tuple) -> str:
    msg = f"{fname}() got an unexpected keyword argument '{k}'"
    if since((3, 13), "unexpected keyword suggestions"):
        hint = _suggestion(list(candidates), k)
        if hint:
            msg += f". Did you mean '{hint}'?"
    return msg


def _suggestion(candidates: list, name: str):
    try:
        from _suggestions import _generate_suggestions  # 3.13's own (C) implementation
    except ImportError:
        return None
    return _generate_suggestions(candidates, name)


def _fill_positional_defaults(code: CodeType, defaults: tuple, out: dict, fname: str) -> None:
    names, nargs = code.co_varnames, code.co_argcount
    first_default = nargs - len(defaults)
    missing = [names[i] for i in range(min(first_default, nargs)) if names[i] not in out]
    if missing:
        raise TypeError(_missing(fname, "positional", missing))
    for i in range(max(first_default, 0), nargs):
        out.setdefault(names[i], defaults[i - first_default])


def _missing(fname: str, kind: str, names: list[str]) -> str:
    quoted = [f"'{n}'" for n in names]
    if len(quoted) == 1:
        listed = quoted[0]
    elif len(quoted) == 2:
        listed = f"{quoted[0]} and {quoted[1]}"
    else:
        listed = ", ".join(quoted[:-1]) + f", and {quoted[-1]}"
    return f"{fname}() missing {len(names)} required {kind} argument{'s' if len(names) > 1 else ''}: {listed}"


def _too_many_positional(code: CodeType, given: int, ndefaults: int, out: dict, fname: str) -> str:
    nargs = code.co_argcount
    kwonly_given = sum(1 for n in code.co_varnames[nargs:nargs + code.co_kwonlyargcount] if n in out)
    if ndefaults:
        sig, plural = f"from {nargs - ndefaults} to {nargs}", True
    else:
        sig, plural = f"{nargs}", nargs != 1
    kw = ""
    if kwonly_given:
        kw = (f" positional argument{'s' if given != 1 else ''} (and {kwonly_given} keyword-only "
              f"argument{'s' if kwonly_given != 1 else ''})")
    was = "was" if given == 1 and not kwonly_given else "were"
    return f"{fname}() takes {sig} positional argument{'s' if plural else ''} but {given}{kw} {was} given"
