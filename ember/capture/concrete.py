"""The concrete domain: every value is the real Python object, every operation really runs.

Used as ember's fallback executor and as the oracle that checks the interpreter against CPython. With
``interpret_callees`` the interpreter also runs Python callees itself (how the tests exercise it); otherwise a
``call_hook`` may redirect calls (the runtime uses it so callees go through their compiled wrappers).
Torch-free.
"""
from __future__ import annotations

import builtins
import operator
import types
from typing import Any, Callable

from .bytecode import PY, since
from .interpreter import CO_GENERATOR, NULL, Frame, Return, UserException, Yield, bind_arguments, reraise_real
from .opcode_errors import DuplicateKeyword

BINARY = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
    "%": operator.mod, "**": operator.pow, "@": operator.matmul, "<<": operator.lshift, ">>": operator.rshift,
    "&": operator.and_, "|": operator.or_, "^": operator.xor,
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "@=": operator.imatmul,
    "<<=": operator.ilshift, ">>=": operator.irshift, "&=": operator.iand, "|=": operator.ior, "^=": operator.ixor,
}
COMPARE = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
           ">=": operator.ge}
UNARY = {"-": operator.neg, "+": operator.pos, "~": operator.invert, "not": operator.not_}


# CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR: run natively (the interpreter has no event loop,
# and an awaitable generator needs the flag on its own code object)
_ASYNC = 0x80 | 0x100 | 0x200


def _user(fn):
    """Exceptions raised by the operation itself belong to the user's program."""
    def wrapped(*a, **k):
        try:
            return fn(*a, **k)
        except UserException:
            raise
        except Exception as e:          # noqa: BLE001 - re-raised as the program's own exception
            raise UserException(e) from None
    return wrapped


def unpack_iterable(v, n: int, after: int) -> list:
    """CPython's ``unpack_iterable``: take ``n`` items (then check for one too many, or with ``after`` >= 0
    collect the rest, which must hold at least ``after``), with CPython's messages."""
    if not hasattr(type(v), "__iter__") and not hasattr(type(v), "__getitem__"):
        raise TypeError(f"cannot unpack non-iterable {type(v).__name__} object")
    it = iter(v)
    out = []
    for _ in range(n):
        x = next(it, _END)
        if x is _END:
            exp = f"{n}" if after < 0 else f"at least {n + after}"
            raise ValueError(f"not enough values to unpack (expected {exp}, got {len(out)})")
        out.append(x)
    if after >= 0:
        rest = list(it)
        if len(rest) < after:
            raise ValueError(f"not enough values to unpack (expected at least {n + after}, got {n + len(rest)})")
        return out + rest
    if next(it, _END) is not _END:
        raise ValueError(f"too many values to unpack (expected {n})")
    return out


_END = object()


def import_from_fallback(mod, name):
    """IMPORT_FROM after ``getattr`` failed, as CPython's ``import_from``: a submodule already in
    ``sys.modules`` (circular imports), else ImportError with CPython's message."""
    import sys
    pkg = getattr(mod, "__name__", None)
    if isinstance(pkg, str) and f"{pkg}.{name}" in sys.modules:
        return sys.modules[f"{pkg}.{name}"]
    shown = pkg if isinstance(pkg, str) else "<unknown module name>"
    path = getattr(mod, "__file__", None)
    if not isinstance(path, str):
        err = ImportError(f"cannot import name {name!r} from {shown!r} (unknown location)", name=pkg)
    else:
        spec = getattr(mod, "__spec__", None)
        if getattr(spec, "_initializing", False):
            msg = (f"cannot import name {name!r} from partially initialized module {shown!r} "
                   f"(most likely due to a circular import) ({path})")
        else:
            msg = f"cannot import name {name!r} from {shown!r} ({path})"
        err = ImportError(msg, name=pkg, path=path)
    raise UserException(err)


def call_user(fn, args, kwargs):
    try:
        return fn(*args, **kwargs)
    except UserException:
        raise
    except Exception as e:          # noqa: BLE001 - re-raised as the program's own exception
        raise UserException(e) from None


def _format(v, spec):
    return format(v, spec if spec is not None else "")


