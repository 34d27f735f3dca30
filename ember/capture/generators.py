"""Generators in the symbolic domain: driving a user generator's frame, ``send``/``throw``/``close``, and the
check that no generator is left suspended where closing it would run user code.

A user generator is an ``IterVar`` whose ``gen`` is ``drive(frame)``, a Python generator that resumes the
frame; its ``frame`` is the generator's own interpreter frame. CPython runs a generator's ``finally`` and
``with`` exits when it is closed or collected; the trace cannot know when the collection would happen, so a
generator still suspended inside such a block at the end of the trace is reported unsupported rather than
silently never finishing it. Torch-free.
"""
from __future__ import annotations

from typing import Any

from . import exc_values
from .bytecode import PY
from .interpreter import Frame, UserException, Yield
from .values import Const, IterVar, ObjectVar, Value


class _Throw(Exception):
    """Carries a user exception into ``drive`` (``generator.throw``/``close``); or, with ``resume``, how the
    paused frame goes on instead (after a sub-iterator of its `yield from` finished or failed in a throw)."""

    def __init__(self, exc: BaseException | None, resume=None):
        super().__init__(exc)
        self.exc = exc
        self.resume = resume


def drive(frame: Frame):
    try:
        r = frame.run()
        while type(r) is Yield:
            try:
                sent = yield r.value
            except _Throw as t:
                r = t.resume() if t.resume is not None else frame.throw(t.exc)
            else:
                frame.stack.append(Const(None) if sent is None else sent)
                r = frame.run()
    except UserException as ue:
        if isinstance(ue.exc, StopIteration):       # PEP 479: it leaves the generator as a RuntimeError
            err = RuntimeError("generator raised StopIteration")
            err.__cause__ = err.__context__ = ue.exc
            raise UserException(err, chained=True) from None
        raise
    return r.value


def _finished(e: StopIteration) -> Value:
    return e.value if isinstance(e.value, Value) else Const(e.value)


def next_value(d, f, it: Any) -> tuple[bool, Value]:
    """(True, item), or (False, the return value) when the iterator is exhausted."""
    if type(it) is not IterVar:
        if not isinstance(it, ObjectVar):
            it = d.iter(f, it)
        else:
            try:
                return True, d.call_method(f, it, "__next__", [], {})
            except UserException as ue:
                if isinstance(ue.exc, StopIteration):
                    return False, d.from_python(ue.exc.value)
                raise
    try:
        return True, next(it.gen)
    except StopIteration as e:
        return False, _finished(e)


def send_value(d, f, it: Any, v: Value) -> tuple[bool, Value]:
    """SEND (``yield from``) and ``generator.send``: ``next`` for None, else the iterator's ``send``."""
    if d.is_none(f, v):
        return next_value(d, f, it)
    if type(it) is IterVar and it.frame is not None:
        if it.frame.cur is None:
            raise UserException(TypeError("can't send non-None value to a just-started generator"))
        try:
            return True, it.gen.send(v)
        except StopIteration as e:
            return False, _finished(e)
    try:
        return True, d.call_method(f, it, "send", [v], {})
    except UserException as ue:
        if isinstance(ue.exc, StopIteration):
            return False, d.from_python(ue.exc.value)
        raise


def generator_method(d, f, it: IterVar, name: str, args: list, kwargs: dict) -> Value:
    if kwargs:
        raise UserException(TypeError(f"generator.{name}() takes no keyword arguments"))
    if name == "send":
        if len(args) != 1:
            raise UserException(TypeError(f"generator.send() takes exactly one argument ({len(args)} given)"))
        ok, v = send_value(d, f, it, args[0])
        return stop_if_done(d, f, ok, v)
    if name == "throw":
        if not 1 <= len(args) <= 3:
            raise UserException(TypeError(f"throw expected at most 3 arguments, got {len(args)}"))
        return _throw(d, f, it, _thrown(d, f, args))
    if name == "close" and not args:
        return close(d, f, it)
    raise d.unsupported(f, f"generator.{name}")


def _thrown(d, f, args: list) -> BaseException:
    """The exception ``gen.throw(typ[, val[, tb]])`` raises in the generator: the 3-argument form (contextlib's
    ``__exit__`` on Python 3.11) takes ``val`` when it is an instance of ``typ``, else builds ``typ(val)``; the
    traceback only decorates it."""
    def instance(v) -> bool:        # an exception object (one carrying traced values too: exc_values.py)
        return issubclass(d.python_type(v), BaseException)

    if len(args) == 1 or d.is_none(f, args[1]) and not instance(args[0]):
        return d.exception_of(f, args[0])
    if instance(args[0]):
        raise UserException(TypeError("instance exception may not have a separate value"))
    typ = d.as_python(f, args[0])
    if instance(args[1]) and isinstance(d.exception_of(f, args[1]), typ):
        return d.exception_of(f, args[1])
    val = d.as_python(f, args[1])
    return typ(*val) if isinstance(val, tuple) else typ(val)


