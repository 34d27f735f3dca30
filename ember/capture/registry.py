"""The opcode handler registry: one small function per opcode, registered with the CPython versions it
applies to. A lookup for an opcode with no handler for the running version names the opcode and version."""
from __future__ import annotations

from typing import Callable

from .bytecode import PY

Handler = Callable[..., object]
_HANDLERS: dict[str, list[tuple[tuple[int, int], tuple[int, int], Handler]]] = {}
_TABLE: dict[str, Handler] | None = None


def register_opcode(*names: str, min_version: tuple[int, int] = (3, 11), max_version: tuple[int, int] = (3, 13)):
    def deco(fn: Handler) -> Handler:
        global _TABLE
        for name in names:
            _HANDLERS.setdefault(name, []).append((min_version, max_version, fn))
        _TABLE = None
        return fn
    return deco


def handler_table() -> dict[str, Handler]:
    """Opname -> handler for the running CPython version (built once)."""
    global _TABLE
    if _TABLE is None:
        table = {}
        for name, entries in _HANDLERS.items():
            for lo, hi, fn in entries:
                if lo <= PY <= hi:
                    table[name] = fn
        _TABLE = table
    return _TABLE


def handled_opnames(version: tuple[int, int] = PY) -> set[str]:
    return {n for n, es in _HANDLERS.items() if any(lo <= version <= hi for lo, hi, _ in es)}


# The opcodes CPython may emit for ordinary function code that ember reports as unsupported (a reason the
# user sees), rather than executing. Anything else missing from the table is also reported, never a crash.
UNSUPPORTED = {
    "SETUP_ANNOTATIONS": "annotations at module scope",
    "PRINT_EXPR": "expression statements of the interactive prompt",
    "IMPORT_STAR": "`from module import *`",
    "GET_AWAITABLE": "await", "GET_AITER": "async for", "GET_ANEXT": "async for",
    "END_ASYNC_FOR": "async for", "BEFORE_ASYNC_WITH": "async with", "ASYNC_GEN_WRAP": "async generators",
    "LOAD_LOCALS": "class bodies", "LOAD_FROM_DICT_OR_DEREF": "class bodies",
    "LOAD_FROM_DICT_OR_GLOBALS": "class bodies", "STORE_NAME": "module-level code",
    "DELETE_NAME": "module-level code", "RETURN_GENERATOR_ASYNC": "coroutines",
    "INTERPRETER_EXIT": "interpreter exit", "ENTER_EXECUTOR": "JIT executors", "EXIT_INIT_CHECK": "__init__",
}
