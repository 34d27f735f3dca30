"""Rebuilding, in the glue, a generator the trace has started: returned, stored, or live at a graph break.

The trace ran the generator's frame symbolically up to a ``yield`` (or to its end). The glue makes a real
generator in that same state: ``concrete.resume_generator`` gets the frame's code, instruction pointer, value
stack and locals (each rebuilt like any value leaving compiled code; a sub-generator of a `yield from` on the
stack is rebuilt the same way) and runs the rest of the body, lazily, when the caller iterates, so nothing
of it happens early. A generator that ran to its end becomes an exhausted one. Torch-free.
"""
from __future__ import annotations

import inspect
from typing import Any

from .concrete import finished_generator, resume_generator
from .interpreter import NULL
from .values import CellVar, IterVar, RealCellVar, Value


def rebuild_started(glue: Any, v: IterVar) -> str:
    """The glue expression for generator ``v`` whose frame has started (made once, as every new object)."""
    fr = v.frame
    hit = glue._temps.get(id(v))
    if hit is not None:
        return hit[0]
    building = glue.__dict__.setdefault("_gen_building", set())
    if id(v) in building:       # the generator's own state holds it: its name is not bound yet
        raise glue.d.unsupported(None, f"returning a started {v.describe()} whose own locals refer to it")
    cg = glue.cg
    if fr.done or inspect.getgeneratorstate(v.gen) == inspect.GEN_CLOSED:
        name, _ = glue._temp(v, "gen")
        glue.creations.append(f"{name} = {cg.bind(finished_generator, 'finished_generator')}"
                              f"({cg.bind(fr.code, 'code')})")
        return name
    building.add(id(v))
    try:
        stack = ", ".join(_state(glue, x) for x in fr.stack)
        locs = ", ".join(f"{k!r}: {_state(glue, x)}" for k, x in dict.items(fr.locals) if x is not NULL)
        exc = "None" if fr.exc_info is None or fr.exc_info is NULL else _state(glue, fr.exc_info)
        func = v.call[0] if v.call is not None else None
        fn = "None" if func is None else glue.expr(func) if isinstance(func, Value) else cg.bind(func, "fn")
    finally:
        building.discard(id(v))
    name, _ = glue._temp(v, "gen")
    glue.creations.append(f"{name} = {cg.bind(resume_generator, 'resume_generator')}({fn}, "
                          f"{cg.bind(fr.code, 'code')}, {cg.bind(fr.f_globals, 'G')}, {fr.ip}, [{stack}], "
                          f"{{{locs}}}, {exc})")
    return name


def _state(glue: Any, x: Any) -> str:
    if x is NULL:
        return glue.cg.bind(NULL, "NULL")
    if type(x) is CellVar:
        return glue._cell(x)
    if type(x) is RealCellVar:
        return glue.cell_expr(x)
    return glue.expr(x)
