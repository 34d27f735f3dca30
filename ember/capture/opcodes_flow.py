"""Opcode handlers: calls, function creation, containers, iteration, strings, exceptions, `with`,
generators and imports."""
from __future__ import annotations

from .bytecode import since
from .interpreter import NULL, UserException, Yield, set_context
from .opcode_errors import check_except_type, check_star_args, kwargs_error, not_iterable
from .registry import register_opcode as op


# -- calls ---------------------------------------------------------------------------------------------
def _callee(a, b, args):
    """[NULL|meth, callable|self] (3.11/3.12) or [callable, NULL|self] (3.13) -> (callable, args)."""
    if a is NULL:
        return b, args
    if b is NULL:
        return a, args
    return a, [b, *args]


def _do_call(f, argc, kwnames):
    args = f.popn(argc)
    b = f.stack.pop()
    a = f.stack.pop()
    fn, args = _callee(a, b, args)
    kwargs = {}
    if kwnames:
        n = len(kwnames)
        kwargs = dict(zip(kwnames, args[-n:]))
        args = args[:-n]
    f.stack.append(f.dom.call(f, fn, args, kwargs))


@op("KW_NAMES", max_version=(3, 12))
def _kw_names(f, ins):
    f.kw_names = f.code.co_consts[ins.arg]


@op("CALL")
def _call(f, ins):
    kw, f.kw_names = f.kw_names, None
    _do_call(f, ins.arg, kw)


@op("CALL_KW", min_version=(3, 13))
def _call_kw(f, ins):
    names = f.dom.as_python(f, f.stack.pop())
    _do_call(f, ins.arg, names)


@op("CALL_FUNCTION_EX")
def _call_function_ex(f, ins):
    kwargs = f.stack.pop() if ins.arg & 1 else None
    args = f.stack.pop()
    b = f.stack.pop()
    a = f.stack.pop()
    fn = b if a is NULL else a
    if a is not NULL and b is not NULL:
        raise f.unsupported("CALL_FUNCTION_EX with a bound self")
    check_star_args(f, fn, args)
    f.stack.append(f.dom.call_ex(f, fn, args, kwargs))


@op("CALL_INTRINSIC_1", min_version=(3, 12))
def _call_intrinsic_1(f, ins):
    name = ins.argrepr
    v = f.stack.pop()
    if name == "INTRINSIC_LIST_TO_TUPLE":
        f.stack.append(f.dom.list_to_tuple(f, v))
    elif name == "INTRINSIC_UNARY_POSITIVE":
        f.stack.append(f.dom.unary(f, "+", v))
    elif name == "INTRINSIC_STOPITERATION_ERROR":
        exc = f.dom.exception_of(f, v)
        if isinstance(exc, StopIteration):
            new = RuntimeError("generator raised StopIteration")
            new.__cause__ = exc
            new.__context__ = exc
            raise UserException(new, chained=True)
        raise UserException(exc, chained=True)
    else:
        raise f.unsupported(f"CALL_INTRINSIC_1 {name} is not supported")


@op("LIST_TO_TUPLE", max_version=(3, 11))
def _list_to_tuple(f, ins):
    f.stack.append(f.dom.list_to_tuple(f, f.stack.pop()))


# -- functions -----------------------------------------------------------------------------------------
@op("MAKE_FUNCTION", max_version=(3, 12))
def _make_function_311(f, ins):
    code = f.dom.as_python(f, f.stack.pop())
    attrs = {}
    for flag, name in ((8, "closure"), (4, "annotations"), (2, "kwdefaults"), (1, "defaults")):
        if ins.arg & flag:
            attrs[name] = f.stack.pop()
    f.stack.append(f.dom.make_function(f, code, attrs))


@op("MAKE_FUNCTION", min_version=(3, 13))
def _make_function_313(f, ins):
    code = f.dom.as_python(f, f.stack.pop())
    f.stack.append(f.dom.make_function(f, code, {}))


_FN_ATTR = {1: "defaults", 2: "kwdefaults", 4: "annotations", 8: "closure"}


@op("SET_FUNCTION_ATTRIBUTE", min_version=(3, 13))
def _set_function_attribute(f, ins):
    fn = f.stack.pop()
    val = f.stack.pop()
    f.stack.append(f.dom.set_function_attr(f, fn, _FN_ATTR[ins.arg], val))


# -- containers ----------------------------------------------------------------------------------------
@op("BUILD_TUPLE")
def _build_tuple(f, ins):
    f.stack.append(f.dom.build_tuple(f, f.popn(ins.arg)))


@op("BUILD_LIST")
def _build_list(f, ins):
    f.stack.append(f.dom.build_list(f, f.popn(ins.arg)))


@op("BUILD_SET")
def _build_set(f, ins):
    f.stack.append(f.dom.build_set(f, f.popn(ins.arg)))


@op("BUILD_MAP")
def _build_map(f, ins):
    items = f.popn(2 * ins.arg)
    f.stack.append(f.dom.build_map(f, items[0::2], items[1::2]))