class ConcreteDomain:
    py = PY

    def __init__(self, interpret_callees: bool = True, call_hook: Callable | None = None):
        self.interpret_callees = interpret_callees
        self.call_hook = call_hook

    # -- values ----------------------------------------------------------------------------------------
    def const(self, v):
        return v

    def builtin(self, name):
        return getattr(builtins, name)

    def as_python(self, f, v):
        return v

    def wrap_exception(self, exc):
        return exc

    def exception_of(self, f, v):
        if isinstance(v, type) and issubclass(v, BaseException):
            v = call_user(v, (), {})
        if not isinstance(v, BaseException):
            raise UserException(TypeError("exceptions must derive from BaseException"))
        return v

    def truth(self, f, v):
        return _user(bool)(v)

    def to_bool(self, f, v):
        return _user(bool)(v)

    def is_none(self, f, v):
        return v is None

    def python_type(self, v):
        return type(v)

    # -- names -----------------------------------------------------------------------------------------
    def load_global(self, f, name):
        g = f.f_globals
        if name in g:
            return g[name]
        b = g.get("__builtins__", builtins)
        b = b if isinstance(b, dict) else b.__dict__
        if name in b:
            return b[name]
        raise UserException(NameError(f"name '{name}' is not defined"))

    def store_global(self, f, name, v):
        f.f_globals[name] = v

    def delete_global(self, f, name):
        if name not in f.f_globals:
            raise UserException(NameError(f"name '{name}' is not defined"))
        del f.f_globals[name]

    def new_cell(self, v):
        return types.CellType() if v is NULL else types.CellType(v)

    def cell_get(self, c):
        try:
            return c.cell_contents
        except ValueError:
            return NULL

    def cell_set(self, c, v):
        if v is NULL:
            del c.cell_contents
        else:
            c.cell_contents = v

    # -- operations ------------------------------------------------------------------------------------
    getattr = _user(lambda self, f, o, name: getattr(o, name))
    setattr = _user(lambda self, f, o, name, v: setattr(o, name, v))
    delattr = _user(lambda self, f, o, name: delattr(o, name))
    binary = _user(lambda self, f, op, a, b: BINARY[op](a, b))
    compare = _user(lambda self, f, op, a, b: COMPARE[op](a, b))
    unary = _user(lambda self, f, op, v: UNARY[op](v))
    getitem = _user(lambda self, f, o, k: o[k])
    build_slice = _user(lambda self, f, parts: slice(*parts))
    build_tuple = _user(lambda self, f, items: tuple(items))
    build_list = _user(lambda self, f, items: list(items))
    build_set = _user(lambda self, f, items: set(items))
    build_map = _user(lambda self, f, keys, vals: dict(zip(keys, vals)))
    build_string = _user(lambda self, f, parts: "".join(parts))
    list_to_tuple = _user(lambda self, f, v: tuple(v))
    list_append = _user(lambda self, f, lst, v: lst.append(v))
    list_extend = _user(lambda self, f, lst, v: lst.extend(v))
    set_add = _user(lambda self, f, s, v: s.add(v))
    set_update = _user(lambda self, f, s, v: s.update(v))
    format = _user(lambda self, f, v, spec: _format(v, spec))
    iter = _user(lambda self, f, v: iter(v))

    def is_(self, f, a, b, negate):
        return (a is not b) if negate else (a is b)

    @_user
    def contains(self, f, a, b, negate):
        return (a not in b) if negate else (a in b)

    @_user
    def setitem(self, f, o, k, v):
        o[k] = v

    @_user
    def delitem(self, f, o, k):
        del o[k]

    @_user
    def dict_update(self, f, d, v, merge):
        """``PyDict_Update``/``_PyDict_MergeEx``: a mapping (``keys()`` and ``[]``), not pairs; with ``merge``
        a repeated key raises KeyError (DICT_MERGE turns it into the call's TypeError)."""
        if type(v) is dict or isinstance(v, dict) and type(v).__iter__ is dict.__iter__:
            pairs = list(dict.items(v))
        else:
            pairs = [(k, v[k]) for k in v.keys()]      # noqa: SIM118 - a mapping's own keys(), as CPython calls
        for k, x in pairs:
            if merge and k in d:
                raise DuplicateKeyword(k)
            d[k] = x

    @_user
    def unpack_all(self, f, v):
        return list(v)

    @_user
    def unpack(self, f, v, n):
        return unpack_iterable(v, n, -1)

    @_user
    def unpack_ex(self, f, v, before, after):
        items = unpack_iterable(v, before, after)
        return items[:before] + [items[before:len(items) - after]] + items[len(items) - after:]

    @_user
    def next(self, f, it):
        try:
            return True, next(it)
        except StopIteration:
            return False, None

    @_user
    def send(self, f, gen, v):
        try:
            return True, (next(gen) if v is None else gen.send(v))
        except StopIteration as e:
            return False, e.value

    @_user
    def enter_context(self, f, mgr):
        t = type(mgr)
        enter, exit_ = getattr(t, "__enter__", None), getattr(t, "__exit__", None)
        if enter is None or exit_ is None:
            raise TypeError(f"'{t.__name__}' object does not support the context manager protocol")
        bound_exit = types.MethodType(exit_, mgr)
        return bound_exit, self.call(f, types.MethodType(enter, mgr), [], {})

    def load_build_class(self, f):
        b = f.f_globals.get("__builtins__", builtins)
        return (b if isinstance(b, dict) else b.__dict__)["__build_class__"]

    def make_super(self, f, cls, obj):
        return super(cls, obj)

    @_user
    def import_name(self, f, name, fromlist, level):
        return __import__(name, f.f_globals, None, fromlist, level)

    def import_from(self, f, mod, name):
        try:
            return getattr(mod, name)
        except AttributeError:
            pass
        except Exception as e:      # noqa: BLE001
            raise UserException(e) from None
        return import_from_fallback(mod, name)

    # -- functions -------------------------------------------------------------------------------------
    def make_function(self, f, code, attrs):
        closure = attrs.get("closure")
        if closure is None and code.co_freevars:     # 3.13 sets the closure afterwards
            closure = tuple(types.CellType() for _ in code.co_freevars)
        fn = types.FunctionType(code, f.f_globals, code.co_name, None, closure)
        fn.__qualname__ = code.co_qualname
        for k in ("defaults", "kwdefaults", "annotations"):
            if k in attrs:
                self.set_function_attr(f, fn, k, attrs[k])
        return fn

    def set_function_attr(self, f, fn, name, v):
        if name == "closure":       # read-only on function objects: make a new one
            new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, v)
            new.__kwdefaults__, new.__annotations__ = fn.__kwdefaults__, fn.__annotations__
            new.__qualname__ = fn.__qualname__
            return new
        if name == "annotations" and isinstance(v, tuple):     # (name, value, name, value, ...)
            v = dict(zip(v[::2], v[1::2]))
        setattr(fn, f"__{name}__", v)
        return fn

    def _frame_builtin(self, f, fn, args, kwargs):
        """A builtin that reads its caller's frame (``locals()``, ``vars()``, ``dir()``, ``eval``/``exec``
        without namespaces) gets the interpreted frame's names, not those of the interpreter's own frame."""
        names = {k: (self.cell_get(v) if isinstance(v, types.CellType) else v) for k, v in f.locals.items()
                 if not (isinstance(v, types.CellType) and _empty_cell(v))}
        if fn is globals:
            return f.f_globals
        if fn is locals or fn is vars:
            return names
        if fn is dir:
            return sorted(names)
        return fn(args[0], f.f_globals, names, **kwargs)        # eval / exec of a string or code object

    def call_ex(self, f, fn, args, kwargs):
        if kwargs and not all(isinstance(k, str) for k in kwargs):
            raise UserException(TypeError("keywords must be strings"))
        return self.call(f, fn, list(args), dict(kwargs) if kwargs else {})

    def call(self, f, fn, args, kwargs):
        if fn is super and not args:
            return self._zero_arg_super(f)
        if type(fn) is types.BuiltinFunctionType and fn in _FRAME_BUILTINS and \
                _reads_callers_frame(fn, args, kwargs):
            return self._frame_builtin(f, fn, args, kwargs)
        if self.call_hook is not None:
            return self.call_hook(f, fn, args, kwargs)
        func, bound = fn, []
        if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
            func, bound = fn.__func__, [fn.__self__]
        if self.interpret_callees and type(func) is types.FunctionType and not func.__code__.co_flags & _ASYNC:
            return self.interpret(f, func, bound + list(args), kwargs)
        return call_user(fn, args, kwargs)

    def _zero_arg_super(self, f):
        code = f.code
        if "__class__" not in f.locals or not code.co_argcount:
            raise UserException(RuntimeError("super(): no arguments"))
        first = f.locals[code.co_varnames[0]]
        if isinstance(first, types.CellType):
            first = first.cell_contents
        return super(self.cell_get(f.locals["__class__"]), first)

    def interpret(self, parent, func, args, kwargs):
        code = func.__code__
        try:
            locals_ = bind_arguments(code, func.__defaults__ or (), func.__kwdefaults__, args, kwargs,
                                     tuple, dict, func.__qualname__)
        except TypeError as e:
            raise UserException(e) from None
        for name, cell in zip(code.co_freevars, func.__closure__ or ()):
            locals_[name] = cell
        frame = Frame(self, code, func.__globals__, locals_, parent, func)
        if code.co_flags & CO_GENERATOR:
            gen = _drive_generator(frame)
            gen.__name__, gen.__qualname__ = func.__name__, func.__qualname__
            return gen
        return frame.run().value