def stop_if_done(d, f, ok: bool, v: Value) -> Value:
    """The item, or the StopIteration (carrying the return value) that ``next()`` raises."""
    if ok:
        return v
    if d.is_none(f, v):
        raise UserException(StopIteration())
    if isinstance(v, Value) and not d.is_const(v):     # a tensor, a new object: carried beside the exception
        raise UserException(exc_values.make(d, StopIteration, [v]).exc)
    raise UserException(StopIteration(d.as_python(f, v)))


def _throw(d, f, it: IterVar, exc: BaseException) -> Value:
    if it.frame.cur is None or it.frame.done:
        it.frame.done = True
        it.gen.close()
        raise UserException(exc, chained=True)
    if it.frame.in_yield_from():
        if not isinstance(exc, GeneratorExit):
            return _throw_into_sub(d, f, it, exc)
        exc = _delegate(d, f, it.frame, exc)
    return _go_on(d, f, it, _Throw(exc))


def _go_on(d, f, it: IterVar, msg: _Throw) -> Value:
    """Resume the paused generator with ``msg``: its next item, or the StopIteration of its end."""
    try:
        return it.gen.throw(msg)
    except StopIteration as e:
        return stop_if_done(d, f, False, _finished(e))


def _throw_into_sub(d, f, it: IterVar, exc: BaseException) -> Value:
    """``throw`` into a generator waiting in `yield from` goes to the sub-iterator first (CPython's
    ``_gen_throw``): a sub-generator's own handlers run; a user iterator's ``throw(typ, val, tb)`` method is
    called (without one the exception is raised at the `yield from`). What the sub-iterator yields, the
    generator yields; when it returns or raises, the generator goes on past the `yield from` with that value,
    or with that exception."""
    fr = it.frame
    sub = fr.stack[-1]
    sub_gen = type(sub) is IterVar and sub.frame is not None
    meth = _method(d, f, sub, "throw") if isinstance(sub, ObjectVar) else None
    if not sub_gen and meth is None:        # a plain iterator: raised at the `yield from` (throw_here)
        return _go_on(d, f, it, _Throw(exc))
    try:            # only the sub-iterator's own work: what the outer frame then does is not caught here
        if sub_gen:
            return _throw(d, f, sub, exc)
        return d.call(f, meth, [Const(type(exc)), d.wrap_exception(exc), Const(None)], {})
    except UserException as ue:
        err = ue.exc
    return _go_on(d, f, it, _Throw(None, lambda: _after_sub_failed(d, fr, err)))


def _method(d, f, obj: Value, name: str) -> Value | None:
    """``getattr(obj, name)``, None when it has no such attribute (CPython's lookup for throw/close)."""
    try:
        return d.getattr(f, obj, name)
    except UserException as ue:
        if isinstance(ue.exc, AttributeError):
            return None
        raise


def _after_sub_failed(d, fr: Frame, err: BaseException):
    """The sub-iterator of the paused `yield from` ended in a throw: 3.11 pops it and jumps past the SEND loop,
    sending a StopIteration's value, or raising any other exception there (3.12+: CLEANUP_THROW does it)."""
    if PY >= (3, 12):
        return fr.throw(err)
    fr.stack.pop()
    if not isinstance(err, StopIteration):
        return fr.throw(err)
    send = fr.instrs[fr.instrs[fr.ip + 1].jump_target]
    payload = exc_values.lookup(d, err)
    fr.stack.append(payload.attrs["value"] if payload is not None else d.from_python(err.value))
    fr.ip = send.jump_target
    return fr.run()


def close(d, f, it: IterVar) -> Value:
    fr = it.frame
    if fr.cur is None or fr.done:           # never started, or finished: nothing runs
        fr.done = True
        it.gen.close()
        return Const(None)
    exc = GeneratorExit()
    if fr.in_yield_from():
        exc = _delegate(d, f, fr, exc)
    try:
        it.gen.throw(_Throw(exc))
    except StopIteration as e:
        return _finished(e) if _close_returns_value() else Const(None)
    except UserException as ue:
        if isinstance(ue.exc, (GeneratorExit, StopIteration)):
            return Const(None)
        raise
    raise UserException(RuntimeError("generator ignored GeneratorExit"))


