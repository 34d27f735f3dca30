"""Opcode handlers: stack, locals, constants, globals, attributes, operators and jumps."""
from __future__ import annotations

from .bytecode import since
from .interpreter import NULL, Return, UserException
from .registry import register_opcode as op

_NAME_ERR = "name '{}' is not defined"


@op("NOP", "RESUME", "PRECALL", "CACHE", "EXTENDED_ARG", "COPY_FREE_VARS")
def _nop(f, ins):
    return None


@op("END_SEND", min_version=(3, 12))
def _end_send(f, ins):
    del f.stack[-2]     # (receiver, value -- value)


@op("POP_TOP")
def _pop_top(f, ins):
    f.stack.pop()


@op("END_FOR", min_version=(3, 12), max_version=(3, 12))
def _end_for_312(f, ins):
    del f.stack[-2:]


@op("END_FOR", min_version=(3, 13))
def _end_for_313(f, ins):
    f.stack.pop()


@op("PUSH_NULL")
def _push_null(f, ins):
    f.stack.append(NULL)


@op("COPY")
def _copy(f, ins):
    f.stack.append(f.stack[-ins.arg])


@op("SWAP")
def _swap(f, ins):
    st = f.stack
    st[-1], st[-ins.arg] = st[-ins.arg], st[-1]


@op("LOAD_CONST")
def _load_const(f, ins):
    f.stack.append(f.dom.const(ins.argval))


@op("RETURN_VALUE")
def _return_value(f, ins):
    return Return(f.stack.pop())


@op("RETURN_CONST", min_version=(3, 12))
def _return_const(f, ins):
    return Return(f.dom.const(ins.argval))


# -- locals --------------------------------------------------------------------------------------------
def _load_fast(f, name):
    try:
        return f.locals[name]
    except KeyError:
        raise UserException(UnboundLocalError(
            f"cannot access local variable '{name}' where it is not associated with a value")) from None


@op("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_CLOSURE")
def _load_fast_op(f, ins):
    f.stack.append(_load_fast(f, ins.argval))


@op("LOAD_FAST_AND_CLEAR", min_version=(3, 12))
def _load_fast_and_clear(f, ins):
    f.stack.append(f.locals.pop(ins.argval, NULL))


@op("LOAD_FAST_LOAD_FAST", min_version=(3, 13))
def _load_fast_load_fast(f, ins):
    a, b = ins.argval
    f.stack.append(_load_fast(f, a))
    f.stack.append(_load_fast(f, b))


def _store(f, name: str, v) -> None:
    if v is NULL:       # LOAD_FAST_AND_CLEAR's value restored: the name is unbound again
        f.locals.pop(name, None)
    else:
        f.locals[name] = v


@op("STORE_FAST")
def _store_fast(f, ins):
    _store(f, ins.argval, f.stack.pop())


@op("STORE_FAST_LOAD_FAST", min_version=(3, 13))
def _store_fast_load_fast(f, ins):
    a, b = ins.argval
    _store(f, a, f.stack.pop())
    f.stack.append(_load_fast(f, b))


@op("STORE_FAST_STORE_FAST", min_version=(3, 13))
def _store_fast_store_fast(f, ins):
    a, b = ins.argval
    _store(f, a, f.stack.pop())
    _store(f, b, f.stack.pop())


@op("DELETE_FAST")
def _delete_fast(f, ins):
    _load_fast(f, ins.argval)
    del f.locals[ins.argval]


# -- cells ---------------------------------------------------------------------------------------------
@op("MAKE_CELL")
def _make_cell(f, ins):
    f.locals[ins.argval] = f.dom.new_cell(f.locals.get(ins.argval, NULL))


def _unbound_cell(f, name: str) -> UserException:
    """CPython's ``format_exc_unbound``: a cell of this frame is a local, a free variable is not."""
    if name in f.code.co_cellvars:
        return UserException(UnboundLocalError(
            f"cannot access local variable '{name}' where it is not associated with a value"))
    return UserException(NameError(
        f"cannot access free variable '{name}' where it is not associated with a value in enclosing scope"))


