"""Graph breaks: what cannot be captured runs natively and execution continues in compiled code.

When a trace meets something it cannot capture, the frame is traced again up to just before that instruction.
That segment's glue runs its graph, replays side effects, rebuilds the frame's live state (stack, locals) as
real values and hands it to ``Session.step``. ``step`` runs the one instruction with the concrete interpreter.
Python callees go through their own compiled wrappers, so their tensor work is compiled too. Execution then
continues in the ``ResumeCache`` for the next instruction offset. That cache is a compiled frame like any
other: guarded on the values it reads and cached, and it may break again. A continuation that keeps
recompiling (limit reached), or a state that cannot be rebuilt, runs the rest of the frame concretely.
Torch-free: plugins say which objects call through compiled code (``callee``).
"""
from __future__ import annotations

import threading
import types
from typing import Any, Callable

from .. import logs
from .concrete import ConcreteDomain, call_user
from .interpreter import NULL, Frame, Return, UserException
from .sources import ItemSource, LocalSource, Source
from .tracebacks import raise_in_user_frames


class Lazy:
    """A local of a resumed frame not read yet: wrapped (and guarded) only when the trace reads it."""
    __slots__ = ("obj", "source")

    def __init__(self, obj: Any, source: Source):
        self.obj = obj
        self.source = source


class LazyLocals(dict):
    """Frame locals whose ``Lazy`` entries are wrapped on first read.

    Which locals are bound at a break varies between calls (a loop that ran zero times, a ``del``, a branch
    that assigned a name): an entry of a continuation holds only for the same bound-ness of what it used. A
    name the trace found unbound (never assigned or deleted by the trace itself) is guarded absent; a local
    read into an opaque value (which has no guard of its own to fail) is guarded present; locals passed on
    unread stay absent when absent (``break_tail``)."""
    __slots__ = ("dom", "touched")

    def __getitem__(self, k):
        try:
            v = dict.__getitem__(self, k)
        except KeyError:
            self._absent(k)
            raise
        if type(v) is Lazy:
            v = wrap_state(self.dom, v.obj, v.source)
            dict.__setitem__(self, k, v)
            if type(v).__name__ == "OpaqueVar":
                self.dom.guards.add(f"{k!r} in {LOCALS.expr(self.dom.cg)}", f"local {k} is bound")
        return v

    def __contains__(self, k):
        if dict.__contains__(self, k):
            return True
        self._absent(k)
        return False

    def __setitem__(self, k, v):
        self.touched.add(k)
        dict.__setitem__(self, k, v)

    def __delitem__(self, k):
        self.touched.add(k)
        dict.__delitem__(self, k)

    def _absent(self, k) -> None:
        if k not in self.touched and isinstance(k, str) and k.isidentifier():
            self.dom.guards.add(f"{k!r} not in {LOCALS.expr(self.dom.cg)}", f"local {k} is unbound")

    def get(self, k, default=None):
        return self[k] if k in self else default

    def pop(self, k, *default):
        if k in self:
            v = self[k]
            self.touched.add(k)
            dict.__delitem__(self, k)
            return v
        if default:
            return default[0]
        raise KeyError(k)


def bound_locals(real_locals: dict, names: tuple) -> dict:
    """The locals among ``names`` that are bound (present) in a continuation's incoming ``__locals``."""
    return {k: real_locals[k] for k in names if k in real_locals}


STACK, LOCALS, EXC = LocalSource("__stack"), LocalSource("__locals"), LocalSource("__exc")
RESUME_PARAMS = "__stack, __locals, __exc"


