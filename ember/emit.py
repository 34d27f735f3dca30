"""Safe emission of names and values into generated source (guards, glue, wrappers, C++ and Triton kernels).

ember ``exec``s Python it writes and compiles C++ it writes. Any text in that source that came from the user's
program (an attribute name from ``getattr(obj, key)``, a dict key, a global's name, a constant) must mean
exactly that value, whatever characters it holds: pasted as-is, ``getattr(cfg, "a or __import__('os')...")``
would run the user's *data* as code. The rules, used by every generator:

* a name in attribute syntax (``obj.name``) only when it is a plain ASCII identifier that is not a keyword
  (non-ASCII identifiers are NFKC-normalized by the compiler, so ``obj.ﬁ`` would read ``obj.fi``);
  otherwise ``getattr(obj, 'name')`` with the name as a string literal (``attr``);
* a string only as ``str.__repr__`` of its exact contents (a ``str`` subclass's own ``__repr__`` is never
  asked; ``py_str``);
* a constant as a literal only when it is a plain ``int``/``float``/``bool``/``None``/``str``/``bytes`` (or a
  tuple of them) whose literal evaluates back to an equal value of the same type (``py_literal``); anything
  else (nan, inf, an IntEnum, a subclass with its own ``__repr__``) goes in as a bound value, never as text;
* an identifier the generator defines or reads (a local, a parameter) is checked by ``py_name``, and a C/C++
  identifier derived from a name keeps only ``[A-Za-z0-9_]`` (``c_name``).

Torch-free and stage-free: every stage may import it.
"""
from __future__ import annotations

import keyword
import math
from typing import Any

_PLAIN = (int, str, bytes, bool, type(None))


def is_attr_name(name: Any) -> bool:
    """Whether ``name`` can be written after a dot and read back as the same attribute."""
    return type(name) is str and name.isascii() and name.isidentifier() and not keyword.iskeyword(name)


def py_str(s: Any) -> str:
    """A Python string literal for ``s`` (a ``str`` or subclass), built by ``str.__repr__`` itself."""
    if not isinstance(s, str):
        raise TypeError(f"ember: expected a str to emit, got {type(s).__name__}")
    return str.__repr__(s)


def attr(base: str, name: str) -> str:
    """``base.name`` where that is exactly attribute ``name``, else ``getattr(base, 'name')``."""
    return f"{base}.{name}" if is_attr_name(name) else f"getattr({base}, {py_str(name)})"


def py_literal(v: Any) -> str | None:
    """A Python literal that evaluates to a value equal to ``v`` and of its exact type, or None where there is
    none (the caller binds the value instead)."""
    t = type(v)
    if t is tuple:
        items = [py_literal(x) for x in v]
        if any(x is None for x in items):
            return None
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"  # type: ignore[arg-type]
    if t is float:
        return repr(v) if math.isfinite(v) else None
    if t is str:
        return str.__repr__(v)
    if t in _PLAIN:
        try:
            return repr(v)
        except ValueError:          # an int past sys.get_int_max_str_digits()
            return None
    return None


def py_name(name: Any) -> str:
    """``name`` as an identifier to define or read in generated Python; ValueError for anything else."""
    if not is_attr_name(name):
        raise ValueError(f"ember: {name!r} is not a plain Python identifier")
    return name


def object_name(obj: Any) -> str:
    """``obj``'s ``__qualname__`` (or ``__name__``) when it is a string, else its type's name. Read defensively:
    objects answer any attribute (``torch.classes`` namespaces, mocks, proxies) with another object, or raise
    errors other than AttributeError, and must not break the compile that names them."""
    for attr_name in ("__qualname__", "__name__"):
        try:
            v = getattr(obj, attr_name, None)
        except Exception:       # noqa: BLE001 - a user __getattr__ may raise anything
            v = None
        if isinstance(v, str) and v:
            return v
    return type(obj).__name__


def c_name(hint: Any, fallback: str = "v") -> str:
    """An identifier made of ``[A-Za-z0-9_]`` from ``hint`` (for C/C++, Triton and Python names)."""
    try:
        text = str(hint)
    except Exception:       # noqa: BLE001 - an object whose repr raises (see object_name)
        text = object_name(hint)
    s = "".join(ch if ch.isascii() and (ch.isalnum() or ch == "_") else "_" for ch in text)
    if not s or s[0].isdigit():
        s = f"{fallback}_{s}"
    return s


# -- numbers in kernel sources -----------------------------------------------------------------------------
def py_float(v: Any) -> str:
    """A Python/Triton expression for the float value of ``v``: its exact repr, or ``float("nan")`` /
    ``float("inf")`` / ``float("-inf")`` (no literal reads back as those)."""
    v = float(v)
    if math.isnan(v):
        return 'float("nan")'
    if math.isinf(v):
        return 'float("inf")' if v > 0 else 'float("-inf")'
    return repr(v)


def c_float(v: Any, ctype: str) -> str:
    """A C/C++ expression of type ``ctype`` for the float value of ``v`` (nan and infinities through
    ``std::numeric_limits``; finite values by their exact shortest repr)."""
    v = float(v)
    if math.isnan(v):
        return f"std::numeric_limits<{ctype}>::quiet_NaN()"
    if math.isinf(v):
        return f"{'-' if v < 0 else ''}std::numeric_limits<{ctype}>::infinity()"
    lit = repr(v)
    if "e" not in lit and "." not in lit:
        lit += ".0"
    return f"(({ctype}){lit})"


def c_int(v: Any, ctype: str) -> str:
    """A C/C++ expression of type ``ctype`` for the integer value of ``v`` (int64, or uint64 above it)."""
    v = int(v)
    if v == -2**63:
        return f"(({ctype})(-9223372036854775807LL - 1))"
    if v >= 2**63:
        return f"(({ctype}){v}ULL)"
    return f"(({ctype}){v}LL)"
