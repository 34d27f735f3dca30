"""The frame interpreter: runs one code object's bytecode over the values of a *domain*.

The domain decides what values are: the concrete domain (``concrete.py``) uses real Python objects, so the
interpreter is an ordinary (slow) CPython; the symbolic domain (``symbolic.py``) uses ``Value`` objects that
record tensor work into a graph and Python facts into guards. Handlers (``opcodes_*.py``) only move values
between the stack, locals and cells, and ask the domain for every operation. Torch-free.

Invariants: ``stack`` holds domain values or ``NULL``; ``locals`` maps a name to a value or (for cell
variables) to a domain cell; user-level exceptions travel as ``UserException`` and are routed through the
code object's exception table exactly as CPython does.
"""
from __future__ import annotations

from types import CodeType
from typing import Any

from ..errors import DataDependent, Unsupported
from .binding import bind_arguments  # noqa: F401  (re-exported: the domains bind calls through it)
from .bytecode import PY, Decoded, Instr, decode
from .registry import handler_table

CO_VARARGS, CO_VARKEYWORDS, CO_GENERATOR = 0x04, 0x08, 0x20
MAX_DEPTH = 60


class _Null:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL"


NULL = _Null()


class UserException(Exception):
    """An exception of the user's program (``exc`` is the real exception object) crossing our frames.

    ``chained`` is set once implicit exception chaining (``__context__``) has been decided for it: at the raise
    that made it, or where it first reached an interpreted frame."""

    def __init__(self, exc: BaseException, chained: bool = False):
        super().__init__(exc)
        self.exc = exc
        self.chained = chained


def set_context(exc: BaseException, handled: BaseException | None) -> None:
    """Implicit chaining as CPython's ``_PyErr_SetObject`` does it, breaking a cycle through ``exc``."""
    if handled is None or handled is exc:
        return
    o, seen = handled, set()
    while o.__context__ is not None and id(o) not in seen:
        seen.add(id(o))
        if o.__context__ is exc:
            o.__context__ = None
            break
        o = o.__context__
    exc.__context__ = handled


def reraise_real(exc: BaseException):
    """Raise a user exception out of the interpreter without changing its ``__context__`` (a plain ``raise``
    would chain it to whatever the interpreter itself is handling)."""
    ctx, suppress = exc.__context__, exc.__suppress_context__
    exc.__traceback__ = None
    try:
        raise exc
    finally:
        exc.__context__, exc.__suppress_context__ = ctx, suppress


class Return:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Yield(Return):
    __slots__ = ()


class Stop(Return):
    """``run`` stopped before an instruction because ``stop_at`` instructions had run (graph breaks)."""
    __slots__ = ()