class Session:
    """One ``ember.compile``: its options, and the caches of its continuations and compiled callees."""

    def __init__(self, make_cache: Callable[..., Any], plugins_factory: Callable[[], list]):
        self.make_cache = make_cache            # (fn=..., name=..., resume=...) -> FrameCache
        self.plugins_factory = plugins_factory
        self.resumes: dict[tuple[types.CodeType, int, int], Any] = {}
        self.callees: dict[Any, Any] = {}
        self._local_codes: dict[Any, Any] = {}     # code of a local function -> its one object (None: many)
        self.caches: list[Any] = []             # every cache made for this session, in order
        self._callee_rules = [p for p in plugins_factory() if hasattr(p, "callee")]
        self.concrete = ConcreteDomain(interpret_callees=False, call_hook=self.call_hook)
        self.logged_breaks: set[tuple[str, str]] = set()
        self.n_graphs = 0
        self.n_ops = 0
        self._hinted = False
        # guards the dicts above when several threads run this session's code: two threads reaching the same
        # continuation or callee get one cache (held only to look up or make one, never while compiling)
        self._lock = threading.Lock()

    # -- continuing a frame --------------------------------------------------------------------------------
    def step(self, code, f_globals, ip, stack, locals_, kw_names=None, exc=None):
        """Run the instruction at ``ip`` natively, then continue in compiled code (or return)."""
        while True:         # the glue built ``stack`` and ``locals_`` for this call: the frame may own them
            frame = Frame(self.concrete, code, f_globals, locals_)
            frame.stack, frame.ip, frame.kw_names, frame.exc_info = stack, ip, kw_names, exc
            frame.stop_at = 1
            r = _run_as_user(frame.run)
            if type(r) is Return:
                return r.value
            cache = self.resume_cache(code, f_globals, frame.ip)
            ip, stack, locals_, kw_names, exc = frame.ip, frame.stack, frame.locals, frame.kw_names, frame.exc_info
            if not cache.native:
                return cache.dispatch(stack, locals_, exc)

    def run_rest(self, code, f_globals, ip, stack, locals_, exc=None):
        """The rest of a frame in the concrete interpreter (callees still compiled)."""
        frame = Frame(self.concrete, code, f_globals, dict(locals_))
        frame.stack, frame.ip, frame.exc_info = list(stack), ip, exc
        return _run_as_user(frame.run).value

    def run_function(self, fn: types.FunctionType, args, kwargs):
        """A whole call in the concrete interpreter (callees still compiled)."""
        if fn.__code__.co_flags & 0x3A0:        # generators and coroutines: natively
            return fn(*args, **kwargs)
        return _run_as_user(self.concrete.interpret, None, fn, list(args), dict(kwargs))

    def resume_cache(self, code, f_globals, ip: int):
        key = (code, id(f_globals), ip)
        c = self.resumes.get(key)
        if c is None:
            with self._lock:
                c = self.resumes.get(key)
                if c is None:
                    c = self.resumes[key] = self.make_cache(resume=(code, f_globals, ip))
                    self.caches.append(c)
        return c

    # -- callees of natively run instructions ------------------------------------------------------------
    def call_hook(self, f, fn, args, kwargs):
        target = self.compiled_callee(fn)
        return call_user(fn if target is None else target, args, kwargs)

    def compiled_callee(self, fn: Any) -> Callable | None:
        """The compiled version of a callee (a Python function, bound method, or plugin-known object such
        as an nn.Module), or None to call it natively."""
        if type(fn) is types.FunctionType:
            return self._function(fn)
        if type(fn) is types.MethodType and type(fn.__func__) is types.FunctionType:
            c = self._function(fn.__func__)
            return None if c is None else types.MethodType(c, fn.__self__)
        for p in self._callee_rules:
            r = p.callee(fn)
            if r is not None:
                func, self_ = r
                c = self._function(func, library=True)
                return None if c is None else types.MethodType(c, self_)
        return None

    def _function(self, fn: types.FunctionType, library: bool = False) -> Callable | None:
        if getattr(fn, "__ember_disable__", False) or getattr(fn, "__ember_cache__", None) is not None:
            return None
        from .symbolic import is_local_function
        # A function made by a def inside another function may be made anew per call of its maker (its cache
        # would never be reused), or once (a decorator's wrapper). The first object seen for a code is
        # compiled; a second object of the same code marks the code as made per call, run natively from then.
        if is_local_function(fn):
            with self._lock:
                first = self._local_codes.setdefault(fn.__code__, fn)
                if first is not fn:
                    self.callees.pop(first, None)
                    self._local_codes[fn.__code__] = None
                    return None
        code = fn.__code__
        nparams = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4) + bool(code.co_flags & 8)
        if not all(n.isidentifier() for n in code.co_varnames[:nparams]):     # comprehension bodies (".0")
            return None
        if fn.__code__.co_flags & 0x3A0:                   # generators and coroutines run natively
            return None
        mod = fn.__globals__.get("__name__", "") or ""
        if not library and mod.split(".")[0] in _NATIVE_MODULES:
            return None
        c = self.callees.get(fn)
        if c is None:
            with self._lock:
                c = self.callees.get(fn)
                if c is None:
                    c = self.callees[fn] = self.make_cache(fn=fn)
                    self.caches.append(c)
        return c.dispatch

    # -- reporting --------------------------------------------------------------------------------------
    def note_graphs(self, name: str, graphs: list) -> None:
        """perf hint: a frame split into many small graphs loses most of what compiling buys."""
        with self._lock:
            self.n_graphs += len(graphs)
            self.n_ops += sum(g.get("n_ops", 0) for g in graphs)
            hint = not self._hinted and self.n_graphs >= 8 and self.n_ops / self.n_graphs < 8
            self._hinted = self._hinted or hint
            reasons = sorted({r for r, _ in self.logged_breaks})[:3] if hint else []
        if hint:
            logs.log("perf_hints", f"{name}: the compiled code is split into {self.n_graphs} graphs of "
                                   f"{self.n_ops / self.n_graphs:.1f} ops on average by graph breaks "
                                   f"({'; '.join(reasons)}); remove the breaks (EMBER_LOGS=graph_breaks shows "
                                   "where) to get larger graphs")

    def log_break(self, name: str, e) -> None:
        key = (e.reason, e.user_stack[-1] if e.user_stack else "")
        with self._lock:
            if key in self.logged_breaks:
                return
            self.logged_breaks.add(key)
        if logs.enabled("graph_breaks"):
            where = e.user_stack[-1] if e.user_stack else "?"
            src = f"\n    {e.source_line.strip()}" if getattr(e, "source_line", "") else ""
            hint = f"\n  hint: {e.hint}" if e.hint else ""
            logs.log("graph_breaks", f"graph break in {name}: {e.reason}\n  at {where}{src}{hint}")