@op("LOAD_DEREF", "LOAD_CLASSDEREF")
def _load_deref(f, ins):
    v = f.dom.cell_get(f.locals[ins.argval])
    if v is NULL:
        raise _unbound_cell(f, ins.argval)
    f.stack.append(v)


@op("STORE_DEREF")
def _store_deref(f, ins):
    f.dom.cell_set(f.locals[ins.argval], f.stack.pop())


@op("DELETE_DEREF")
def _delete_deref(f, ins):
    cell = f.locals[ins.argval]
    if f.dom.cell_get(cell) is NULL:
        raise _unbound_cell(f, ins.argval)
    f.dom.cell_set(cell, NULL)


# -- globals -------------------------------------------------------------------------------------------
def _push_global(f, ins, value):
    # low bit of the oparg: also push NULL (before the global up to 3.12, after it from 3.13)
    if not ins.arg & 1:
        f.stack.append(value)
    else:
        _push_with_null(f, value, "LOAD_GLOBAL with NULL")


def _push_with_null(f, value, what: str) -> None:
    """A callable and the call protocol's NULL/self slot: [NULL, value] up to 3.12, [value, NULL] from 3.13."""
    if since((3, 13), what):
        f.stack.append(value)
        f.stack.append(NULL)
    else:
        f.stack.append(NULL)
        f.stack.append(value)


@op("LOAD_GLOBAL")
def _load_global(f, ins):
    _push_global(f, ins, f.dom.load_global(f, ins.argval))


@op("STORE_GLOBAL")
def _store_global(f, ins):
    f.dom.store_global(f, ins.argval, f.stack.pop())


@op("DELETE_GLOBAL")
def _delete_global(f, ins):
    f.dom.delete_global(f, ins.argval)


@op("LOAD_NAME")
def _load_name(f, ins):
    f.stack.append(f.dom.load_global(f, ins.argval))


# -- attributes ----------------------------------------------------------------------------------------
@op("LOAD_ATTR", max_version=(3, 11))
def _load_attr_311(f, ins):
    f.stack.append(f.dom.getattr(f, f.stack.pop(), ins.argval))


@op("LOAD_METHOD", max_version=(3, 11))
def _load_method_311(f, ins):
    obj = f.stack.pop()
    f.stack.append(NULL)
    f.stack.append(f.dom.getattr(f, obj, ins.argval))


@op("LOAD_ATTR", min_version=(3, 12))
def _load_attr_312(f, ins):
    obj = f.stack.pop()
    v = f.dom.getattr(f, obj, ins.argval)
    if ins.arg & 1:     # method form: [NULL, attr] on 3.12, [attr, NULL] on 3.13
        _push_with_null(f, v, "LOAD_ATTR method form")
    else:
        f.stack.append(v)


@op("LOAD_SUPER_ATTR", min_version=(3, 12))
def _load_super_attr(f, ins):
    self_, cls = f.stack.pop(), f.stack.pop()
    global_super = f.stack.pop()
    d = f.dom
    if d.truth(f, d.is_(f, global_super, d.builtin("super"), False)):
        sup = d.make_super(f, cls, self_)
    else:       # `super` is shadowed: call whatever it is, as CPython does (no arguments for `super().x`)
        sup = d.call(f, global_super, [cls, self_] if ins.arg & 2 else [], {})
    v = d.getattr(f, sup, ins.argval)
    if ins.arg & 1:
        _push_with_null(f, v, "LOAD_SUPER_ATTR method form")
    else:
        f.stack.append(v)


@op("STORE_ATTR")
def _store_attr(f, ins):
    obj = f.stack.pop()
    val = f.stack.pop()
    f.dom.setattr(f, obj, ins.argval, val)


@op("DELETE_ATTR")
def _delete_attr(f, ins):
    f.dom.delattr(f, f.stack.pop(), ins.argval)


# -- operators -----------------------------------------------------------------------------------------
@op("BINARY_OP")
def _binary_op(f, ins):
    b = f.stack.pop()
    a = f.stack.pop()
    f.stack.append(f.dom.binary(f, ins.argrepr, a, b))


