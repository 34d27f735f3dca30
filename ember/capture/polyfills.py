"""Methods of ``object`` written in C that the trace runs as Python, where the C code's behaviour for a plain
Python class is short enough to restate.

``copy.copy``/``copy.deepcopy`` of a user object (transformers deep-copies its config inside ``forward`` to
build a cache) ends in ``object.__reduce_ex__(obj, 4)``. For a class made only of Python classes, without
``__slots__`` and without its own ``__reduce__``/``__getstate__``/``__getnewargs__``, CPython's ``reduce_newobj``
returns ``(copyreg.__newobj__, (cls,), state, None, None)`` where ``state`` is the instance ``__dict__`` itself,
or None when it is empty; ``copy._reconstruct`` then makes the object with ``cls.__new__`` and updates its
``__dict__``, all of which the interpreter follows. Any other class keeps the graph break (its C path differs).

Locks (``threading.Lock``/``RLock``): ``with lock:`` around trace-time code (transformers installs its
output-capturing hooks under one) traces as no-ops, as in torch.compile: the captured program runs
single-threaded, so acquiring always succeeds at once (``True``) and releasing returns ``None``; the compiled
code replays the block's effects without taking the lock. ``acquire(blocking=False)`` and ``timeout`` keep
the break (their answer depends on other threads).

Functions marked constant (``torch._dynamo.assume_constant_result``, which sets ``_dynamo_marked_constant``;
transformers marks its install probes ``is_torch_available()``, ``is_torch_distributed_available()`` so, under
``lru_cache``): called on constant arguments, the trace runs them for real once and takes the result as a
constant (``marked_constant``), as torch.compile does, instead of tracing through ``importlib.metadata``.

Rules take ``(d, f, args, kwargs)`` like the builtin rules and return NotImplemented to decline.
"""
from __future__ import annotations

import _thread
import copyreg

from .instance_attrs import lookup_type_attr
from .interpreter import NULL
from .values import Const

_HEAPTYPE = 1 << 9          # Py_TPFLAGS_HEAPTYPE: a class written in Python


def _plain_python_class(cls: type) -> bool:
    """Every class of the MRO but ``object`` is a Python class with an instance ``__dict__`` and no slots, and
    nothing overrides how ``object`` reduces it."""
    if cls is object:
        return False
    for k in cls.__mro__[:-1]:
        if not (k.__flags__ & _HEAPTYPE) or "__slots__" in k.__dict__:
            return False
    own = (("__reduce__", object.__reduce__), ("__getstate__", object.__getstate__),
           ("__getnewargs_ex__", NULL), ("__getnewargs__", NULL))
    return all(lookup_type_attr(cls, n) is want for n, want in own) and lookup_type_attr(cls, "__dict__") is not NULL


def _reduce_newobj(obj, protocol):
    state = object.__getattribute__(obj, "__dict__")
    return copyreg.__newobj__, (type(obj),), (state if state else None), None, None


def _reduce_ex_rule(d, f, args, kwargs):
    if len(args) != 2 or kwargs:
        return NotImplemented
    cls = args[0].python_type()
    protocol = d.as_python(f, args[1])
    if not isinstance(protocol, int) or protocol < 2 or not _plain_python_class(cls):
        return NotImplemented
    return d.inline(f, _reduce_newobj, list(args), {})


def _lock_rule(result):
    def rule(d, f, args, kwargs):
        return Const(result) if len(args) == 1 and not kwargs else NotImplemented
    return rule


def _lock_exit_rule(d, f, args, kwargs):
    return Const(None) if len(args) == 4 and not kwargs else NotImplemented


def marked_constant(fn) -> bool:
    """``fn`` (or the function under its ``lru_cache``) is marked ``assume_constant_result``."""
    for g in (fn, getattr(fn, "__wrapped__", None) if type(fn).__name__ == "_lru_cache_wrapper" else None):
        try:
            if g is not None and getattr(g, "_dynamo_marked_constant", False) is True:
                return True
        except Exception:       # noqa: BLE001 - an odd object's __getattr__: not marked
            pass
    return False


C_METHOD_RULES = {object.__reduce_ex__: _reduce_ex_rule}
for _lock in (_thread.LockType, _thread.RLock):
    C_METHOD_RULES.update({_lock.__enter__: _lock_rule(True), _lock.acquire: _lock_rule(True),
                           _lock.release: _lock_rule(None), _lock.__exit__: _lock_exit_rule})

__all__ = ["C_METHOD_RULES", "marked_constant"]