def _drive_generator(frame: Frame, suspended: bool = False):
    """A real generator running an interpreted generator frame. ``throw``/``close`` (also the close at garbage
    collection) are raised inside the frame, so its ``finally`` and ``with`` blocks run as in CPython.
    ``suspended``: the frame is paused at a yield (a generator the trace started, rebuilt by ``resume_generator``);
    the generator first yields None without running the frame, to be primed by its maker."""
    r = Yield(None) if suspended else _resume(frame.run)
    while type(r) is not Return:
        thrown = None
        try:
            sent = yield r.value
        except BaseException as e:      # noqa: BLE001 - generator.throw()/close(): raised in the frame
            thrown = e
        if thrown is None:
            frame.stack.append(sent)
            r = _resume(frame.run)
        else:
            r = _resume(_throw, frame, thrown)
    return r.value


def resume_generator(func: Any, code: types.CodeType, f_globals: dict, ip: int, stack: list, locals_: dict,
                     exc_info: Any = None):
    """A real generator that goes on from where a traced generator frame is paused: its code, globals,
    instruction pointer (just after the yield), value stack and locals (cells for cell and free variables). The
    rest of the body runs lazily, as the caller iterates, by the concrete interpreter (callees natively), so
    its work and side effects happen when eager's would. Returned already primed: ``send(v)`` reaches the
    frame, as it would the original generator."""
    frame = Frame(ConcreteDomain(interpret_callees=False), code, f_globals, locals_, None, func)
    frame.ip, frame.cur, frame.stack, frame.exc_info = ip, frame.instrs[ip - 1], list(stack), exc_info
    gen = _drive_generator(frame, suspended=True)
    gen.__name__, gen.__qualname__ = code.co_name, code.co_qualname
    next(gen)
    return gen


