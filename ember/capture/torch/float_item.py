"""``t.item()`` / ``float(t)`` of a one-element floating tensor inside the graph (option ``capture_scalar_outputs``).

The value is a Python float known only when the graph runs. Where torch.compile makes it an unbacked
``SymFloat``, ember keeps it a ``FloatItemVar``: a 0-dim float64 tensor of the graph (the tensor's value,
detached, as ``item()`` returns it: a double) that behaves as the float in the program:
- Python arithmetic with numbers, symbolic ints and other such floats is float64 tensor arithmetic (the same
  IEEE double operations as Python's), giving another ``FloatItemVar``;
- an operand of a tensor op is a weak scalar (``ops.weak_floats``): cast to the dtype the op computes in, as
  eager converts a Python float;
- what needs its value in Python (a comparison, a branch, ``int()``, ``math.*``) is a graph break that says
  so; at a graph break, and when returned, it is the graph output's ``.item()``.
Its gradient is none, as eager's ``item()``: the tensor is detached.
"""
from __future__ import annotations

import torch

from .. import rules as R
from ..values import Const, TupleVar, Value
from .graph import TensorVar
from .symsize import SymNumVar

_OPTION = "capture_scalar_outputs"
_METHODS = ("item", "__float__")


class FloatItemVar(Value):
    """A Python float read from a tensor at run time: ``t`` is its 0-dim float64 tensor in the graph.

    ``origin`` is set for a float argument the dynamic policy left unspecialized (``wrap_float``) and
    for arithmetic on such floats and constants: ``(d, source or None, value, roots)``, ``roots`` the
    ``(source, value)`` of the arguments it was computed from. Where Python needs its value (a branch, a
    comparison, a constant argument of an op), it is specialized instead of breaking the graph: a guard on
    each root's value, then the constant (``value``, computed as Python did)."""
    __slots__ = ("t", "origin")
    op_priority = 7         # below tensors (``x * s`` is the tensor's op), above symbolic ints

    def __init__(self, t: TensorVar, origin: tuple | None = None):
        super().__init__(origin[1] if origin is not None else None)
        self.t = t
        self.origin = origin

    def python_type(self):
        return type(self.origin[2]) if self.origin is not None else float

    def as_python(self):
        if self.origin is None:
            return super().as_python()
        return specialize(self)

    def settle(self) -> Value:
        """The constant of an unspecialized float (guarded on its arguments' values), else itself."""
        return Const(specialize(self)) if self.origin is not None else self

    def describe(self):
        if self.origin is not None:
            return f"float {self.origin[2]!r} computed from unspecialized float arguments (graph inputs)"
        return "float read from a tensor (.item()), known only when the graph runs"


def specialize(v: FloatItemVar) -> float:
    """The value of an unspecialized float (an argument, or arithmetic on arguments), guarded from here on: the
    entry is for those argument values (a NaN by ``x != x``, since it equals nothing)."""
    from ..sources import literal
    d, _, value, roots, _ = v.origin
    for src, root in roots:
        e = src.expr(d.cg)
        test = f"{e} != {e}" if root != root else f"{e} == {literal(root, d.cg)}"    # a NaN equals nothing
        d.guards.add(test, f"{d.cg.plain(src)} == {root!r} (its value is used in Python)")
    return value


def settle(v: Value) -> Value:
    """``v``, or the constant of an unspecialized float (guarded on its arguments' values)."""
    return v.settle() if type(v) is FloatItemVar else v


def _known(v: Value):
    """(Python value, roots, expression) of a constant number or an unspecialized float, else None. The
    expression (a function of the ``Codegen``) recomputes the value from the arguments in Python."""
    if type(v) is FloatItemVar and v.origin is not None:
        return v.origin[2], v.origin[3], v.origin[4]
    if type(v) is Const and type(v.value) in (int, float, bool):
        from ..sources import literal
        return v.value, (), lambda cg, x=v.value: literal(x, cg)
    return None


def _derived(d, t: TensorVar, fn, op: str, *operands: Value) -> "FloatItemVar":
    """The result of arithmetic, with an origin when every operand's Python value is known."""
    known = [_known(v) for v in operands]
    if any(k is None for k in known) or not any(k[1] for k in known):
        return FloatItemVar(t)
    try:
        value = fn(*[k[0] for k in known])
    except Exception:       # noqa: BLE001  (Python would raise here: the value stays unknown)
        return FloatItemVar(t)
    roots = tuple(dict.fromkeys(r for k in known for r in k[1]))
    exprs = [k[2] for k in known]
    text = (lambda cg: f"({exprs[0](cg)} {op} {exprs[1](cg)})") if len(exprs) == 2 else \
        (lambda cg: f"abs({exprs[0](cg)})" if op == "abs" else f"({op}{exprs[0](cg)})")
    return FloatItemVar(t, (d, None, value, roots, text))


def _decide(d, f, what: str, args) -> Value:
    """A comparison or truth test on unspecialized floats: its answer, guarded as an answer (``bool(y == 5.0)
    == False``), so other values with the same answer reuse the entry."""
    from ..concrete import COMPARE as REAL_COMPARE
    if what == "branching on":
        k = _known(args[0])
        r = bool(k[0])
        text = f"bool({k[2](d.cg)})"
    else:
        op, a, b = args
        ka, kb = _known(a), _known(b)
        if ka is None or kb is None:        # the other operand is no plain number: compare the constants
            return d.compare(f, op, settle(a), settle(b))
        r = bool(REAL_COMPARE[op](ka[0], kb[0]))
        text = f"bool({ka[2](d.cg)} {op} {kb[2](d.cg)})"
    d.guards.add(f"{text} == {r}", f"{text} is {r} (a branch on float arguments)")
    return Const(r)