@op("BUILD_CONST_KEY_MAP")
def _build_const_key_map(f, ins):
    keys = f.stack.pop()
    vals = f.popn(ins.arg)
    f.stack.append(f.dom.build_map(f, f.dom.unpack(f, keys, ins.arg), vals))


@op("LIST_APPEND")
def _list_append(f, ins):
    v = f.stack.pop()
    f.dom.list_append(f, f.stack[-ins.arg], v)


@op("SET_ADD")
def _set_add(f, ins):
    v = f.stack.pop()
    f.dom.set_add(f, f.stack[-ins.arg], v)


@op("MAP_ADD")
def _map_add(f, ins):
    v = f.stack.pop()
    k = f.stack.pop()
    f.dom.setitem(f, f.stack[-ins.arg], k, v)


@op("LIST_EXTEND")
def _list_extend(f, ins):
    v = f.stack.pop()
    t = f.dom.python_type(v)
    if not_iterable(t):
        raise UserException(TypeError(f"Value after * must be an iterable, not {t.__name__}"))
    f.dom.list_extend(f, f.stack[-ins.arg], v)


@op("SET_UPDATE")
def _set_update(f, ins):
    v = f.stack.pop()
    f.dom.set_update(f, f.stack[-ins.arg], v)


@op("DICT_UPDATE")
def _dict_update(f, ins):
    v = f.stack.pop()
    t = f.dom.python_type(v)
    if not hasattr(t, "keys"):
        raise UserException(TypeError(f"'{t.__name__}' object is not a mapping"))
    f.dom.dict_update(f, f.stack[-ins.arg], v, False)


@op("DICT_MERGE")
def _dict_merge(f, ins):
    """``f(**m)``: merged into the call's keyword dict; the callable sits below it for the error text."""
    v = f.stack.pop()
    fn = f.stack[-ins.arg - (3 if since((3, 13), "DICT_MERGE stack layout") else 2)]
    try:
        if not hasattr(f.dom.python_type(v), "keys"):
            raise UserException(AttributeError("keys"))
        f.dom.dict_update(f, f.stack[-ins.arg], v, True)
    except UserException as ue:
        raise kwargs_error(f, fn, v, ue) from None


@op("UNPACK_SEQUENCE")
def _unpack_sequence(f, ins):
    items = f.dom.unpack(f, f.stack.pop(), ins.arg)
    f.stack.extend(reversed(items))


@op("UNPACK_EX")
def _unpack_ex(f, ins):
    before, after = ins.arg & 0xFF, ins.arg >> 8
    items = f.dom.unpack_ex(f, f.stack.pop(), before, after)
    f.stack.extend(reversed(items))


@op("GET_LEN")
def _get_len(f, ins):
    f.stack.append(f.dom.call(f, f.dom.builtin("len"), [f.stack[-1]], {}))


# -- iteration -----------------------------------------------------------------------------------------
@op("GET_ITER")
def _get_iter(f, ins):
    f.stack.append(f.dom.iter(f, f.stack.pop()))


@op("GET_YIELD_FROM_ITER")
def _get_yield_from_iter(f, ins):
    # a domain may keep a user iterator object itself: `yield from` delegates send/throw/close to its methods
    v = f.stack.pop()
    keep = getattr(f.dom, "yield_from_iter", None)
    f.stack.append(keep(f, v) if keep is not None else f.dom.iter(f, v))


@op("FOR_ITER")
def _for_iter(f, ins):
    ok, v = f.dom.next(f, f.stack[-1])
    if ok:
        f.stack.append(v)
        return
    if since((3, 12), "FOR_ITER exhaustion"):   # the target is END_FOR: pops the iterator and one more value
        f.stack.append(NULL)
    else:
        f.stack.pop()
    f.ip = ins.jump_target


# -- strings -------------------------------------------------------------------------------------------
_CONVERSIONS = {0: None, 1: "str", 2: "repr", 3: "ascii"}


@op("FORMAT_VALUE", max_version=(3, 12))
def _format_value(f, ins):
    spec = f.stack.pop() if ins.arg & 4 else None
    v = f.stack.pop()
    conv = _CONVERSIONS[ins.arg & 3]
    if conv:
        v = f.dom.call(f, f.dom.builtin(conv), [v], {})
    f.stack.append(f.dom.format(f, v, spec))


@op("CONVERT_VALUE", min_version=(3, 13))
def _convert_value(f, ins):
    v = f.stack.pop()
    f.stack.append(f.dom.call(f, f.dom.builtin(_CONVERSIONS[ins.arg]), [v], {}))


@op("FORMAT_SIMPLE", min_version=(3, 13))
def _format_simple(f, ins):
    f.stack.append(f.dom.format(f, f.stack.pop(), None))


@op("FORMAT_WITH_SPEC", min_version=(3, 13))
def _format_with_spec(f, ins):
    spec = f.stack.pop()
    f.stack.append(f.dom.format(f, f.stack.pop(), spec))