class Frame:
    """One activation of a code object."""

    def __init__(self, dom: Any, code: CodeType, f_globals: Any, locals_: dict[str, Any],
                 parent: Frame | None = None, func: Any = None):
        if parent is not None and parent.depth + 1 > MAX_DEPTH:
            raise Unsupported(f"call depth over {MAX_DEPTH} while inlining {code.co_name}",
                              hint="deep recursion is not inlined; mark the function with ember.disable",
                              user_stack=parent.user_stack())
        self.dom = dom
        self.code = code
        self.f_globals = f_globals
        self.locals = locals_
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.func = func
        self.decoded: Decoded = decode(code)
        self.instrs = self.decoded.instrs
        self.stack: list[Any] = []
        self.ip = 0
        self.cur: Instr | None = None
        self.kw_names: tuple[str, ...] | None = None
        self.exc_info: Any = None          # the exception being handled (sys.exc_info analogue)
        self.done = False
        self.steps = 0                     # instructions started in this frame
        self.stop_at: int | None = None    # stop (return Stop) before starting instruction number stop_at
        self.last_raise: UserException | None = None    # the last exception a handler of this frame caught

    # -- stack helpers -------------------------------------------------------------------------------
    def push(self, v) -> None:
        self.stack.append(v)

    def pop(self):
        return self.stack.pop()

    def popn(self, n: int) -> list:
        if n == 0:
            return []
        st = self.stack
        out = st[-n:]
        del st[-n:]
        return out

    def peek(self, n: int = 1):
        return self.stack[-n]

    def jump(self, ins: Instr) -> None:
        self.ip = ins.jump_target

    # -- locations -----------------------------------------------------------------------------------
    def location(self) -> str:
        line = self.cur.lineno if self.cur is not None else self.code.co_firstlineno
        return f"{self.code.co_filename}:{line}"

    def user_stack(self) -> list[str]:
        out, f = [], self
        while f is not None:
            out.append(f.location())
            f = f.parent
        return out[::-1]

    def user_frames(self) -> list[tuple[str, int, str, str]]:
        """(file, line, name, qualname) of this frame and its callers, outermost first: what a traceback
        shows (tracebacks.py)."""
        out, f = [], self
        while f is not None:
            c = f.code
            out.append((c.co_filename, f.cur.lineno if f.cur is not None else c.co_firstlineno, c.co_name,
                        c.co_qualname))
            f = f.parent
        return out[::-1]

    def source_line(self) -> str:
        import linecache
        line = self.cur.lineno if self.cur is not None else self.code.co_firstlineno
        return linecache.getline(self.code.co_filename, line or 0)

    def unsupported(self, reason: str, hint: str = "") -> Unsupported:
        return Unsupported(reason, hint, self.user_stack(), self.source_line())

    # -- execution -----------------------------------------------------------------------------------
    def run(self) -> Return:
        """Run until the frame returns or yields. Raises UserException for an escaping user exception."""
        table = handler_table()
        instrs = self.instrs
        while True:
            if self.steps == self.stop_at:
                return Stop(None)
            self.steps += 1
            ins = instrs[self.ip]
            self.ip += 1
            self.cur = ins
            h = table.get(ins.opname)
            if h is None:
                raise self.unsupported_instruction(ins)
            try:
                r = h(self, ins)
            except UserException as ue:
                if getattr(ue, "user_stack", None) is None:       # where it was raised, for reports
                    ue.user_stack = self.user_stack()
                    ue.user_frames = self.user_frames()
                if not ue.chained:
                    ue.chained = True
                    if ue.exc.__context__ is None:
                        set_context(ue.exc, self.handled_exception())
                self._unwind(ue)
                continue
            except DataDependent as e:      # a decision on a size computed from tensor data: a graph break
                raise self.unsupported(str(e).split("; add torch._check")[0],
                                       "add torch._check(...) (or torch._check_is_size) to state what the "
                                       "program relies on, or move the decision outside the compiled "
                                       "function") from None
            if r is not None:
                if type(r) is Return:
                    self.done = True
                return r

    def throw(self, exc: BaseException) -> Return:
        """Raise ``exc`` where the (generator) frame is suspended, as ``generator.throw``/``close`` do, and
        run on. Like CPython, the resumed frame first gets None pushed, then the exception table decides."""
        self.stack.append(self.dom.const(None))
        self._unwind(UserException(exc, chained=True))
        return self.run()

    def in_yield_from(self) -> bool:
        """Whether this suspended generator frame waits in a `yield from` (its sub-iterator on the stack top):
        the next instruction resumes after a yield from or an await, as CPython's ``_PyGen_yf`` checks."""
        nxt = self.instrs[self.ip] if self.ip < len(self.instrs) else None
        return nxt is not None and nxt.opname == "RESUME" and (nxt.arg & 3) >= 2

    def handled_exception(self) -> BaseException | None:
        """The exception being handled here or in a calling frame (what ``sys.exception()`` would return)."""
        f = self
        while f is not None:
            if f.exc_info is not None and f.exc_info is not NULL and not f.dom.is_none(f, f.exc_info):
                return f.dom.exception_of(f, f.exc_info)
            f = f.parent
        return None

    def unsupported_instruction(self, ins: Instr) -> Unsupported:
        from .registry import UNSUPPORTED
        what = UNSUPPORTED.get(ins.opname)
        what = f" ({what})" if what else ""
        return self.unsupported(
            f"unsupported bytecode instruction {ins.opname}{what} on CPython {PY[0]}.{PY[1]}",
            "this construct is not captured yet; move it outside the compiled function")

    def _unwind(self, ue: UserException) -> None:
        entry = self.decoded.handler_for(self.cur.offset)
        if entry is None:
            self.done = True
            if getattr(ue, "user_stack", None) is None:       # where it was raised, for reports
                ue.user_stack = self.user_stack()
                ue.user_frames = self.user_frames()
            raise ue
        self.last_raise = ue
        del self.stack[entry.depth:]
        if entry.lasti:
            self.stack.append(self.dom.const(self.cur.offset))
        self.stack.append(self.dom.wrap_exception(ue.exc))
        self.ip = self.decoded.by_offset[entry.target]