def finished_generator(code: types.CodeType):
    """An exhausted generator named after ``code`` (a traced generator that ran to its end)."""
    def gen():
        return
        yield       # noqa: unreachable - makes this a generator function
    g = gen()
    g.__name__, g.__qualname__ = code.co_name, code.co_qualname
    for _ in g:
        pass
    return g


def _resume(step, *args):
    try:
        return step(*args)
    except UserException as ue:
        exc = ue.exc
    reraise_real(exc)


def _throw(frame: Frame, exc: BaseException):
    """``generator.throw(exc)`` on a suspended frame, delegating to the sub-iterator of a `yield from`."""
    if not frame.in_yield_from():
        return frame.throw(exc)
    sub = frame.stack[-1]
    if isinstance(exc, GeneratorExit):
        close = getattr(sub, "close", None)
        if close is not None:
            try:
                close()
            except Exception as e:      # noqa: BLE001 - raised in the frame instead
                exc = e
        return frame.throw(exc)
    meth = getattr(sub, "throw", None)
    if meth is None:
        return frame.throw(exc)
    try:
        return Yield(meth(exc))
    except Exception as e:      # noqa: BLE001 - the sub-iterator finished or failed: the frame goes on
        err = e
    return _after_sub_throw(frame, err)


def _after_sub_throw(frame: Frame, err: BaseException):
    if since((3, 12), "yield from after throw()"):     # CLEANUP_THROW turns StopIteration into the result
        return frame.throw(err)
    frame.stack.pop()           # 3.11: CPython pops the sub-iterator and jumps past the SEND loop itself
    if not isinstance(err, StopIteration):
        return frame.throw(err)
    send = frame.instrs[frame.instrs[frame.ip + 1].jump_target]
    frame.stack.append(err.value)
    frame.ip = send.jump_target
    return frame.run()


_FRAME_BUILTINS = frozenset((locals, globals, vars, dir, eval, exec))


def _reads_callers_frame(fn: Any, args: Any, kwargs: dict) -> bool:
    """Whether this call of a frame builtin reads its caller's names: ``locals()``, ``globals()``, ``vars()``,
    ``dir()`` without arguments; ``eval``/``exec`` without a locals namespace."""
    if fn in (eval, exec):
        return 1 <= len(args) <= 2 and (len(args) == 1 or args[1] is None) and \
            not {"globals", "locals"} & set(kwargs)
    return not args and not kwargs


def _empty_cell(cell: types.CellType) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return True
    return False


def run_concrete(fn: Any, /, *args, **kwargs):
    """Run ``fn`` by interpreting its bytecode (and its Python callees') with real values."""
    dom = ConcreteDomain(interpret_callees=True)
    try:
        return dom.call(None, fn, list(args), kwargs)
    except UserException as ue:
        exc = ue.exc
    reraise_real(exc)
