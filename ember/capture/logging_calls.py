"""Logging calls inside compiled code (``logger.warning(...)``, transformers' ``logger.warning_once(...)``): run
after the graph, in program order, when their arguments are constants (``objects._const_call`` asks here)."""
from __future__ import annotations

import logging
from typing import Any

from .instance_attrs import lookup_type_attr
from .values import Const, ObjectVar, Value


_LOG_LEVELS = ("debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log")


def is_logger_method(fn: Any, args: list) -> bool:
    """``logger.warning(...)``, transformers' ``logger.warning_once(...)``: a method of ``logging.Logger``
    (also one a library added to it) that emits a record, called on a logger. Emitting methods are the
    level methods and ``log``, and the ones a library added under a level name (``warning_once``,
    ``warning_advice``); ``isEnabledFor`` and the like return values and run in the trace."""
    name = getattr(fn, "__name__", None)
    if not args or not isinstance(name, str) or name.split("_")[0] not in _LOG_LEVELS:
        return False
    ro = args[0].real_object() if isinstance(args[0], ObjectVar) else getattr(args[0], "value", None)
    return isinstance(ro, logging.Logger) and lookup_type_attr(type(ro), name) is fn


def defer_logging(d: Any, f: Any, v: Value, args: list, kwargs: dict, name: str) -> Value:
    """A logging call whose arguments are constants runs after the graph, in program order with the other
    logging calls of the trace: logging returns None and reads no tensor, so only its order against the
    tensor work changes. Other arguments (a tensor to format) end the graph."""
    if kwargs or not all(type(a) is Const for a in args[1:]):
        raise d.unsupported(f, f"logging call {name} with non-constant arguments",
                            "log constants (the message formatted from Python values), or log after the "
                            "compiled function returns")
    d.deferred_calls.append((v, list(args)))
    return Const(None)
