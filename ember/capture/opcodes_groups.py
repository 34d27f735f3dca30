"""Opcode handlers for `except*` (exception groups): CHECK_EG_MATCH and the re-raise that merges what the
clauses raised (PREP_RERAISE_STAR on 3.11, CALL_INTRINSIC_2 from 3.12), after CPython's
``exception_group_match`` (ceval.c) and ``_PyExc_PrepReraiseStar`` (exceptions.c). Exceptions are real
objects in both domains, so these work on their values. Torch-free."""
from __future__ import annotations

from .interpreter import UserException
from .opcode_errors import check_except_type
from .registry import register_opcode as op


@op("CHECK_EG_MATCH")
def _check_eg_match(f, ins):
    d = f.dom
    match_type = d.as_python(f, f.stack.pop())
    _check_except_star_type(match_type)
    exc_v = f.stack[-1]
    exc = None if d.is_none(f, exc_v) else d.exception_of(f, exc_v)
    match, rest = _group_match(exc, match_type)
    if match is None:
        f.stack.append(d.const(None))
        return
    f.stack[-1] = d.const(None) if rest is None else d.wrap_exception(rest)
    f.stack.append(d.wrap_exception(match))
    f.exc_info = f.stack[-1]        # the clause handles the matching part (what a bare `raise` re-raises)


def _check_except_star_type(t) -> None:
    check_except_type(t)
    for c in (t if isinstance(t, tuple) else (t,)):
        if issubclass(c, BaseExceptionGroup):
            raise UserException(TypeError(
                "catching ExceptionGroup with except* is not allowed. Use except instead."))


def _group_match(exc, match_type):
    """(match, rest): the part of ``exc`` an ``except* match_type`` clause handles, and what is left."""
    if exc is None:
        return None, None
    if isinstance(exc, match_type):
        if isinstance(exc, BaseExceptionGroup):
            return exc, None
        wrapped = BaseExceptionGroup("", (exc,))      # a naked exception is wrapped in a group
        wrapped.__traceback__ = exc.__traceback__
        return wrapped, None
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(match_type)
    return None, exc


@op("PREP_RERAISE_STAR", max_version=(3, 11))
def _prep_reraise_star(f, ins):
    excs = f.stack.pop()
    orig = f.stack.pop()
    f.stack.append(_prep_reraise(f, orig, excs))


@op("CALL_INTRINSIC_2", min_version=(3, 12))
def _call_intrinsic_2(f, ins):
    if ins.argrepr != "INTRINSIC_PREP_RERAISE_STAR":
        raise f.unsupported(f"CALL_INTRINSIC_2 {ins.argrepr} (type parameter syntax) is not supported")
    excs = f.stack.pop()
    orig = f.stack.pop()
    f.stack.append(_prep_reraise(f, orig, excs))


def _prep_reraise(f, orig_v, excs_v):
    """What the `try ... except*` statement re-raises once its clauses ran: None, or a group of the
    exceptions raised in clauses plus the unhandled or re-raised part of the original."""
    d = f.dom
    excs = [None if d.is_none(f, e) else d.exception_of(f, e) for e in d.unpack_all(f, excs_v)]
    orig = d.exception_of(f, orig_v)
    if not excs:
        return d.const(None)
    if not isinstance(orig, BaseExceptionGroup):     # a naked exception: at most one clause ran
        return d.const(None) if excs[0] is None else d.wrap_exception(excs[0])
    raised = [e for e in excs if e is not None and not _same_metadata(e, orig)]
    reraised = [e for e in excs if e is not None and _same_metadata(e, orig)]
    kept = _projection(orig, reraised)
    if kept is not None:
        raised.append(kept)
    if not raised:
        return d.const(None)
    result = BaseExceptionGroup("", raised) if len(raised) > 1 else raised[0]
    return d.wrap_exception(result)


def _same_metadata(a: BaseException, b: BaseException) -> bool:
    return (getattr(a, "__notes__", None) is getattr(b, "__notes__", None)
            and a.__traceback__ is b.__traceback__ and a.__cause__ is b.__cause__
            and a.__context__ is b.__context__)


def _leaf_ids(e: BaseException, out: set[int]) -> None:
    if isinstance(e, BaseExceptionGroup):
        for x in e.exceptions:
            _leaf_ids(x, out)
    else:
        out.add(id(e))


def _projection(orig: BaseExceptionGroup, keep: list[BaseException]):
    """The part of ``orig`` (its structure kept) made of the leaves of ``keep``, or None."""
    if not keep:
        return None
    ids: set[int] = set()
    for e in keep:
        _leaf_ids(e, ids)
    return orig.split(lambda e: id(e) in ids)[0]