def _run_as_user(run: Callable, *args):
    """``run(*args)`` in the concrete interpreter; an exception of the program's leaves it as raised by the
    program's own frames (file:line of the interpreted frames), not by the interpreter's."""
    try:
        return run(*args)
    except UserException as ue:
        failed = ue
    raise_in_user_frames(failed.exc, getattr(failed, "user_frames", None))     # outside the handler: no
    # UserException as __context__


# callees from these modules run natively after a break: no tensor work of the user's to compile in them
# (logging's and warnings' internals would only break again at their locks and I/O)
_NATIVE_MODULES = frozenset(("torch", "ember", "typing", "functools", "contextlib", "abc", "copy", "logging",
                             "warnings", "threading", "traceback", "inspect", "posixpath", "os"))


def resume_locals(d, real_locals: dict) -> LazyLocals:
    """Locals of a resumed frame: cells wrapped now (they are shared with closures), the rest lazily."""
    out = LazyLocals()
    out.dom = d
    out.touched = set()
    for name, v in real_locals.items():
        src = ItemSource(LOCALS, name)
        if type(v) is types.CellType:
            dict.__setitem__(out, name, wrap_cell(d, v, src))
        else:
            dict.__setitem__(out, name, Lazy(v, src))
    return out


def wrap_cell(d, cell: types.CellType, src: Source):
    from .sources import AttrSource
    from .values import RealCellVar
    v = d.by_id.get(id(cell))
    if v is None:
        v = d.by_id[id(cell)] = RealCellVar(cell, AttrSource(src, "cell_contents"), src)
        d.keepalive.append(cell)
    return v


def wrap_state(d, obj: Any, src: Source, opaque: tuple = (float,)):
    """A value of the live state handed to a continuation. Floats there usually come from tensors (``.item()``)
    and change every call: they stay opaque instead of being guarded to one value."""
    from .values import OpaqueVar
    if type(obj) in opaque or (type(obj) is dict and "__builtins__" in obj and "__name__" in obj):
        return OpaqueVar(obj, src)      # (a module's globals: far too big to guard, and always live)
    return d.wrap(obj, src)


def resume_stack(d, real_stack: list) -> list:
    """The stack of a continuation. Strings there too are usually results of the native instruction
    (a formatted number) on their way to a call, so they stay opaque like floats."""
    return [NULL if v is NULL else wrap_state(d, v, ItemSource(STACK, i), (float, str))
            for i, v in enumerate(real_stack)]