@op("BUILD_STRING")
def _build_string(f, ins):
    f.stack.append(f.dom.build_string(f, f.popn(ins.arg)))


# -- exceptions ----------------------------------------------------------------------------------------
@op("LOAD_ASSERTION_ERROR")
def _load_assertion_error(f, ins):
    f.stack.append(f.dom.const(AssertionError))


@op("RAISE_VARARGS")
def _raise_varargs(f, ins):
    if ins.arg == 0:            # bare `raise`: re-raise the handled exception, no new chaining
        exc = f.handled_exception()
        if exc is None:
            raise UserException(RuntimeError("No active exception to reraise"))
        raise UserException(exc, chained=True)
    cause = f.stack.pop() if ins.arg == 2 else NULL
    exc = f.dom.exception_of(f, f.stack.pop())
    if cause is not NULL:
        exc.__cause__ = _exception_cause(f, cause)      # also sets __suppress_context__
    set_context(exc, f.handled_exception())
    raise UserException(exc, chained=True)


def _exception_cause(f, cause):
    if f.dom.is_none(f, cause):
        return None
    if issubclass(f.dom.python_type(cause), BaseException):     # an instance (one carrying traced values too)
        return f.dom.exception_of(f, cause)
    c = f.dom.as_python(f, cause)
    if isinstance(c, type) and issubclass(c, BaseException):
        return f.dom.exception_of(f, cause)
    if isinstance(c, BaseException):
        return c
    raise UserException(TypeError("exception causes must derive from BaseException"))


@op("RERAISE")
def _reraise(f, ins):
    # a non-zero oparg only names the stack slot of the lasti to report in tracebacks; it stays on the stack
    # (the exception table, not that lasti, decides where the exception goes)
    ue = UserException(f.dom.exception_of(f, f.stack.pop()), chained=True)
    last = f.last_raise
    if last is not None and last.exc is ue.exc:        # a re-raise: the traceback keeps where it was raised
        ue.user_stack = getattr(last, "user_stack", None)
        ue.user_frames = getattr(last, "user_frames", None)
    raise ue


@op("PUSH_EXC_INFO")
def _push_exc_info(f, ins):
    exc = f.stack.pop()
    f.stack.append(f.exc_info if f.exc_info is not None else f.dom.const(None))
    f.exc_info = exc
    f.stack.append(exc)


@op("POP_EXCEPT")
def _pop_except(f, ins):
    prev = f.stack.pop()
    f.exc_info = None if f.dom.is_none(f, prev) else prev


@op("CHECK_EXC_MATCH")
def _check_exc_match(f, ins):
    typ = f.stack.pop()
    exc = f.dom.exception_of(f, f.stack[-1])
    t = f.dom.as_python(f, typ)
    check_except_type(t)
    f.stack.append(f.dom.const(isinstance(exc, t)))


@op("WITH_EXCEPT_START")
def _with_except_start(f, ins):
    exc = f.stack[-1]
    exit_fn = f.stack[-4]
    e = f.dom.exception_of(f, exc)
    f.stack.append(f.dom.call(f, exit_fn, [f.dom.const(type(e)), exc, f.dom.const(e.__traceback__)], {}))


@op("BEFORE_WITH", max_version=(3, 13))
def _before_with(f, ins):
    mgr = f.stack.pop()
    exit_fn, entered = f.dom.enter_context(f, mgr)
    f.stack.append(exit_fn)
    f.stack.append(entered)


@op("CLEANUP_THROW", min_version=(3, 12))
def _cleanup_throw(f, ins):
    """After a throw into a `yield from` whose sub-iterator finished (StopIteration) or failed."""
    exc = f.dom.exception_of(f, f.stack.pop())
    del f.stack[-2:]
    if not isinstance(exc, StopIteration):
        raise UserException(exc, chained=True)
    f.stack.append(f.dom.const(None))
    f.stack.append(f.dom.const(exc.value))


# -- generators ----------------------------------------------------------------------------------------
@op("RETURN_GENERATOR")
def _return_generator(f, ins):
    f.stack.append(f.dom.const(None))    # the value sent by the first resume, popped by POP_TOP


@op("YIELD_VALUE")
def _yield_value(f, ins):
    return Yield(f.stack.pop())


@op("SEND")
def _send(f, ins):
    v = f.stack.pop()
    ok, out = f.dom.send(f, f.stack[-1], v)
    if ok:
        f.stack.append(out)
    else:
        f.stack.append(out)
        f.ip = ins.jump_target
        if not since((3, 12), "SEND exhaustion"):     # 3.11 pops the iterator; 3.12+ leaves it to END_SEND
            f.stack.pop(-2)


# -- imports -------------------------------------------------------------------------------------------
@op("IMPORT_NAME")
def _import_name(f, ins):
    fromlist = f.stack.pop()
    level = f.stack.pop()
    f.stack.append(f.dom.import_name(f, ins.argval, fromlist, level))


@op("IMPORT_FROM")
def _import_from(f, ins):
    f.stack.append(f.dom.import_from(f, f.stack[-1], ins.argval))
