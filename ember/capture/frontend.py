"""Tracing a frame and turning the trace into a guarded cache entry; the per-function cache.

``trace_frame`` runs a function's code in the symbolic domain. ``build_entry`` turns the result into glue
source (guards, graph call, side effects, return). ``FrameCache`` keeps a function's entries, checks them on
each call in order, traces on a miss, logs recompiles and falls back to running the function natively when
the trace is unsupported or the entry limit is reached. Torch-free: plugins and a graph hook plug in.
"""
from __future__ import annotations

import itertools
import threading
import time
import traceback
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import contextlib
import sys

from .. import logs
from ..errors import EmberError, InternalError, Unsupported
from ..gcpause import no_full_collections
from .generators import check_suspended, close_dropped
from .bytecode import decode
from .glue import GlueBuilder
from .interpreter import NULL, Frame, Stop, UserException, bind_arguments
from .live_defaults import LiveDefaults, param_names as _param_names, signature
from ..emit import py_name, py_str
from .sources import LocalSource, literal
from .symbolic import SymbolicDomain
from .tracebacks import trim_if_user
from .values import Value


class _Miss:
    __slots__ = ()

    def __repr__(self):
        return "MISS"


MISS = _Miss()


class Counters:
    """``ember.stats()``'s counts, safe to bump from several threads. The compile-path counts (``bump``) take a
    lock; cache hits, counted on every cached call, are ``next()`` of an ``itertools.count`` (one C call, atomic
    under the GIL: no lock and no lost update on the hot path)."""

    NAMES = ("frames_compiled", "graphs_compiled", "graph_breaks", "recompiles", "fallbacks_to_eager",
             "symbolic_graphs")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self.NAMES, 0)
        self._hits = itertools.count()
        self.hit: Callable[[], int] = self._hits.__next__       # what the dispatchers call on a hit
        self._hits_base = 0

    def bump(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def _hits_now(self) -> int:
        return int(repr(self._hits)[len("count("):-1])      # the count's next value, read without taking it

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            out = dict(self._counts)
        out["cache_hits"] = self._hits_now() - self._hits_base
        return out

    def reset(self) -> None:
        with self._lock:
            self._counts = dict.fromkeys(self.NAMES, 0)
            self._hits_base = self._hits_now()


STATS = Counters()


@dataclass(repr=False)
class Entry:
    fn: Callable                       # the generated entry function: returns MISS when a guard fails
    guard_source: str
    glue_source: str
    guards: list = field(default_factory=list)
    bindings: dict = field(default_factory=dict)
    eager: bool = False                # runs the original function natively
    whole: bool = False                # compiled to the return: no graph break, no continuation
    reason: str = ""
    graphs: list = field(default_factory=list)
    compile_time: float = 0.0


# -- signatures ------------------------------------------------------------------------------------------
# -- tracing ---------------------------------------------------------------------------------------------
_NOT_A_PLAIN_FUNCTION = 0x20 | 0x80 | 0x100 | 0x200     # generator, coroutine, iterable coroutine, async gen


def trace_frame(d: SymbolicDomain, fn: types.FunctionType, args: tuple, kwargs: dict,
                stop_at: int | None = None) -> Value | Frame:
    code = fn.__code__
    if code.co_flags & _NOT_A_PLAIN_FUNCTION:
        raise Unsupported(f"compiling {fn.__qualname__}, a generator or coroutine function",
                          "compile the function that consumes it instead",
                          [f"{code.co_filename}:{code.co_firstlineno}"])
    real = bind_arguments(code, fn.__defaults__ or (), fn.__kwdefaults__, list(args), dict(kwargs), tuple, dict,
                          fn.__qualname__)
    locals_ = {name: d.wrap(obj, LocalSource(name)) for name, obj in real.items()}
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        locals_[name] = d.wrap(cell, None)
    frame = Frame(d, code, fn.__globals__, locals_, None, fn)
    return run_top(d, frame, stop_at)


def trace_resume(d: SymbolicDomain, code: types.CodeType, f_globals: dict, ip: int, args: tuple,
                 stop_at: int | None = None) -> Value | Frame:
    """Trace a frame from instruction ``ip`` with the live state a graph break handed over."""
    from .resume import resume_locals, resume_stack
    real_stack, real_locals, real_exc = args
    frame = Frame(d, code, f_globals, {}, None, None)
    frame.locals = resume_locals(d, real_locals)
    frame.stack = resume_stack(d, real_stack)
    frame.ip = ip
    if real_exc is not None:
        from .resume import EXC
        frame.exc_info = d.wrap(real_exc, EXC)
    return run_top(d, frame, stop_at)


def run_top(d: SymbolicDomain, frame: Frame, stop_at: int | None) -> Value | Frame:
    """Run the outermost frame of a trace: its return value, or the frame itself when stopped for a break."""
    d.top_frame = frame
    frame.stop_at = stop_at
    r = frame.run()
    try:
        if type(r) is not Stop:
            close_dropped(d, frame, r.value)     # CPython closes them as the frame's locals go
        live = [r.value] if type(r) is not Stop else frame.stack + list(dict.values(frame.locals))
        check_suspended(d, live)    # a generator paused in try/finally: its cleanup must not be skipped
    except Unsupported as e:
        e.resumable = False     # not an instruction the glue could run natively
        raise
    return frame if type(r) is Stop else r.value


def _state_expr(glue: GlueBuilder, v: Any) -> str:
    from .resume import Lazy
    if v is NULL:
        return glue.cg.bind(NULL, "NULL")
    if type(v) is Lazy:
        return v.source.expr(glue.cg)
    return glue.expr(v)


def break_tail(glue: GlueBuilder, frame: Frame, step: Callable) -> str:
    """The expression that hands a stopped frame's live state to ``step`` (run one instruction natively,
    continue compiled)."""
    from .liveness import kept_locals
    from .resume import LOCALS, Lazy, LazyLocals, bound_locals
    cg = glue.cg
    stack = ", ".join(_state_expr(glue, v) for v in frame.stack)
    local_items = dict.items(frame.locals) if isinstance(frame.locals, dict) else frame.locals.items()
    kept = kept_locals(frame.code, frame.ip)
    if kept is not None:        # locals the rest of the function never reads are not handed over
        local_items = [(k, v) for k, v in local_items if k in kept]
    unread: tuple = ()
    if isinstance(frame.locals, LazyLocals):
        # the locals this segment neither read nor wrote are passed on as they came, bound or not: a name
        # unbound on this call stays unbound in the continuation, and one bound is not dropped
        untouched = [k for k in frame.code.co_varnames if k not in frame.locals.touched]
        unread = tuple(k for k in untouched if not dict.__contains__(frame.locals, k)
                       or type(dict.__getitem__(frame.locals, k)) is Lazy)
    locs = ", ".join([f"**{cg.bind(bound_locals, 'bound_locals')}({LOCALS.expr(cg)}, {unread!r})"] * bool(unread)
                     + [f"{py_str(k)}: {_state_expr(glue, v)}" for k, v in local_items if v is not NULL and type(v) is not Lazy])
    exc = "None" if frame.exc_info is None else _state_expr(glue, frame.exc_info)
    return (f"({cg.bind(frame.code, 'code')}, {cg.bind(frame.f_globals, 'G')}, {frame.ip}, "
            f"[{stack}], {{{locs}}}, {literal(frame.kw_names, cg)}, {exc})")


def build_entry(d: SymbolicDomain, ret: Any, fn: Any, graph_hook: Callable | None,
                params: str, step: Callable | None = None) -> tuple[str, dict, list]:
    """Glue source for a finished trace. ``graph_hook(d, glue)`` returns (lines computing ``__out``, graphs).
    ``ret`` is the returned value, or the frame stopped at a graph break (then ``step`` continues it)."""
    glue = GlueBuilder(d)
    ret_expr = break_tail(glue, ret, step) if isinstance(ret, Frame) else glue.expr(ret)
    effects = glue.side_effect_lines()
    checks = _assert_lines(glue)
    graph_lines, graphs = (graph_hook(d, glue) if graph_hook is not None else ([], []))
    if glue.graph_outputs and not graph_lines:
        raise InternalError("values from a graph were used but no graph was built")
    guard = "\n            and ".join(g.expr for g in d.guards.guards) or "True"
    lines = [f"def __entry({params}):",
             "    try:",
             f"        if not ({guard}):",
             "            return __MISS",
             "    except Exception:",
             "        return __MISS"]
    lines += ["    " + ln for ln in graph_lines]
    lines += ["    " + ln for ln in checks]
    lines += ["    " + ln for ln in glue.creations + glue.fills]
    if isinstance(ret, Frame):          # graph break: state read first, effects, then the native step
        lines.append(f"    __state = {ret_expr}")
        lines += ["    " + ln for ln in effects]
        lines.append(f"    return {glue.cg.bind(step, 'step')}(*__state)")
    elif effects:
        lines.append(f"    __ret = {ret_expr}")
        lines += ["    " + ln for ln in effects]
        lines.append("    return __ret")
    else:
        lines.append(f"    return {ret_expr}")
    return "\n".join(lines) + "\n", graphs, effects


def _assert_lines(glue: GlueBuilder) -> list[str]:
    """The runtime assertions' checks (torch/asserts.py): after the graph, before any side effect, as eager
    raises at the assert; the error is raised through the user's frames at the ``assert``."""
    from .tracebacks import assertion_failed
    lines = []
    fail = glue.cg.bind(assertion_failed, "assertion_failed") if glue.d.runtime_asserts else None
    for cond, msg, frames in glue.d.runtime_asserts:
        args = () if msg is None else (msg,)
        lines.append(f"if not {glue.output_ref(cond)}:")
        lines.append(f"    {fail}({glue.cg.bind(args, 'msg')}, {glue.cg.bind(frames, 'frames')})")
    return lines


def _plugin_graphs(d: SymbolicDomain, glue: GlueBuilder):
    lines, graphs = [], []
    for p in d.plugins:
        hook = getattr(p, "graph_hook", None)
        if hook is not None:
            ls, gs = hook(d, glue)
            lines += ls
            graphs += gs
    return lines, graphs


def _exec(source: str, bindings: dict, filename: str) -> Callable:
    ns = dict(bindings)
    exec(compile(source, filename, "exec"), ns)     # noqa: S102 - ember's own generated glue
    return ns["__entry"]


class FrameCache:
    """The compiled entries of one Python function (or, with ``resume=(code, globals, ip)``, of the rest of a
    frame from instruction ``ip`` after a graph break), checked in order on every call."""

    def __init__(self, fn: types.FunctionType | None = None, *, resume: tuple | None = None, session: Any = None,
                 plugins_factory: Callable[[], list] = list, graph_hook: Callable | None = None,
                 fullgraph: bool = False, limit: int = 8, options: Any = None, name: str | None = None):
        self.fn = fn
        self.resume = resume
        self.session = session
        self.plugins_factory = plugins_factory
        self.graph_hook = graph_hook
        self.fullgraph = fullgraph
        self.limit = limit
        self.options = options
        self.native = False        # a continuation whose first instruction always breaks: stepped natively
        self.dynamic: set[str] = set()      # sources of numbers that changed between calls (not guarded)
        self.frame_state: dict = {}         # sizes and ints earlier compiles saw (automatic dynamic shapes)
        self.static_shapes = False          # symbolic sizes failed for this frame once: compile it static
        self.entries: list[Entry] = []
        self._entry_fns: list[Callable] = []        # what the dispatcher walks: entry fns, most recent first
        self._movable: set[Callable] = set()        # entries a hit moves to the front (``_to_front``)
        self.break_reasons: list[Unsupported] = []
        self._lock = threading.RLock()     # held while compiling an entry (reentrant: a compile may recurse)
        if resume is not None:
            from .resume import RESUME_PARAMS
            code, _, ip = resume
            self.code = code
            self.params = self.call_args = RESUME_PARAMS
            self.sig_binds: dict = {}
            ins = decode(code).instrs[ip]
            self.name = name or f"{code.co_qualname} (resumed at line {ins.lineno})"
        else:
            self.code = fn.__code__
            self.name = name or fn.__qualname__
            self.params, self.call_args, self.sig_binds = signature(self.code, fn.__defaults__, fn.__kwdefaults__)
        self.dispatch = self._make_dispatcher()

    def _make_dispatcher(self) -> Callable:
        if self.resume is None and any(p.startswith("__") for p in _param_names(self.code)):
            # a parameter named like ember's generated names (``__entries``, ``__MISS``, ``__s0``) would shadow
            # them in the dispatcher, guards and glue: this function runs in the concrete interpreter, whose
            # calls of other functions and modules still go through their compiled code
            logs.log("perf_hints", f"ember: {self.name} is not compiled: a parameter name starts with '__'")

            def disp(*args, **kwargs):
                return self._fallback(args, kwargs, True)
            return self._named(disp)
        # an exception leaving compiled code loses ember's frames (glue, dispatchers, the interpreter) from
        # its traceback; the bare raise adds no frame of the dispatcher's own (tracebacks.py)
        live = LiveDefaults(self) if self.resume is None and self.fn is not None else None
        src = (f"def __dispatch({live.params if live else self.params}):\n"
               + (live.prologue if live else "") +
               f"    try:\n"
               f"        for __e in __entries:\n"
               f"            __r = __e({self.call_args})\n"
               f"            if __r is not __MISS:\n"
               f"                if __e is not __entries[0]:\n"
               f"                    __front(__e)\n"
               f"                __hit()\n"
               f"                return __r\n"
               f"        return __miss({self.call_args})\n"
               f"    except __EmberError:\n"
               f"        raise\n"
               f"    except Exception as __x:\n"
               f"        __trim(__x)\n"
               f"        raise\n")
        ns = dict(self.sig_binds, __entries=self._entry_fns, __MISS=MISS, __miss=self._miss, __hit=STATS.hit,
                  __EmberError=EmberError, __trim=trim_if_user, __front=self._to_front,
                  **(live.bindings if live else {}))
        exec(compile(src, f"<ember dispatch {self.name}>", "exec"), ns)       # noqa: S102
        if live is not None:
            live.ns, self.live_defaults = ns, live
        return self._named(ns["__dispatch"])

    def _named(self, disp: Callable) -> Callable:
        disp.__ember_cache__ = self
        if self.fn is not None:
            disp.__name__ = self.fn.__name__
            disp.__wrapped__ = self.fn
            disp.__doc__ = self.fn.__doc__
            disp.__qualname__ = self.fn.__qualname__
        return disp

    # -- running without compiled code for this frame ---------------------------------------------------
    def _fallback(self, args, kwargs, concrete: bool):
        """Run the call without a compiled entry: the concrete interpreter (so callees still compile) or,
        for a whole function with ``concrete=False``, natively."""
        if self.resume is not None:
            code, g, ip = self.resume
            if self.native:
                return self.session.step(code, g, ip, args[0], args[1], None, args[2])
            return self.session.run_rest(code, g, ip, *args)
        if concrete and self.session is not None:
            return self.session.run_function(self.fn, args, kwargs)
        return self.fn(*args, **kwargs)

    # -- misses ----------------------------------------------------------------------------------------
    def _miss(self, /, *args, **kwargs):
        """No entry matched: compile one (or fall back) under this cache's lock, then run it outside the lock.

        Threads that miss together compile once: each takes the lock in turn and first checks the entries added
        since it last looked, so one waiting on another's compile uses that entry when its guards pass. The
        lock is per cache and held only while compiling: cached calls (the dispatcher) never take it, and no
        user code runs under it (an entry run under it could call a function whose compile another thread
        holds while waiting for this one)."""
        checked: set = set()        # entries this call is known to fail (the dispatcher's walk not counted)
        while True:
            for fn in list(self._entry_fns):        # a snapshot: hits reorder the list (``_to_front``)
                if fn in checked:
                    continue
                r = fn(*args, **kwargs)
                if r is not MISS:
                    STATS.hit()
                    return r
                checked.add(fn)
            with self._lock:
                if all(fn in checked for fn in self._entry_fns):   # nothing new: this thread compiles
                    entry, run = self._compile_locked(args, kwargs)
                    break
                # else another thread added an entry (or ember.reset() emptied the cache): walk again
        if run is not None:
            return run()
        r = entry.fn(*args, **kwargs)
        if r is MISS:
            raise InternalError(f"ember: a fresh entry for {self.name} rejected the call that built it; guards:\n"
                                + entry.guard_source)
        return r

    def _compile_locked(self, args, kwargs) -> tuple[Entry, Callable | None]:
        """(the new entry, what runs this call instead of the entry or None); the caller holds ``_lock``."""
        if len(self.entries) >= self.limit:
            logs.warn_once(f"limit:{id(self)}",
                           f"ember: {self.name} ({self._where()}) was recompiled {self.limit} times "
                           f"(cache_size_limit); it now runs eagerly. Last reason: {self._why_missed(args, kwargs)}")
            STATS.bump("fallbacks_to_eager")
            entry = self._eager_entry("recompile limit reached", [], concrete=True)
            self._add(entry)
            return entry, (lambda: self._fallback(args, kwargs, True))
        if self.entries:
            STATS.bump("recompiles")
            if self.resume is not None:
                self._note_dynamic(args, kwargs)
            if logs.enabled("recompiles"):
                logs.log("recompiles", f"recompiling {self.name} ({self._where()}): "
                                       f"{self._why_missed(args, kwargs)}")
        with _user_saved_tensors_hooks_off(), no_full_collections():    # no user code runs in a compile
            entry = self.compile_entry(args, kwargs)
        self._add(entry)
        return entry, None

    def _add(self, entry: Entry) -> None:
        self.entries.append(entry)
        self._entry_fns.append(entry.fn)
        if entry.whole and not entry.eager:
            self._movable.add(entry.fn)

    def _to_front(self, fn: Callable) -> None:
        """The entry that matched goes first (most recently used first, as torch.compile's cache): a decode
        loop whose later steps all hit the symbolic entry stops checking, on every token, the static entries
        of the first steps, whose guards fail only after hundreds of checks (a KV cache's size comes late).
        Only entries compiled to the return move: one that runs eagerly (the recompile limit's has no
        guards) would take every call, and one that continues after a graph break would send calls that an
        older, more specialized entry served into other continuations (new compiles there). One slice
        assignment: a dispatcher walking the list meanwhile at worst checks an entry twice or misses one."""
        if fn in self._movable:
            self._entry_fns[:] = [fn] + [f for f in self._entry_fns if f is not fn]

    def _where(self) -> str:
        c = self.code
        if self.resume is not None:
            return f"{c.co_filename}:{decode(c).instrs[self.resume[2]].lineno}"
        return f"{c.co_filename}:{c.co_firstlineno}"

    def _failing_guard(self, args, kwargs):
        """(entry, first failing guard of it or None if a guard raised) for the newest entry with guards
        (guards run in order: later ones use locals that earlier ones assign); None if none failed."""
        for e in reversed(self.entries):
            if not e.guards:
                continue
            body = "".join(f"        if not ({g.expr}):\n            return {i}\n" for i, g in enumerate(e.guards))
            src = (f"def __which({self.params}):\n    __i = 0\n    try:\n{body}    except Exception:\n"
                   f"        return -1\n    return None\n")
            ns = dict(e.bindings, **self.sig_binds)
            exec(compile(src, "<ember guard check>", "exec"), ns)      # noqa: S102
            i = ns["__which"](*args, **kwargs)
            if i is not None:
                return e, (e.guards[i] if i >= 0 else None)
        return None

    def _why_missed(self, args, kwargs) -> str:
        hit = self._failing_guard(args, kwargs)
        if hit is None:
            return "no entry matched"
        g = hit[1]
        return f"guard failed: {g.reason}  [{g.expr}]" if g else "a guard raised an exception"

    def _note_dynamic(self, args, kwargs) -> None:
        """Automatic dynamic for continuations: a number handed across a graph break that changed between
        calls (a loop counter, say) is not guarded again; its uses become graph inputs or breaks."""
        hit = self._failing_guard(args, kwargs)
        if hit is not None and hit[1] is not None and hit[1].number_at:
            self.dynamic.add(hit[1].number_at)

    # -- compiling -------------------------------------------------------------------------------------
    def _trace(self, d: SymbolicDomain, args, kwargs, stop_at: int | None = None):
        if self.resume is not None:
            code, g, ip = self.resume
            return trace_resume(d, code, g, ip, args, stop_at)
        return trace_frame(d, self.fn, args, kwargs, stop_at)

    def _domain(self) -> SymbolicDomain:
        STATS.bump("frames_compiled")
        d = SymbolicDomain(self.plugins_factory(), self.options)
        d.dynamic = self.dynamic
        d.is_resume = self.resume is not None
        d.fullgraph = self.fullgraph
        d.frame_state = self.frame_state
        d.static_shapes = self.static_shapes
        return d

    def _static_retry(self, e: EmberError, args, kwargs) -> Entry:
        """A stage could not handle the symbolic sizes (``ember.shapes.SymbolicUnsupported``): this frame is
        compiled with static sizes from now on (never eagerly because of dynamic shapes)."""
        self.static_shapes = True
        logs.log("dynamic", f"{self.name} ({self._where()}): compiled with static sizes: {e}")
        return self.compile_entry(args, kwargs)

    def compile_entry(self, args, kwargs) -> Entry:
        d = self._domain()
        try:
            return self._compile_in(d, args, kwargs)
        finally:
            d.release()

    def _compile_in(self, d: SymbolicDomain, args, kwargs) -> Entry:
        t0 = time.perf_counter()
        try:
            ret = self._trace(d, args, kwargs)
            return self._make_entry(d, ret, t0)
        except Unsupported as e:
            STATS.bump("graph_breaks")
            self.break_reasons.append(_detached(e))
            if self.fullgraph:
                _drop_context(e)
                raise
            if self.session is not None:
                self.session.log_break(self.name, e)
            else:
                logs.log("graph_breaks", f"{self.name}: runs eagerly: {e}")
            try:
                return self._on_break(e, d, args, kwargs, t0)
            except EmberError as e2:
                if _symbolic_unsupported(e2) and not self.static_shapes:
                    return self._static_retry(e2, args, kwargs)
                raise
        except UserException as ue:
            where = (getattr(ue, "user_stack", None) or ["?"])[-1]
            why = f"raised {type(ue.exc).__name__}: {ue.exc} (at {where})"
            STATS.bump("graph_breaks")
            _drop_context(ue)       # its traceback's frames hold the trace's values (the call's arguments)
            if not self.fullgraph:
                logs.log("graph_breaks", f"{self.name}: {why}; runs eagerly")
                return self._eager_entry(why, d.guards.guards, d, concrete=self.resume is not None)
            err = Unsupported(f"the traced code {why}", "if eager raises this too, fix the program; "
                              "otherwise this is an ember bug worth reporting", getattr(ue, "user_stack", None))
        except EmberError as e:
            if _symbolic_unsupported(e) and not self.static_shapes:
                return self._static_retry(e, args, kwargs)
            raise
        except Exception as e:       # noqa: BLE001 - an ember bug must not break the user's program
            if self.fullgraph:
                raise InternalError(f"ember failed while compiling {self.name} ({self._where()}): "
                                    f"{type(e).__name__}: {e}") from e
            logs.warn_once(f"internal:{id(self)}", f"ember: internal error while compiling {self.name} "
                                                   f"({self._where()}), running it eagerly: {type(e).__name__}: {e}")
            STATS.bump("fallbacks_to_eager")
            return self._eager_entry(f"internal error: {e}", [], concrete=self.resume is not None)
        # raised out of the except block: no __context__ holding the UserException, whose traceback keeps the
        # interpreter's frames, and through them the program's objects, alive as long as the error is kept
        raise err

    def _on_break(self, e: Unsupported, d: SymbolicDomain, args, kwargs, t0: float) -> Entry:
        """Split the frame at the instruction that broke: trace again up to it, and let the glue run it
        natively and continue compiled. Where that is not possible, the frame runs concretely."""
        top = getattr(d, "top_frame", None)
        n = top.steps - 1 if top is not None and getattr(e, "resumable", True) else -1
        if self.session is None or n < 0:
            return self._eager_entry(str(e), d.guards.guards, d, concrete=True)
        if n == 0:
            if self.resume is not None:          # nothing to compile before the native instruction
                self.native = True
                return self._eager_entry(str(e), [], concrete=True)
            return self._eager_entry(str(e), d.guards.guards, d, concrete=True)
        d2 = self._domain()
        try:
            state = self._trace(d2, args, kwargs, stop_at=n)
            if not isinstance(state, Frame):
                raise InternalError(f"the second trace of {self.name} did not stop at the graph break")
            return self._make_entry(d2, state, t0)
        except Unsupported as e2:
            logs.log("graph_breaks", f"{self.name}: cannot continue after the break ({e2.reason}); "
                                     "the frame runs in ember's interpreter")
            return self._eager_entry(f"{e}; then {e2.reason}", d.guards.guards, d, concrete=True)
        finally:
            d2.release()

    def _make_entry(self, d: SymbolicDomain, ret: Any, t0: float) -> Entry:
        step = self.session.step if self.session is not None else None
        source, graphs, _ = build_entry(d, ret, self.fn, self.graph_hook or _plugin_graphs, self.params, step)
        bindings = dict(d.cg.bindings, __MISS=MISS, **self.sig_binds)
        for g in graphs:
            bindings.update(g.get("bindings", {}))
        fn = _exec(source, bindings, f"<ember glue {self.name}#{len(self.entries)}>")
        if graphs and self.session is not None:
            self.session.note_graphs(self.name, graphs)
        fname = self.fn.__name__ if self.fn is not None else "resume"
        entry = Entry(fn, d.guards.source(fname, self.params), source, list(d.guards.guards), bindings,
                      graphs=graphs, compile_time=time.perf_counter() - t0, whole=not isinstance(ret, Frame))
        if logs.enabled("guards"):
            logs.log("guards", f"{self.name} entry #{len(self.entries)} ({self._where()}):\n"
                     + "\n".join(f"  {g.expr:<70}  # {g.reason}" for g in d.guards.guards))
        if logs.enabled("output_code"):
            logs.log("output_code", f"glue for {self.name} entry #{len(self.entries)}:\n{source}")
        return entry

    def _eager_entry(self, reason: str, guards: list, d: SymbolicDomain | None = None,
                     concrete: bool = False) -> Entry:
        params, call = self.params, self.call_args
        guard = "\n            and ".join(g.expr for g in guards) or "True"
        src = (f"def __entry({params}):\n    try:\n        if not ({guard}):\n            return __MISS\n"
               f"    except Exception:\n        return __MISS\n    return __fn({call})\n")
        run = (lambda *a, **k: self._fallback(a, k, concrete))
        bindings = dict(d.cg.bindings if d is not None else {}, __MISS=MISS, __fn=run, **self.sig_binds)
        return Entry(_exec(src, bindings, f"<ember eager {self.name}>"), "", src, list(guards), bindings, eager=True,
                     reason=reason)


def _detached(e: Unsupported) -> Unsupported:
    """A copy of a break's exception without its traceback (and context), to keep in ``break_reasons``: the
    traceback's frames hold the call's arguments, which the cache would keep alive as long as it lives."""
    c = type(e).__new__(type(e))
    c.__dict__.update(vars(e))
    c.args = e.args
    return c


def _drop_context(e: BaseException) -> None:
    """A break about to reach the program (fullgraph=True): the exceptions chained to it, ember's own from
    the trace, keep the interpreter's frames alive, and through them the program's objects, for as long as the
    error is kept (unittest's assertRaises keeps it, clearing only its own traceback's frames). A context that
    is not shown (``raise ... from None``) is dropped; the frames of a shown one lose their locals (the
    traceback still prints); so do the finished frames of its own traceback, which the trace's values (and
    the exception itself, in a frame that caught it) would otherwise keep in a cycle."""
    if e.__traceback__ is not None:
        traceback.clear_frames(e.__traceback__)
    seen: set[int] = set()
    x: BaseException | None = e
    while x is not None and id(x) not in seen:
        seen.add(id(x))
        if x.__suppress_context__ and x.__cause__ is None:
            x.__context__ = None
        nxt = x.__cause__ or x.__context__
        if nxt is not None and nxt.__traceback__ is not None:
            traceback.clear_frames(nxt.__traceback__)
        x = nxt


def _symbolic_unsupported(e: BaseException) -> bool:
    """``ember.shapes.SymbolicUnsupported`` (named, not imported: this module stays torch-free)."""
    return any(c.__name__ == "SymbolicUnsupported" for c in type(e).__mro__)


def new_session(plugins_factory: Callable[[], list] = list, graph_hook: Callable | None = None,
                fullgraph: bool = False, limit: int = 8, options: Any = None):
    """A compile session: every cache it makes (the function's, its continuations', its callees') shares
    these settings."""
    from .resume import Session
    box: list = []

    def make_cache(fn=None, resume=None, name=None) -> FrameCache:
        return FrameCache(fn, resume=resume, session=box[0], plugins_factory=plugins_factory,
                          graph_hook=graph_hook, fullgraph=fullgraph, limit=limit, options=options, name=name)
    box.append(Session(make_cache, plugins_factory))
    return box[0]


def compile_function(session, fn: types.FunctionType, name: str | None = None) -> FrameCache:
    c = session.make_cache(fn=fn, name=name)
    session.caches.insert(0, c)
    return c


# -- torch-free entry points used by the interpreter's own tests -----------------------------------------
def compile_python(fn: types.FunctionType, fullgraph: bool = False) -> Callable:
    """``fn`` compiled by the symbolic interpreter with no plugins: guarded, cached, glue-driven; graph
    breaks run the unsupported instruction natively and continue compiled."""
    return compile_function(new_session(fullgraph=fullgraph), fn).dispatch


def symbolic_call(fn: types.FunctionType, /, *args, **kwargs):
    """Trace ``fn`` on these arguments, generate its glue and run it (breaking where unsupported)."""
    return compile_python(fn)(*args, **kwargs)


def _same(t: Any) -> Any:
    return t


@contextlib.contextmanager
def _user_saved_tensors_hooks_off():
    """Compiling runs tensor ops (on fake tensors; the AOT joint trace) that save tensors for backward: the
    user's ``saved_tensors_hooks`` must not see them, only the saves of the real run, as eager would. Identity
    hooks pushed on top stand in for them while compiling (unless hooks are disabled altogether)."""
    torch = sys.modules.get("torch")          # the interpreter core imports no torch: without it, no hooks
    if torch is None or torch._C._autograd._saved_tensors_hooks_get_disabled_error_message() is not None:
        yield
        return
    if torch._C._autograd._top_saved_tensors_default_hooks(True) is None:
        # no user hooks to hide: push none (torch.func's grad transforms refuse to run under any hooks, so
        # pushed ones would fail the meta and AOT runs of a captured torch.func.grad)
        yield
        return
    with torch.autograd.graph.saved_tensors_hooks(_same, _same):
        yield
