"""``torch.autograd.Function.apply`` inside compiled code.

Where no input requires grad (or grad mode is off), eager's ``apply`` runs the class's ``forward`` under
``no_grad`` and records nothing for autograd, so the trace inlines ``forward`` the same way: its ops become
graph nodes and its outputs do not require grad. A ``ctx`` stands in for autograd's, with the methods a
``forward`` calls (``save_for_backward``, ``mark_dirty``, ...) as no-ops, since no backward will read them.
With an input that requires grad, a class whose ``forward``/``backward``/``setup_context`` are plain tensor code
(``check_class`` checks their bytecode: no global or closure writes, attribute writes only on ``ctx``, no
``.item()``/``print``/``mark_dirty``) becomes one graph node that calls ``cls.apply``. AOT autograd then runs
that node on its fake tensors through PyTorch's autograd engine, which runs the class's own ``forward`` and, for
the gradient, its own ``backward``: both end up as ATen ops in the forward and backward graphs (BLOOM's
``GeLUFunction``, straight-through estimators, gradient reversal). Any other class stays a graph break."""
from __future__ import annotations

import dataclasses
import dis
import functools
import inspect
import types

import torch

from ...emit import py_str
from ..interpreter import NULL
from ..sources import ConstSource
from .ctx import set_grad
from .graph import TensorVar
from .ops import record


class InferenceCtx:
    """The ``ctx`` of a ``forward`` run without autograd."""

    def __init__(self, n_inputs: int):
        self.needs_input_grad = (False,) * n_inputs
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        pass

    def mark_dirty(self, *tensors):
        pass

    def mark_non_differentiable(self, *tensors):
        pass

    def set_materialize_grads(self, value: bool):
        self.materialize_grads = value


APPLY = torch.autograd.Function.apply.__func__


def function_apply_class(fn, args) -> type | None:
    """The ``torch.autograd.Function`` subclass whose ``apply`` ``fn`` is (bound, or the plain function with
    the class as first argument, as a classmethod call reaches the trace), else None."""
    if type(fn) is types.MethodType and fn.__func__ is APPLY:
        cls = fn.__self__
    elif fn is APPLY and args and type(args[0]).__name__ == "Const":
        cls = args[0].value
    else:
        return None
    return cls if isinstance(cls, type) and issubclass(cls, torch.autograd.Function) else None


def _forward_of(cls: type):
    fwd = inspect.getattr_static(cls, "forward", None)
    fwd = fwd.__func__ if isinstance(fwd, (staticmethod, classmethod)) else fwd
    return fwd if type(fwd) is types.FunctionType else None


def _uses_setup_context(cls: type) -> bool:
    base = getattr(torch.autograd.function, "_SingleLevelFunction", torch.autograd.Function)
    return getattr(cls, "setup_context", None) is not getattr(base, "setup_context", None)


def call_function_apply(d, f, cls: type, args, kwargs):
    name = cls.__name__
    values = list(args) + list(kwargs.values())
    if d.torch.grad_enabled and any(type(v) is TensorVar and v.meta.requires_grad for v in values):
        why, chk = check_class(cls)
        if why is not None:
            raise d.unsupported(f, f"{name}.apply with an input that requires grad: {why}",
                                "it runs eagerly; under no_grad it is captured")
        guard_reads(d, chk)
        return record(d, f, "call_function", apply_target(cls), list(args), dict(kwargs))
    fwd = _forward_of(cls)
    if fwd is None:
        raise d.unsupported(f, f"{name}.forward is not a Python function")
    lead = []
    if not _uses_setup_context(cls):
        ctx = InferenceCtx(len(args))
        lead = [d.wrap(ctx, ConstSource(id(ctx), ctx))]
    prev = d.torch.grad_enabled
    set_grad(d, f, False)
    out = d.inline(f, fwd, lead + list(args), dict(kwargs))
    set_grad(d, f, prev)
    return out


# names whose use makes a forward/backward more than tensor code: data-dependent reads, printing, in-place
# marking (the node would need functionalizing)
_IMPURE_NAMES = frozenset({"item", "tolist", "numpy", "print", "mark_dirty", "breakpoint", "input", "exec",
                           "eval", "setattr", "delattr", "open", "globals", "vars", "locals"})