@op("COMPARE_OP")
def _compare_op(f, ins):
    b = f.stack.pop()
    a = f.stack.pop()
    r = f.dom.compare(f, ins.argval, a, b)
    if ins.arg & 16 and since((3, 13), "COMPARE_OP bool coercion"):     # 3.13: result coerced to bool
        r = f.dom.to_bool(f, r)
    f.stack.append(r)


@op("IS_OP")
def _is_op(f, ins):
    b = f.stack.pop()
    a = f.stack.pop()
    f.stack.append(f.dom.is_(f, a, b, bool(ins.arg)))


@op("CONTAINS_OP")
def _contains_op(f, ins):
    b = f.stack.pop()
    a = f.stack.pop()
    f.stack.append(f.dom.contains(f, a, b, bool(ins.arg)))


_UNARY = {"UNARY_NEGATIVE": "-", "UNARY_POSITIVE": "+", "UNARY_INVERT": "~", "UNARY_NOT": "not"}


@op(*_UNARY)
def _unary(f, ins):
    f.stack.append(f.dom.unary(f, _UNARY[ins.opname], f.stack.pop()))


@op("TO_BOOL", min_version=(3, 13))
def _to_bool(f, ins):
    f.stack.append(f.dom.to_bool(f, f.stack.pop()))


@op("BINARY_SUBSCR")
def _binary_subscr(f, ins):
    k = f.stack.pop()
    o = f.stack.pop()
    f.stack.append(f.dom.getitem(f, o, k))


@op("STORE_SUBSCR")
def _store_subscr(f, ins):
    k = f.stack.pop()
    o = f.stack.pop()
    v = f.stack.pop()
    f.dom.setitem(f, o, k, v)


@op("DELETE_SUBSCR")
def _delete_subscr(f, ins):
    k = f.stack.pop()
    o = f.stack.pop()
    f.dom.delitem(f, o, k)


@op("BINARY_SLICE", min_version=(3, 12))
def _binary_slice(f, ins):
    stop, start = f.stack.pop(), f.stack.pop()
    o = f.stack.pop()
    f.stack.append(f.dom.getitem(f, o, f.dom.build_slice(f, [start, stop])))


@op("STORE_SLICE", min_version=(3, 12))
def _store_slice(f, ins):
    stop, start = f.stack.pop(), f.stack.pop()
    o = f.stack.pop()
    v = f.stack.pop()
    f.dom.setitem(f, o, f.dom.build_slice(f, [start, stop]), v)


@op("BUILD_SLICE")
def _build_slice(f, ins):
    f.stack.append(f.dom.build_slice(f, f.popn(ins.arg)))


# -- jumps ---------------------------------------------------------------------------------------------
@op("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT")
def _jump(f, ins):
    f.ip = ins.jump_target


@op("POP_JUMP_IF_TRUE", "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE")
def _pop_jump_if_true(f, ins):
    if f.dom.truth(f, f.stack.pop()):
        f.ip = ins.jump_target


@op("POP_JUMP_IF_FALSE", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE")
def _pop_jump_if_false(f, ins):
    if not f.dom.truth(f, f.stack.pop()):
        f.ip = ins.jump_target


@op("POP_JUMP_IF_NONE", "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NONE")
def _pop_jump_if_none(f, ins):
    if f.dom.is_none(f, f.stack.pop()):
        f.ip = ins.jump_target


@op("POP_JUMP_IF_NOT_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE")
def _pop_jump_if_not_none(f, ins):
    if not f.dom.is_none(f, f.stack.pop()):
        f.ip = ins.jump_target


@op("JUMP_IF_TRUE_OR_POP", max_version=(3, 11))
def _jump_if_true_or_pop(f, ins):
    if f.dom.truth(f, f.stack[-1]):
        f.ip = ins.jump_target
    else:
        f.stack.pop()


@op("JUMP_IF_FALSE_OR_POP", max_version=(3, 11))
def _jump_if_false_or_pop(f, ins):
    if not f.dom.truth(f, f.stack[-1]):
        f.ip = ins.jump_target
    else:
        f.stack.pop()
