"""Print a sympy size expression or relation as Python source over the symbols' names.

``floor(a/b)`` prints as ``(a)//(b)``, ``Mod(a, b)`` as ``(a)%(b)``, ``Max``/``Min`` as ``max``/``min``. Only
integer-valued expressions built by ``ember.shapes`` (and the loop IR) are supported, and, with ``floats``
(and on either side of a relation), float expressions of the sizes (``s0/4``, ``s0**(-0.5)``); anything else
raises.
"""
from __future__ import annotations

import sympy


def to_python(e, names: dict | None = None, floats: bool = False) -> str:
    """Source for ``e``; ``names`` maps a symbol to the Python expression that reads it (default: its name).
    ``floats``: ``e`` is a float of the sizes (``s0/3``, ``s0**(-0.5)``, ``100.0*s0``): Python float
    arithmetic, ``/`` for quotients and ``**`` for any power."""
    names = names or {}

    def go(x) -> str:
        if x is sympy.true or x is True:
            return "True"
        if x is sympy.false or x is False:
            return "False"
        if isinstance(x, sympy.Symbol):
            return names.get(x, x.name)
        if isinstance(x, sympy.Integer):
            return repr(int(x))
        if isinstance(x, sympy.Rational):
            return f"({int(x.p)}/{int(x.q)})"
        if floats and isinstance(x, sympy.Float):
            return repr(float(x))
        if floats and isinstance(x, sympy.Pow):
            return f"({go(x.base)} ** {go(x.exp) if x.exp.is_Integer else repr(float(x.exp))})"
        if isinstance(x, sympy.Add):
            return "(" + " + ".join(go(a) for a in x.args) + ")"
        if isinstance(x, sympy.Mul):
            num, den = sympy.fraction(x)
            if den != 1 and floats:
                return f"({go(num)} / {go(den)})"
            if den != 1:
                raise ValueError(f"ember.shapes: cannot print non-integer size {x}")
            return "(" + " * ".join(go(a) for a in sympy.Mul.make_args(num)) + ")"
        if isinstance(x, sympy.Pow) and x.exp.is_Integer and x.exp > 0:
            return f"({go(x.base)} ** {int(x.exp)})"
        if isinstance(x, sympy.floor):
            num, den = sympy.fraction(sympy.together(x.args[0]))
            return f"({go(num)} // {go(den)})"
        if isinstance(x, sympy.ceiling):
            num, den = sympy.fraction(sympy.together(x.args[0]))
            return f"(-((-{go(num)}) // {go(den)}))"
        if isinstance(x, sympy.Mod):
            return f"({go(x.args[0])} % {go(x.args[1])})"
        if isinstance(x, sympy.Max):
            return "max(" + ", ".join(go(a) for a in x.args) + ")"
        if isinstance(x, sympy.Min):
            return "min(" + ", ".join(go(a) for a in x.args) + ")"
        if isinstance(x, sympy.Abs):
            return f"abs({go(x.args[0])})"
        rel = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">", sympy.Ge: ">="}
        for cls, op in rel.items():
            if isinstance(x, cls):      # exact on rationals: the sides print as floats where they are
                return f"({side(x.lhs)} {op} {side(x.rhs)})"
        if isinstance(x, sympy.And):
            return "(" + " and ".join(go(a) for a in x.args) + ")"
        if isinstance(x, sympy.Or):
            return "(" + " or ".join(go(a) for a in x.args) + ")"
        if isinstance(x, sympy.Not):
            return f"(not {go(x.args[0])})"
        raise ValueError(f"ember.shapes: cannot print {type(x).__name__} {x}")

    def side(x) -> str:
        return to_python(x, names, floats=True)
    return go(e)