def item(d, f, t: TensorVar, name: str) -> Value | None:
    """``t.item()`` / ``float(t)`` of a one-element float tensor, or None where this does not apply."""
    from .ops import record
    from .unbacked import scalar_allowed
    dt = t.meta.dtype
    # float(t) of an integer or bool tensor is the float of its value (t.item() stays an int: unbacked.item)
    if name not in _METHODS or t.meta.numel() != 1 or dt.is_complex or not (dt.is_floating_point or name == "__float__"):
        return None
    if not scalar_allowed(d, f, name):
        raise d.unsupported(f, f"Tensor.{name}() turns a tensor value into a Python float, and option {_OPTION!r} "
                               "is off", f"compile with options={{{_OPTION!r}: True}} to keep it in the graph")
    x = record(d, f, "call_method", "detach", [t], {})
    x = record(d, f, "call_method", "reshape", [x, TupleVar([])], {})
    x = record(d, f, "call_method", "to", [x, Const(torch.float64)], {})
    return FloatItemVar(x)


def _operand(v: Value) -> Value | None:
    """``v`` as an operand of the float64 arithmetic, or None (not a number this handles)."""
    t = type(v)
    if t is FloatItemVar:
        return v.t
    if t is SymNumVar or t.__name__ == "SymFloatVar" or (t is Const and type(v.value) in (int, float, bool)):
        return v
    return None


def narrow(v: Value) -> bool:
    """An unspecialized NumPy float narrower than a double (``np.float32(0.5)``): an operand of a tensor op
    as the float it holds, as eager reads it; NumPy's own arithmetic on it (float32 rounding, an ``np.float32``
    result) is computed on its value, specialized."""
    return type(v) is FloatItemVar and v.origin is not None and not isinstance(v.origin[2], float)


def _binary(d, f, op: str, a: Value, b: Value):
    from .ops import BINARY_FNS, record
    if type(a) is TensorVar or type(b) is TensorVar:
        return NotImplemented
    if narrow(a) or narrow(b):
        return d.binary(f, op, settle(a), settle(b))
    pa, pb = _operand(a), _operand(b)
    if pa is None or pb is None or op.rstrip("=") in ("@", "<<", ">>", "&", "|", "^"):
        return NotImplemented
    fn = BINARY_FNS[op[:-1] if op.endswith("=") else op]       # floats are immutable: s += 1 rebinds s
    return _derived(d, record(d, f, "call_function", fn, [pa, pb], {}), fn, op.rstrip("="), a, b)


def _unary(d, f, op: str, v: FloatItemVar):
    from .ops import UNARY_FNS, record
    if op not in UNARY_FNS or op == "~":
        return NotImplemented
    if narrow(v):
        return d.unary(f, op, settle(v))
    return _derived(d, record(d, f, "call_function", UNARY_FNS[op], [v.t], {}), UNARY_FNS[op], op, v)


def _needs_value(what: str):
    def rule(d, f, *args):
        if any(type(a) is FloatItemVar and a.origin is not None for a in args):
            r = _decide(d, f, what, args)
            return r.value if what == "branching on" else r
        raise d.unsupported(f, f"{what} a float read from a tensor (.item()), whose value is known only when "
                               "the graph runs", "keep the computation in tensors (torch.where instead of if), "
                                                 "or move it outside the compiled function")
    return rule


def _reconstruct(glue, v: FloatItemVar) -> str:
    kind = type(v.origin[2]) if v.origin is not None else float
    if kind is not float:       # a NumPy float argument (np.float64(x) * 2 is an np.float64): its type again
        return f"{glue.cg.bind(kind, kind.__name__)}({glue.output_ref(v.t)}.item())"
    return f"{glue.output_ref(v.t)}.item()"


R.BINARY.register(FloatItemVar)(_binary)
R.UNARY.register(FloatItemVar)(_unary)
R.COMPARE.register(FloatItemVar)(_needs_value("comparing"))
R.TRUTH.register(FloatItemVar)(_needs_value("branching on"))
R.RECONSTRUCT.register(FloatItemVar)(_reconstruct)


def wrap_float(plugin, d, obj: float, source):
    """A float argument the policy leaves unspecialized (changed between compiles, or ``dynamic=True``): a
    float64 0-dim graph input used as the float (``float_item.FloatItemVar`` with an origin), guarded on its
    type only; where Python needs its value it is specialized then (a guard on the value). None: a constant."""
    from ..sources import LocalSource
    from .dynamic import _changed, _log
    from .graph import ScalarSource, to_meta
    if plugin.dynamic is False or getattr(d, "static_shapes", False):
        return None
    if not (_changed(d, "float", obj, source) or (plugin.dynamic is True and isinstance(source, LocalSource))):
        return None
    plain = d.cg.plain(source)
    e = source.expr(d.cg)
    kind = type(obj)
    d.guards.add(f"type({e}) is {d.cg.bind(kind, kind.__name__)}", f"{plain} is a {kind.__name__} (a graph input)")
    real = torch.tensor(float(obj), dtype=torch.float64)
    node = d.torch.placeholder(ScalarSource(source, torch.float64), real)
    node.meta["example_value"] = to_meta(real)
    node.meta["ember_device"] = real.device
    _log(f"{plain} = {obj!r} is a float graph input (unspecialized)")
    t = TensorVar(node, to_meta(real), real.device)
    return FloatItemVar(t, (d, source, obj, ((source, obj),), source.expr))
