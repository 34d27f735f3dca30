"""A guard against a sympy simplification that changes an index's value.

sympy 1.14 evaluates a ``Mod`` of a product that has ``Mod`` factors wrongly: ``Mod(k * Mod(x, m), q)``
becomes ``Mod(k * Mod(x, m)**2, q)`` (the product's ``Mod`` factors listed twice) when ``m != q``, and ``k *
Mod(x, q)`` (the factor ``k`` pulled out of the modulus) when ``m == q``. Loop indices hit it whenever a view
chain substitutes ``xindex % 8`` into ``3 * x1 % 4`` (``stack(...).reshape(5, 32)[1:, 8:31:3]`` read the wrong
elements). ``install()`` wraps ``Mod.eval`` so that a product with ``Mod`` factors stays unevaluated (zero
where an integer factor is a multiple of ``q``, as sympy's own rule gives); every other case is sympy's. It is
kept only when the installed sympy shows the fault (probed at the first ``Mod`` evaluation), so a fixed sympy
runs unchanged."""
from __future__ import annotations

import threading

import sympy
from sympy import Mod, Mul, S

_INSTALLED = [False]
_FAULTY: list = []          # the probe's answer, once asked: [True] or [False]
_PROBING = threading.RLock()
_BUSY = [False]             # the probe is running (read by the thread holding _PROBING only)


def _faulty_case(p, q) -> bool:
    if not (isinstance(p, Mul) and getattr(q, "is_Integer", False) and q is not S.One):
        return False
    mods = [a for a in p.args if isinstance(a, Mod)]
    if not mods or not all(a.is_integer for a in p.args):
        return False
    return True


def _has_fault() -> bool:
    x = sympy.Dummy("x", integer=True, nonnegative=True)    # unique: the probe's result caches nothing reused
    return Mod(3 * Mod(x, 8), 4).has(sympy.Pow)


def install() -> None:
    """Put the guarded ``Mod.eval`` in place. The probe (is this sympy's ``Mod`` faulty?) runs at the first
    ``Mod`` evaluation, not here: its arithmetic makes sympy import ``sympy.tensor`` and ``sympy.combinatorics``
    (~50 ms of a warm start, which evaluates no ``Mod``). A sympy without the fault gets its own ``eval`` back
    at that first evaluation and runs unchanged from then on."""
    if _INSTALLED[0]:
        return
    _INSTALLED[0] = True
    original = Mod.eval.__func__

    def eval(cls, p, q):      # noqa: A001  (the name sympy looks up)
        if not _FAULTY and not _decide(original):       # sympy's own rules while the probe runs
            return original(cls, p, q)
        if _FAULTY[0] and _faulty_case(p, q):
            if any(a.is_Integer and a % q == 0 for a in p.args):
                return S.Zero
            return None         # left as written: its value is right
        return original(cls, p, q)

    Mod.eval = classmethod(eval)
    sympy.core.cache.clear_cache()      # results sympy cached before (a faulty one among them) are made anew


def _decide(original) -> bool:
    """Run the probe once (other threads wait for its answer); False while it runs (its own ``Mod``s)."""
    with _PROBING:
        if _FAULTY:
            return True
        if _BUSY[0]:
            return False
        _BUSY[0] = True
        try:
            faulty = _has_fault()
        finally:
            _BUSY[0] = False
        if not faulty:
            Mod.eval = classmethod(original)
        _FAULTY.append(faulty)
        return True