_WRITES = frozenset({"STORE_GLOBAL", "DELETE_GLOBAL", "STORE_DEREF", "DELETE_DEREF", "DELETE_ATTR"})
_MAX_DEPTH = 4


@dataclasses.dataclass
class _Check:
    """What checking a class's methods found: the functions seen, and every global and closure cell they read
    (the compiled node depends on those staying the same objects: ``guard_reads``)."""
    seen: set = dataclasses.field(default_factory=set)
    globals_read: list = dataclasses.field(default_factory=list)     # (globals dict, name, value)
    cells_read: list = dataclasses.field(default_factory=list)       # (cell, value)
    attrs_read: list = dataclasses.field(default_factory=list)       # ((globals, name) | cell, chain, value)


def _free_value_reason(value, where: str, chk: _Check, depth: int) -> str | None:
    """Why a global or closure value a method reads could hold state it changes (None: it cannot)."""
    if isinstance(value, (types.ModuleType, type, int, float, bool, str, bytes, type(None), torch.dtype,
                          torch.device, types.BuiltinFunctionType)):
        return None
    if isinstance(value, tuple):
        return next((r for x in value if (r := _free_value_reason(x, where, chk, depth))), None)
    if type(value) is types.FunctionType:
        return _function_reason(value, where, chk, depth + 1, owns_ctx=False)
    if (type(value).__module__ or "").split(".")[0] == "torch":     # torch's own functions and objects
        return None
    return f"{where} reads a {type(value).__name__} object that it may change"


def _builtin(name: str):
    b = __builtins__
    return b.get(name, NULL) if isinstance(b, dict) else getattr(b, name, NULL)


def _function_reason(fn: types.FunctionType, where: str, chk: _Check, depth: int, owns_ctx: bool) -> str | None:
    """Why ``fn`` is not plain tensor code: a write outside itself (globals, closures, attributes of anything
    but its ``ctx`` argument), an impure name, a nested function, or a read of a global/closure object it could
    change; the functions it reads are checked the same way."""
    if fn in chk.seen:
        return None
    if depth > _MAX_DEPTH:
        return f"{where} calls functions too deeply to check"
    chk.seen.add(fn)
    code = fn.__code__
    names = _IMPURE_NAMES.intersection(code.co_names)
    if names:
        return f"{where} uses {sorted(names)[0]}"
    if any(isinstance(c, types.CodeType) for c in code.co_consts):
        return f"{where} defines a nested function"
    ins = list(dis.get_instructions(code))
    for i, x in enumerate(ins):
        if x.opname in _WRITES:
            return f"{where} writes {x.argval!r} outside the function"
        if x.opname == "STORE_ATTR" and not (owns_ctx and i and ins[i - 1].opname == "LOAD_FAST"
                                             and ins[i - 1].argval == code.co_varnames[0]):
            return f"{where} sets attribute {x.argval!r} on an object other than ctx"
        if x.opname == "LOAD_GLOBAL":
            g = fn.__globals__.get(x.argval, NULL)
            chk.globals_read.append((fn.__globals__, x.argval, g))
            if (r := _free_value_reason(_builtin(x.argval) if g is NULL else g, where, chk, depth)):
                return r
            if g is not NULL and (r := _attr_reads(ins, i, (fn.__globals__, x.argval), g, where, chk, depth)):
                return r
        if x.opname == "LOAD_DEREF" and x.argval in code.co_freevars:
            cell = fn.__closure__[code.co_freevars.index(x.argval)]
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            if (r := _attr_reads(ins, i, cell, v, where, chk, depth)):
                return r
    for cell in fn.__closure__ or ():
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        chk.cells_read.append((cell, v))
        if (r := _free_value_reason(v, where, chk, depth)):
            return r
    return None


