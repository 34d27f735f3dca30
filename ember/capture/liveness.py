"""Which local variables a function may still read from a given instruction on (live variables).

A graph break hands the stopped frame's locals to the continuation. A local the rest of the function never
reads (``t = x.std(0).norm()`` computed and then left unused) need not be handed over: keeping it would make it
an output of the graph, so the graph could not fuse it away, and its backward would run with a zero gradient
(eager never runs it: ``0 * nan`` is ``nan`` where eager's gradient is finite). Dynamo drops such locals too.

A standard backward data-flow over the decoded instructions, exception handlers included as successors of the
instructions they cover. ``DELETE_FAST`` counts as a read (it raises on an unbound name). Arguments, cell and
free variables always stay (zero-argument ``super()`` reads the first argument from the frame), and so does everything
in a function that can see its own frame's locals by name (``locals()``, ``vars()``, ``eval``, frame objects)."""
from __future__ import annotations

from types import CodeType

from .bytecode import decode

_CO_OPTIMIZED = 0x1
_CO_VARARGS, _CO_VARKEYWORDS = 0x4, 0x8
_ENDS = frozenset({"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE", "JUMP_FORWARD", "JUMP_BACKWARD",
                   "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT"})
_READS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "DELETE_FAST", "LOAD_CLOSURE"})
# names through which code reads its own frame's variables by name
_INTROSPECTION = frozenset({"locals", "vars", "eval", "exec", "dir", "_getframe", "currentframe", "f_locals",
                            "stack", "getouterframes", "tb_frame", "f_back"})
_cache: dict[CodeType, list[frozenset[str]] | None] = {}


def _use_def(ins) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(names read, names written) by one instruction; a read of the stored name in STORE_FAST_LOAD_FAST
    reads the new value, so the write comes first there."""
    op = ins.opname
    if op in _READS:
        return (ins.argval,), ()
    if op == "STORE_FAST":
        return (), (ins.argval,)
    if op == "LOAD_FAST_LOAD_FAST":
        return tuple(ins.argval), ()
    if op == "STORE_FAST_STORE_FAST":
        return (), tuple(ins.argval)
    if op == "STORE_FAST_LOAD_FAST":
        store, load = ins.argval
        return ((load,) if load != store else ()), (store,)
    return (), ()


def _successors(d, i: int) -> list[int]:
    ins = d.instrs[i]
    out = [] if ins.opname in _ENDS or i + 1 >= len(d.instrs) else [i + 1]
    if ins.jump_target is not None:
        out.append(ins.jump_target)
    handler = d.handler_for(ins.offset)
    if handler is not None and handler.target in d.by_offset:
        out.append(d.by_offset[handler.target])
    return out


def _solve(code: CodeType) -> list[frozenset[str]] | None:
    if not code.co_flags & _CO_OPTIMIZED or _INTROSPECTION & set(code.co_names):
        return None
    d = decode(code)
    n = len(d.instrs)
    succ = [_successors(d, i) for i in range(n)]
    ud = [_use_def(ins) for ins in d.instrs]
    live: list[frozenset[str]] = [frozenset()] * n
    changed = True
    while changed:
        changed = False
        for i in range(n - 1, -1, -1):
            out: set[str] = set()
            for s in succ[i]:
                out |= live[s]
            uses, defs = ud[i]
            new = frozenset(out.difference(defs).union(uses))
            if new != live[i]:
                live[i], changed = new, True
    return live


def kept_locals(code: CodeType, index: int) -> frozenset[str] | None:
    """The locals a continuation at instruction ``index`` may read (plus arguments, cells and free variables:
    ``super()``'s ``__class__``), or None to keep every local."""
    if code not in _cache:
        _cache[code] = _solve(code)
    live = _cache[code]
    if live is None or not 0 <= index < len(live):
        return None
    nargs = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & _CO_VARARGS) \
        + bool(code.co_flags & _CO_VARKEYWORDS)
    return live[index] | frozenset(code.co_varnames[:nargs]) | frozenset(code.co_cellvars) \
        | frozenset(code.co_freevars)
