"""Keep torch's own meta kernels from importing torch._dynamo, a compiler ember does not use.

torch decorates some of its Python functions with ``torch._disable_dynamo`` (``torch/_compile.py``): the wrapper
imports torch._dynamo on its first call, to build the function with Dynamo disabled around it, and caches that
as the function's ``__dynamo_disable`` attribute. In torch 2.13 the meta kernels of elementwise ops run through
such functions (``torch._refs``), so ember's first trace of a process imported torch._dynamo: 3 s of its
first compile on the 2-core CPU machine (of 4.8 s for a small GPT's training step).

While torch._dynamo is not imported no Dynamo frame hook can be active, and disabling Dynamo around a call
changes nothing. ``avoid_dynamo_import()`` gives each such function a stand-in for its cached disabled version
(it finds the wrappers by their code object): the stand-in calls the function itself until torch._dynamo is
imported (by the user's ``torch.compile``, say), then builds the disabled function as torch's wrapper would
and puts it in its own place, so from then on torch behaves exactly as without ember. Where torch's wrapper does
not look as expected (another torch version), nothing is changed. ember's pipeline never imports or calls
torch._dynamo (docs/design.md, "What ember may and may not use"): the stand-in calls its ``disable`` only once
the user's program has imported it, doing what torch's own wrapper does there.
"""
from __future__ import annotations

import gc
import sys
import threading
import types
from typing import Any

_DONE = [0]        # len(sys.modules) at the last install (0: none yet)
_LOCK = threading.Lock()


class _UntilDynamo:
    """A function's ``__dynamo_disable`` until torch._dynamo is imported: the function itself."""
    __slots__ = ("fn", "recursive")

    def __init__(self, fn: Any, recursive: bool) -> None:
        self.fn, self.recursive = fn, recursive

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is None or not hasattr(dynamo, "disable"):      # not imported, or still importing
            return self.fn(*args, **kwargs)
        try:        # what torch's wrapper (torch/_compile.py) does: compare
            real = dynamo.disable(self.fn, self.recursive, wrapping=False)
        except TypeError:           # a torch whose disable() takes no ``wrapping``
            real = dynamo.disable(self.fn, self.recursive)
        setattr(self.fn, "__dynamo_disable", real)     # torch's own wrapper takes it from now on
        return real(*args, **kwargs)


def _wrapper_code() -> types.CodeType | None:
    """The code of ``torch._disable_dynamo``'s wrapper (``inner``, closing over ``fn`` and ``recursive``)."""
    import torch
    outer = getattr(torch, "_disable_dynamo", None)
    consts = getattr(getattr(outer, "__code__", None), "co_consts", ())
    for c in consts:
        if isinstance(c, types.CodeType) and c.co_name == "inner" and set(c.co_freevars) == {"fn", "recursive"} \
                and "__dynamo_disable" in c.co_names:
            return c
    return None


_PATCHED: list[Any] = []       # the functions given a stand-in (torch's own, alive anyway)


def avoid_dynamo_import() -> None:
    """Give every function torch wrapped with ``_disable_dynamo`` (and did not call yet) the stand-in, unless
    torch._dynamo is imported already: once, and again only when modules were imported since."""
    n = len(sys.modules)
    if _DONE[0] == n:
        return
    with _LOCK:     # other threads' first traces wait until the stand-ins are in place, then skip this
        if _DONE[0] != n:
            # again after modules were imported since (ember imports its tracing stack when it first builds a
            # graph, and the torch modules that imports wrap functions of their own)
            try:
                _install()
            finally:
                _DONE[0] = n


def _install() -> None:
    code = None if "torch._dynamo" in sys.modules else _wrapper_code()
    if code is None:
        return
    # the functions whose code is the wrapper's: gc.get_referrers walks the heap in C (a Python loop over
    # gc.get_objects() took 0.1-0.3 s of a warm start, with torch and sympy imported)
    for obj in gc.get_referrers(code):
        if type(obj) is types.FunctionType and obj.__code__ is code and obj.__closure__ is not None:
            cells = dict(zip(code.co_freevars, obj.__closure__))
            try:
                fn, recursive = cells["fn"].cell_contents, cells["recursive"].cell_contents
            except ValueError:      # an empty cell
                continue
            if getattr(fn, "__dynamo_disable", None) is not None:
                continue
            try:
                setattr(fn, "__dynamo_disable", _UntilDynamo(fn, recursive))
            except (AttributeError, TypeError):     # a callable without a __dict__: torch's wrapper as it is
                continue
            _PATCHED.append(fn)


__all__ = ["avoid_dynamo_import"]
