"""Relations between dynamic sizes an exported program relies on, as plain data.

A relation (``batch % 2 == 0``, ``seq <= 1024``) comes out of tracing as a sympy expression over ember's size
symbols. An exported program keeps it as a JSON tree over ``Dim`` names (``{"op": "Eq", "args": [...]}``,
``{"dim": "batch"}``, ``{"int": "2"}``) and checks it on every call with the small evaluator below: loading a
saved program never parses or evaluates text from the file.
"""
from __future__ import annotations

import operator
from typing import Any

import sympy

_OPS = {"Add": lambda *a: sum(a), "Mul": lambda *a: _prod(a), "Max": max, "Min": min, "Mod": operator.mod,
        "floor": lambda a: a, "ceiling": lambda a: a, "Abs": abs,
        "Eq": operator.eq, "Ne": operator.ne, "Lt": operator.lt, "Le": operator.le, "Gt": operator.gt,
        "Ge": operator.ge, "And": lambda *a: all(a), "Or": lambda *a: any(a), "Not": operator.not_,
        "Pow": operator.pow}
_REL = {"Eq": "==", "Ne": "!=", "Lt": "<", "Le": "<=", "Gt": ">", "Ge": ">="}


_SYMPY_NAMES = {sympy.Eq: "Eq", sympy.Ne: "Ne", sympy.Lt: "Lt", sympy.Le: "Le", sympy.Gt: "Gt", sympy.Ge: "Ge"}


def _prod(xs) -> Any:
    out = 1
    for x in xs:
        out *= x
    return out


def encode(e: Any, names: dict) -> dict:
    """``e`` (sympy) as a JSON tree; ``names`` maps each symbol to its Dim name."""
    if isinstance(e, sympy.Symbol):
        return {"dim": names[e]}
    if isinstance(e, sympy.Integer):
        return {"int": str(int(e))}
    if isinstance(e, sympy.Rational):
        return {"rat": [str(int(e.p)), str(int(e.q))]}
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        kind = "floordiv" if isinstance(e, sympy.floor) else "ceildiv"
        return {"op": kind, "args": [encode(num, names), encode(den, names)]}
    name = _SYMPY_NAMES.get(type(e), type(e).__name__)
    if name not in _OPS:
        raise ValueError(f"ember.export: cannot record the relation {e} ({name})")
    return {"op": name, "args": [encode(a, names) for a in e.args]}


def evaluate(tree: dict, dims: dict[str, int]) -> Any:
    """The value of a JSON tree for the Dim sizes ``dims``."""
    if "dim" in tree:
        return dims[str(tree["dim"])]
    if "int" in tree:
        return int(tree["int"])
    if "rat" in tree:
        return sympy.Rational(int(tree["rat"][0]), int(tree["rat"][1]))
    op = tree.get("op")
    args = [evaluate(a, dims) for a in tree.get("args", ())]
    if op == "floordiv":
        return args[0] // args[1]
    if op == "ceildiv":
        return -((-args[0]) // args[1])
    if op not in _OPS:
        raise ValueError(f"ember exported program: unknown relation operator {op!r}")
    return _OPS[op](*args)


def text(tree: dict) -> str:
    """A readable form (``batch % 2 == 0``) for messages and ``print(ep)``."""
    if "dim" in tree:
        return str(tree["dim"])
    if "int" in tree:
        return str(tree["int"])
    if "rat" in tree:
        return f"{tree['rat'][0]}/{tree['rat'][1]}"
    op, args = tree.get("op"), [text(a) for a in tree.get("args", ())]
    if op in _REL:
        return f"{args[0]} {_REL[op]} {args[1]}"
    infix = {"Add": " + ", "Mul": "*", "floordiv": " // ", "Mod": " % ", "And": " and ", "Or": " or "}
    if op in infix:
        return "(" + infix[op].join(args) + ")"
    return f"{op}({', '.join(args)})"