def _attr_reads(ins: list, i: int, root: tuple | types.CellType, value, where: str, chk: _Check,
                depth: int) -> str | None:
    """The attributes read off a global or closure value (``Cls.scale``, ``mod.table.k``: the LOAD_ATTR /
    LOAD_METHOD run after ``ins[i]``): the value reached is checked like a free value and recorded, for a
    guard that it is still the same object (a class attribute changed after compiling must not be read
    stale). Attributes of torch's own modules and classes are not followed."""
    chain = []
    for x in ins[i + 1:]:
        if x.opname not in ("LOAD_ATTR", "LOAD_METHOD"):
            break
        chain.append(x.argval)
    if not chain or (getattr(value, "__module__", None) or getattr(value, "__name__", "")).split(".")[0] == "torch":
        return None
    for name in chain:
        try:
            value = getattr(value, name)
        except Exception:  # noqa: BLE001
            return f"{where} reads attribute {name!r} that it cannot resolve ahead of the call"
    chk.attrs_read.append((root, chain, value))
    if isinstance(value, (types.MethodType, classmethod, staticmethod)):
        value = value.__func__
    return _free_value_reason(value, where, chk, depth)


def check_class(cls: type) -> tuple[str | None, _Check]:
    """(None, what was read) when ``cls``'s methods are plain tensor code that AOT autograd may run on fake
    tensors at compile time in place of every call; otherwise (why not, ...)."""
    chk = _Check()
    for meth in ("forward", "backward", "setup_context"):
        fn = inspect.getattr_static(cls, meth, None)
        fn = fn.__func__ if isinstance(fn, (staticmethod, classmethod)) else fn
        base = inspect.getattr_static(torch.autograd.Function, meth, None)
        base = base.__func__ if isinstance(base, (staticmethod, classmethod)) else base
        if fn is base:
            if meth == "setup_context":
                continue
            return f"{cls.__name__}.{meth} is not defined", chk
        if type(fn) is not types.FunctionType:
            return f"{cls.__name__}.{meth} is not a Python function", chk
        why = _function_reason(fn, f"{cls.__name__}.{meth}", chk, 0,
                               owns_ctx=meth != "forward" or not _uses_setup_context(cls))
        if why is not None:
            return why, chk
    return None, chk


def guard_reads(d, chk: _Check) -> None:
    """Guard every global name and closure cell the methods read on still holding the same object (a global
    not defined, or found among the builtins, on still being absent), as inlined code's reads are guarded;
    the globals of trusted libraries are not, as elsewhere."""
    for g, name, value in chk.globals_read:
        if d._trusted_globals(g):
            continue
        key = py_str(name)
        if value is NULL:
            d.guards.add(f"{key} not in {d.cg.bind(g, 'G')}", f"global {name} is not defined")
        else:
            d.guards.add(f"{d.cg.bind(g, 'G')}.get({key}) is {d.cg.bind(value, 'found')}",
                         f"global {name} is the same object")
    for cell, value in chk.cells_read:
        d.guards.add(f"{d.cg.bind(cell, 'cell')}.cell_contents is {d.cg.bind(value, 'found')}",
                     "a closure variable of a custom autograd.Function is the same object")
    for root, chain, value in chk.attrs_read:
        if isinstance(root, tuple):      # (globals dict, name)
            if d._trusted_globals(root[0]):
                continue
            name = root[1]
            base = f"{d.cg.bind(root[0], 'G')}[{py_str(name)}]"
        else:
            base, name = f"{d.cg.bind(root, 'cell')}.cell_contents", "a closure variable"
        d.guards.add(f"{base}.{'.'.join(chain)} is {d.cg.bind(value, 'found')}",
                     f"{name}.{'.'.join(chain)} read by a custom autograd.Function is the same object")


@functools.lru_cache(maxsize=None)
def apply_target(cls: type):
    """The graph node's target for ``cls.apply``: a plain function (FX prints it by name)."""
    def apply(*args, **kwargs):
        return cls.apply(*args, **kwargs)
    apply.__name__ = f"{cls.__name__}_apply"
    apply.__qualname__ = f"apply_target.<locals>.{apply.__name__}"     # a closure: no graph cache key names it
    apply.__module__ = __name__
    apply.ember_autograd_function = cls
    return apply