def _delegate(d, f, fr: Frame, exc: BaseException) -> BaseException:
    """``close`` (and ``throw(GeneratorExit)``) of a generator waiting in `yield from` first closes the
    sub-iterator (CPython's ``_gen_throw``), here; the exception to raise in the outer frame is
    returned (a user iterator's ``close`` method is called, when it has one)."""
    sub = fr.stack[-1]
    sub_gen = type(sub) is IterVar and sub.frame is not None
    try:
        if sub_gen:
            close(d, f, sub)
        elif isinstance(sub, ObjectVar):
            meth = _method(d, f, sub, "close")
            if meth is not None:
                d.call(f, meth, [], {})
    except UserException as ue:
        return ue.exc
    return exc


def _close_returns_value() -> bool:
    if PY in ((3, 11), (3, 12)):
        return False
    if PY == (3, 13):
        return True         # 3.13: close() returns the generator's return value
    raise NotImplementedError(f"generator.close() on CPython {PY[0]}.{PY[1]}")


def close_dropped(d, top: Frame, ret: Value) -> None:
    """Close, in the trace, the generators the outermost frame made and drops as it returns.

    CPython frees a frame's locals when it returns; a generator whose last reference goes then is closed, so a
    ``finally``/``with`` around its paused ``yield`` runs right after the return value is computed (in the
    order of the locals that held them). A generator that the return value reaches is not closed here (it
    escapes: the glue refuses it), nor one made by an inlined callee or no longer held by a local (it was
    closed earlier, when its last reference went: not modelled, left to ``check_suspended``)."""
    pending = [it for it in d.generators if it.frame.parent is top and _needs_close(it.frame)]
    if not pending:
        return
    escaping = {id(v) for v in _reachable([ret])}
    names = top.code.co_varnames + top.code.co_cellvars
    held = [top.locals.get(n) for n in names] if isinstance(top.locals, dict) else []
    # only those the locals still hold: one dropped earlier (a for loop's iterator popped at ``break``, a
    # rebound name) was closed then, mid-frame (not modelled: check_suspended refuses it)
    order = [v for v in _reachable([v for v in held if v is not None]) if type(v) is IterVar]
    for it in order:
        if id(it) in escaping or all(it is not p for p in pending) or not _needs_close(it.frame):
            continue
        try:
            close(d, top, it)
        except UserException as ue:
            raise it.frame.unsupported(
                f"closing generator {it.frame.code.co_qualname} when the function returns raised "
                f"{type(ue.exc).__name__}: {ue.exc} (CPython prints and ignores it)",
                "close the generator inside the compiled function") from None


def _needs_close(fr: Frame) -> bool:
    return fr.cur is not None and not fr.done and _closing_runs_code(fr)


def _reachable(roots: list):
    """Values reachable from ``roots`` through containers and new objects' attributes, each once, depth first,
    in the order CPython's deallocation releases them."""
    from .values import DictVar, ListVar, SetVar, TupleVar
    seen: set[int] = set()
    stack = list(reversed(roots))
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        yield v
        if type(v) in (ListVar, TupleVar):
            kids = list(reversed(v.items))      # list and tuple deallocation frees the last item first
        elif type(v) in (DictVar, SetVar):
            kids = list(v.items.values()) + (list(v.keys.values()) if type(v) is DictVar else [])
        elif isinstance(v, ObjectVar):
            kids = [x for x in v.overlay.values() if isinstance(x, Value)]
        elif type(v) is IterVar and v.frame is not None:        # a generator's state: its locals and stack
            kids = list(dict.values(v.frame.locals)) + list(v.frame.stack)
        elif type(v).__name__ == "CellVar":
            kids = [v.contents]
        else:
            kids = []
        stack.extend(reversed([k for k in kids if isinstance(k, Value)]))


def check_suspended(d, live: list) -> None:
    """Unsupported if a generator of the trace is suspended where closing it would run user code and it is
    dropped by the trace. One that ``live`` (the return value, or a stopped frame's stack and locals) or a
    replayed side effect reaches leaves compiled code as a real generator in its state (gen_rebuild.py),
    whose cleanup runs when CPython closes it."""
    escaping = None
    for it in d.generators:
        fr = it.frame
        if fr.cur is not None and not fr.done and _closing_runs_code(fr):
            if escaping is None:
                escaping = {id(v) for v in _reachable(list(live) + _effect_roots(d))}
            if id(it) in escaping:
                continue
            raise fr.unsupported(
                f"generator {fr.code.co_qualname} is left suspended inside a try/finally or with block; "
                "CPython runs that cleanup when the generator is closed or collected",
                "exhaust the generator or call its close() inside the compiled function")


