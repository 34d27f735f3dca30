"""Tracebacks of the user's exceptions: the user's frames, not ember's.

An exception the program raises inside compiled code crosses ember's frames (dispatchers, glue, the
interpreter) and, where ember ran the user's code in its interpreter, has no frame of the user's at all.
Two repairs, neither of which changes the exception's type, message, identity or chaining:

- ``trim``: every compiled function's dispatcher drops ember's frames (ember's package, generated
  ``<ember ...>`` code) from the traceback of an exception leaving it, and re-raises it without adding one.
  An exception that ember's own code raised (not the program's) keeps them: that is a bug to report.
- ``raise_in_user_frames``: an exception raised by code that ember's interpreter ran is raised again through
  stand-in frames, one per interpreted frame, compiled with the user's file name, function name and the line
  that raised, so the traceback reads as eager's does. Frames of natively run callees below it are kept.
Torch-free.
"""
from __future__ import annotations

import os
import types
from typing import Any

_EMBER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _is_ember_file(f: str) -> bool:
    return f.startswith("<ember ") or f.startswith(_EMBER_DIR)


def is_ember_code(code: types.CodeType) -> bool:
    return _is_ember_file(code.co_filename)


def trim(exc: BaseException) -> None:
    """Drop ember's frames from ``exc.__traceback__`` (in place; the user's frames keep their order)."""
    tb = exc.__traceback__
    kept = []
    while tb is not None:
        if not is_ember_code(tb.tb_frame.f_code):
            kept.append(tb)
        tb = tb.tb_next
    new = None
    for t in reversed(kept):
        new = t if t.tb_next is new else types.TracebackType(new, t.tb_frame, t.tb_lasti, t.tb_lineno)
    exc.__traceback__ = new


def trim_if_user(exc: BaseException) -> None:
    """``trim`` an exception of the program's (raised in the user's code, a library's, or a stand-in); one
    that ember's own code raised (a bug: a KeyError in glue, say) keeps its frames for the report."""
    tb = last = exc.__traceback__
    while tb is not None:
        last, tb = tb, tb.tb_next
    if last is not None and not is_ember_code(last.tb_frame.f_code):
        trim(exc)


_STANDINS: dict[tuple, types.FunctionType] = {}


def _standin(where: tuple, last: bool) -> types.FunctionType:
    """A function whose one line, at ``where`` = (file, line, name, qualname), raises the exception (``last``)
    or calls the stand-in of the next frame."""
    key = (where, last)
    fn = _STANDINS.get(key)
    if fn is None:
        filename, line, name, qualname = where
        body = "raise __e" if last else "return __rest[0](__e, __rest[1:])"
        src = "\n" * (max(line or 1, 1) - 1) + f"def __standin(__e, __rest): {body}\n"
        ns: dict[str, Any] = {}
        exec(compile(src, filename, "exec"), ns)       # noqa: S102 - fixed source, no user text
        fn = ns["__standin"]
        fn.__code__ = _without_columns(fn.__code__).replace(co_name=name, co_qualname=qualname)
        if len(_STANDINS) < 4096:
            _STANDINS[key] = fn
    return fn


def _without_columns(code: types.CodeType) -> types.CodeType:
    """``code`` with every instruction at its first line and no column span (a location table of "no
    column" entries, the CPython 3.11+ format): tracebacks then underline no part of the user's line, where
    the stand-in's own columns would mean nothing."""
    units = len(code.co_code) // 2
    table = bytearray()
    while units > 0:
        n = min(8, units)
        table.append(0x80 | (13 << 3) | (n - 1))        # 13: line delta (signed varint) and no columns
        table.append(0)                                 # delta 0: the first line
        units -= n
    return code.replace(co_linetable=bytes(table))


def raise_in_user_frames(exc: BaseException, frames: list | None, keep_tail: bool = True) -> None:
    """Raise ``exc`` from stand-ins of ``frames`` ((file, line, name, qualname), outermost first). Its
    traceback keeps the user's frames it already has (a natively run callee's) unless ``keep_tail`` is off
    (frames of a backend's code under a graph call), and its chaining stays as it was."""
    if keep_tail:
        trim(exc)
    else:
        exc.__traceback__ = None
    frames = [w for w in (frames or ()) if not _is_ember_file(w[0])]
    fns = [_standin(w, i == len(frames) - 1) for i, w in enumerate(frames)]
    ctx, cause, suppress = exc.__context__, exc.__cause__, exc.__suppress_context__
    try:
        if not fns:
            raise exc
        fns[0](exc, fns[1:])
    except BaseException as e:      # noqa: BLE001 - exc itself: a raise sets __context__, restore it
        if e is not exc:
            raise
        e.__context__, e.__cause__, e.__suppress_context__ = ctx, cause, suppress
        raise


def assertion_failed(args: tuple, frames: list | None) -> None:
    """Raise ``AssertionError(*args)`` for a runtime assertion the compiled code checked after its graph ran
    (torch/asserts.py), through stand-ins of the user's frames at the ``assert``, as eager's traceback reads."""
    raise_in_user_frames(AssertionError(*args), frames, keep_tail=False)
