"""Bytecode decoding shared by every CPython version ember supports.

Input: a code object. Output: a list of ``Instr`` (caches dropped, EXTENDED_ARG folded, jump targets absolute
byte offsets) plus the parsed exception table. Torch-free.
"""
from __future__ import annotations

import dis
import sys
from dataclasses import dataclass
from types import CodeType

PY = sys.version_info[:2]
SUPPORTED = ((3, 11), (3, 12), (3, 13))


def check_version() -> None:
    if PY not in SUPPORTED:
        raise RuntimeError(f"ember's bytecode interpreter supports CPython 3.11-3.13, not {PY[0]}.{PY[1]}")


def since(version: tuple[int, int], what: str) -> bool:
    """For a version-dependent branch: whether the running CPython is ``version`` or newer. On a CPython whose
    bytecode ember has not been checked against, an explicit error that names the version and the construct."""
    if PY in SUPPORTED:
        return PY >= version
    from ..errors import Unsupported
    raise Unsupported(f"{what} is not implemented for CPython {PY[0]}.{PY[1]}",
                      "ember's bytecode interpreter supports CPython 3.11-3.13")


@dataclass(frozen=True, slots=True)
class Instr:
    opname: str
    arg: int | None
    argval: object
    argrepr: str
    offset: int
    lineno: int | None
    index: int          # position in the decoded list
    jump_target: int | None  # index of the target instruction, for jumps


@dataclass(frozen=True, slots=True)
class ExcEntry:
    start: int   # byte offsets, end exclusive
    end: int
    target: int
    depth: int
    lasti: bool


@dataclass(slots=True)
class Decoded:
    instrs: list[Instr]
    by_offset: dict[int, int]   # byte offset -> index
    exc_table: list[ExcEntry]

    def handler_for(self, offset: int) -> ExcEntry | None:
        for e in self.exc_table:          # entries are sorted innermost-last-start; first match wins
            if e.start <= offset < e.end:
                return e
        return None


_JUMPS = set(dis.hasjrel) | set(dis.hasjabs)
_cache: dict[CodeType, Decoded] = {}


def _varints(data: bytes):
    it = iter(data)
    for b in it:
        val = b & 63
        while b & 64:
            b = next(it)
            val = (val << 6) | (b & 63)
        yield val


def parse_exception_table(code: CodeType) -> list[ExcEntry]:
    out = []
    vals = _varints(code.co_exceptiontable)
    for start in vals:
        length, target, dl = next(vals), next(vals), next(vals)
        out.append(ExcEntry(start * 2, start * 2 + length * 2, target * 2, dl >> 1, bool(dl & 1)))
    return out


def decode(code: CodeType) -> Decoded:
    d = _cache.get(code)
    if d is not None:
        return d
    raw = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    by_offset = {i.offset: n for n, i in enumerate(raw)}
    instrs = []
    line = None
    for n, i in enumerate(raw):
        ln = i.positions.lineno if i.positions is not None else None
        if ln is not None:
            line = ln
        target = by_offset.get(i.argval) if i.opcode in _JUMPS else None
        instrs.append(Instr(i.opname, i.arg, i.argval, i.argrepr, i.offset, ln if ln is not None else line,
                            n, target))
    d = Decoded(instrs, by_offset, parse_exception_table(code))
    _cache[code] = d
    return d