def _effect_roots(d) -> list:
    """The new values the glue's side-effect replay stores into existing objects, globals and cells."""
    roots: list = []
    for v in d.side_effects:
        if isinstance(v, ObjectVar):
            roots += [x for x in v.overlay.values() if isinstance(x, Value)]
        elif hasattr(v, "items"):
            items = v.items
            roots += list(items.values()) if isinstance(items, dict) else list(items)
        if getattr(v, "written", None) is not None:
            roots.append(v.written)
    roots += [w[2] for w in d.global_writes.values()]
    return [r for r in roots if isinstance(r, Value)]


def _closing_runs_code(fr: Frame) -> bool:
    """Whether ``close()`` (GeneratorExit at the suspended yield) would run code of the generator: a
    ``finally`` or ``with`` exit does; ``except`` clauses that cannot match GeneratorExit and the cleanup that
    re-raises do not (``collections.abc.Sequence.__iter__``'s ``except IndexError``)."""
    if fr.in_yield_from() and isinstance(fr.stack[-1], ObjectVar) and _may_have(fr.stack[-1], "close"):
        return True             # closing first calls the user iterator's close()
    offset = fr.cur.offset
    while True:
        entry = fr.decoded.handler_for(offset)
        if entry is None:
            return False
        i = fr.decoded.by_offset[entry.target]
        target = fr.instrs[i]
        if target.opname == "CALL_INTRINSIC_1" and target.argrepr == "INTRINSIC_STOPITERATION_ERROR":
            return False        # 3.12+: the generator-wide handler only converts StopIteration
        if target.opname == "CLEANUP_THROW":
            offset = target.offset  # a `yield from`: its sub-generator is checked on its own
            continue
        reraise = _reraise_of(fr, i)
        if reraise is None:
            return True
        offset = reraise


_PURE_LOADS = {"LOAD_GLOBAL", "LOAD_NAME", "LOAD_ATTR", "LOAD_CONST", "BUILD_TUPLE", "NOP"}


def _reraise_of(fr: Frame, i: int) -> int | None:
    """The offset of the RERAISE a GeneratorExit reaches from the handler at instruction ``i`` without running
    user code, or None. Handles ``except`` chains whose classes are globals or builtins (``except
    IndexError:``, ``except (KeyError, ValueError):``) and the ``COPY 3; POP_EXCEPT; RERAISE`` cleanup."""
    ins = fr.instrs
    if ins[i].opname == "COPY" and ins[i + 1].opname == "POP_EXCEPT" and ins[i + 2].opname == "RERAISE":
        return ins[i + 2].offset
    if ins[i].opname != "PUSH_EXC_INFO":
        return None
    i += 1
    while True:
        if ins[i].opname == "RERAISE":
            return ins[i].offset
        classes: list = []
        while ins[i].opname in _PURE_LOADS:
            op = ins[i]
            if op.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                cls = _global_value(fr, op.argval)
                if cls is None:
                    return None
                classes.append(cls)
            elif op.opname != "NOP" and op.opname != "BUILD_TUPLE":
                return None         # exception classes read from attributes or constants: not followed
            i += 1
        if ins[i].opname != "CHECK_EXC_MATCH" or not classes:
            return None
        try:
            if any(issubclass(GeneratorExit, c) for c in classes):
                return None
        except TypeError:
            return None
        jump = ins[i + 1]
        if jump.opname not in ("POP_JUMP_IF_FALSE", "POP_JUMP_FORWARD_IF_FALSE") or jump.jump_target is None:
            return None
        i = jump.jump_target


def _global_value(fr: Frame, name: str):
    import builtins
    g = fr.f_globals
    if name in g:
        v = g[name]
    else:
        b = g.get("__builtins__", builtins)
        b = b if isinstance(b, dict) else b.__dict__
        v = b.get(name)
    return v if isinstance(v, type) else None


def _may_have(v: ObjectVar, name: str) -> bool:
    """Whether the object has the attribute: on its class, in its own __dict__ or set by the trace."""
    return any(name in vars(k) for k in type(v.obj).__mro__) or name in v.overlay \
        or name in (getattr(v.obj, "__dict__", None) or {})
