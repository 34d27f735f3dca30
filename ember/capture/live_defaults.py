"""A compiled function's defaults, read when it is called, as CPython reads them.

The dispatcher (``FrameCache._make_dispatcher``) reproduces the compiled function's signature in generated
source. Written with the defaults bound when the dispatcher was made, a later ``f.__defaults__ = (3.0,)`` (or a
change of ``__kwdefaults__``) would be ignored and every call would run with the old values: a wrong result.
So each defaulted parameter's default in the dispatcher is a placeholder, ``UNSET``:
- while the function's ``__defaults__`` and ``__kwdefaults__`` are the objects the dispatcher was made with (two
  identity checks per call), an omitted argument gets its bound default (one ``is`` check per parameter);
- once either is replaced, the call goes through ``stale``, which rebinds the defaults from the function and
  passes on only the arguments the caller gave, so Python binds the new defaults."""
from __future__ import annotations

import types
from typing import Any

from ..emit import py_name


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<ember: argument not given>"


UNSET = _Unset()


def param_names(code: types.CodeType) -> tuple[str, ...]:
    n = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
    return code.co_varnames[:n]


def signature(code: types.CodeType, defaults: tuple | None, kwdefaults: dict | None,
              placeholder: str | None = None) -> tuple[str, str, dict]:
    """(parameter list, call argument list, bindings) reproducing a code object's signature. Parameter names
    are written into generated source: each must be a plain identifier (``ember.emit.py_name``). With
    ``placeholder``, a parameter's default is that name instead of its binding (``ember.capture.live_defaults``)."""
    names = code.co_varnames
    for p in param_names(code):
        py_name(p)
    n, npos, nkw = code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount
    defaults = defaults or ()
    binds: dict[str, Any] = {}
    params, call = [], []
    first_default = n - len(defaults)
    for i in range(n):
        p = names[i]
        if i >= first_default:
            binds[f"__dflt{i}"] = defaults[i - first_default]
            p += f"={placeholder or f'__dflt{i}'}"
        params.append(p)
        call.append(names[i])
        if npos and i == npos - 1:
            params.append("/")
    pos = n + nkw
    if code.co_flags & 0x04:
        params.append("*" + names[pos])
        call.append("*" + names[pos])
    elif nkw:
        params.append("*")
    for i in range(n, n + nkw):
        p = names[i]
        if kwdefaults and p in kwdefaults:
            binds[f"__kwdflt_{p}"] = kwdefaults[p]
            p += f"={placeholder or f'__kwdflt_{p}'}"
        params.append(p)
        call.append(f"{names[i]}={names[i]}")
    if code.co_flags & 0x08:
        kwname = names[pos + (1 if code.co_flags & 0x04 else 0)]
        params.append("**" + kwname)
        call.append("**" + kwname)
    return ", ".join(params), ", ".join(call), binds


def _param_of(key: str, names: tuple) -> str:
    """The parameter a default binding (``__dflt3``, ``__kwdflt_scale``) belongs to."""
    return names[int(key[6:])] if key.startswith("__dflt") else key[len("__kwdflt_"):]


class LiveDefaults:
    """The placeholder signature, prologue and bindings of one ``FrameCache``'s dispatcher."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        fn, code = cache.fn, cache.code
        self.params, _, binds = signature(code, fn.__defaults__, fn.__kwdefaults__, placeholder="__U")
        names = code.co_varnames
        fills = "".join(f"    if {_param_of(k, names)} is __U:\n        {_param_of(k, names)} = {k}\n"
                        for k in binds)
        self.prologue = (f"    if __F.__defaults__ is not __d0 or __F.__kwdefaults__ is not __kd0:\n"
                         f"        return __stale({cache.call_args})\n{fills}")
        self.bindings = dict(binds, __U=UNSET, __F=fn, __d0=fn.__defaults__, __kd0=fn.__kwdefaults__,
                             __stale=self.stale)
        self.keys = frozenset(binds)
        self.ns: dict = {}          # the dispatcher's globals (``FrameCache._make_dispatcher`` sets it)

    def stale(self, *args: Any, **kwargs: Any) -> Any:
        """A call after the function's defaults were replaced: the cache's current dispatcher takes the new
        defaults where the same parameters still have one (later calls take the fast path again); otherwise the
        cache gets a new dispatcher, which every older one's calls go to from now on. Either way the call runs
        again with only the arguments the caller gave."""
        cache, fn = self.cache, self.cache.fn
        args, kwargs = self._given(args, kwargs)
        params, call_args, binds = signature(cache.code, fn.__defaults__, fn.__kwdefaults__)
        cur = cache.live_defaults
        if frozenset(binds) == cur.keys:
            cur.ns.update(binds, __d0=fn.__defaults__, __kd0=fn.__kwdefaults__)
            cache.sig_binds = binds
        else:                                           # other parameters have defaults now
            cur.ns["__d0"] = UNSET                      # never the function's: every call comes here
            cache.params, cache.call_args, cache.sig_binds = params, call_args, binds
            cache.dispatch = cache._make_dispatcher()
        return cache.dispatch(*args, **kwargs)

    def _given(self, args: tuple, kwargs: dict) -> tuple[list, dict]:
        """The arguments a call gave, from the dispatcher's call of ``stale`` (every positional parameter in
        order, ``UNSET`` where omitted, then the extra positional ones; keyword-only ones by name)."""
        code = self.cache.code
        n, names = code.co_argcount, code.co_varnames
        out, kw, omitted = [], {}, False
        for i, v in enumerate(args[:n]):
            if v is UNSET:
                omitted = True
            elif omitted and i >= code.co_posonlyargcount:
                kw[names[i]] = v
            else:
                out.append(v)
        out.extend(args[n:])
        kw.update((k, v) for k, v in kwargs.items() if v is not UNSET)
        return out, kw
