"""Programs: assert, try/except/else/finally (nothing raised, raised and caught, raised and not caught),
exceptions raised by builtins, user exception classes, `with` on user context managers and
contextlib.contextmanager."""
import contextlib

from program_table import A, Table

T = Table("errors")

EVENTS = []


class AppError(Exception):
    def __init__(self, code, detail="none"):
        super().__init__(code, detail)
        self.code = code
        self.detail = detail


class NotFound(AppError):
    pass


# ---------------------------------------------------------------- assert

@T.case((1,), (5,), (0,))
def assert_statement(x):
    assert x >= 0
    assert isinstance(x, int), "needs an int"
    assert x < 3, f"too big: {x}"
    return x * 2


@T.case(([],), ([1],))
def assert_failing_without_message(xs):
    assert xs
    return xs


# ---------------------------------------------------------------- try / except / else / finally

@T.case((2,), (0,), ("s",))
def try_except_else_finally(x):
    log = []
    try:
        log.append("try")
        r = 10 / x
    except ZeroDivisionError as e:
        log.append(("zde", str(e)))
        r = None
    except TypeError:
        log.append("type")
        r = -1
    else:
        log.append("else")
    finally:
        log.append("finally")
    return r, log


@T.case((1,), (2,), (3,), (4,))
def try_raised_not_caught(kind):
    log = []
    try:
        if kind == 1:
            {}["missing"]
        elif kind == 2:
            [][3]
        elif kind == 3:
            None.attr
        log.append("no error")
    except ValueError:
        log.append("never")
    finally:
        log.append("finally ran")
    return log


@T.case((0,), (1,), (2,), (3,), (4,), (5,), (6,))
def builtin_exceptions_caught(kind):
    try:
        if kind == 0:
            return {"a": 1}["b"]
        if kind == 1:
            return [1, 2][5]
        if kind == 2:
            return 1 // 0
        if kind == 3:
            return "a" + 1
        if kind == 4:
            return (1).nope
        if kind == 5:
            return int("12x")
        return {1}.pop() + set().pop()
    except (KeyError, IndexError) as e:
        return "lookup", type(e).__name__, e.args
    except ArithmeticError as e:
        return "arith", type(e).__name__, str(e)
    except (TypeError, AttributeError) as e:
        return "typeish", type(e).__name__, str(e)
    except Exception as e:  # noqa: BLE001 - the catch-all is the behaviour under test
        return "other", type(e).__name__, str(e)


@T.case(({"a": 1}, "b"),)
def builtin_key_error_uncaught(d, k):
    return d[k]


@T.case(([1, 2], 2),)
def builtin_index_error_uncaught(xs, i):
    return xs[i]


@T.case((1, 0),)
def builtin_zero_division_uncaught(a, b):
    return a % b


@T.case((1, "a"),)
def builtin_type_error_uncaught(a, b):
    return a < b


@T.case((1,),)
def builtin_attribute_error_uncaught(a):
    return a.append(2)


@T.case((3,), (-1,), (0,))
def user_exception_raise_catch(code):
    try:
        if code < 0:
            raise NotFound(code, "negative")
        if code == 0:
            raise AppError(code)
        return "ok"
    except NotFound as e:
        return "notfound", e.code, e.detail, e.args, isinstance(e, AppError)
    except AppError as e:
        return "app", e.code, str(e)


@T.case((7,),)
def user_exception_uncaught(code):
    raise NotFound(code, "gone")


@T.case((1,), (2,))
def raise_from_and_context(kind):
    try:
        try:
            {}["k"]
        except KeyError as e:
            if kind == 1:
                raise ValueError("converted") from e
            raise ValueError("implicit")
    except ValueError as v:
        return (str(v), type(v.__cause__).__name__, type(v.__context__).__name__, v.__suppress_context__)


@T.case((1,), (0,))
def reraise_bare(x):
    log = []
    try:
        try:
            1 / x
            log.append("fine")
        except ZeroDivisionError:
            log.append("inner")
            raise
    except ZeroDivisionError:
        log.append("outer")
    return log


@T.case((0,), globals=("EVENTS",))
def reraise_uncaught_after_cleanup(x):
    try:
        return 1 / x
    except ZeroDivisionError:
        EVENTS.append("cleanup")
        raise


@T.case((1,), (0,), globals=("EVENTS",))
def finally_return_overrides(x):
    def inner():
        try:
            if x:
                raise RuntimeError("swallowed")
            return "try-value"
        finally:
            EVENTS.append("finally")
            return "finally-value"  # noqa: B012 - overriding is the behaviour under test
    return inner(), list(EVENTS)


@T.case((3,),)
def finally_in_loop_with_break_continue(n):
    log = []
    for i in range(n):
        try:
            if i == 0:
                continue
            if i == 2:
                break
            log.append(i)
        finally:
            log.append(f"f{i}")
    return log


@T.case((2,), (0,))
def exception_variable_cleared(x):
    e = "before"
    try:
        1 / x
    except ZeroDivisionError as e:  # noqa: F841
        pass
    try:
        return e
    except UnboundLocalError:
        return "cleared"


@T.case((5,),)
def exception_in_nested_call(n):
    def level3(k):
        return [0][k]

    def level2(k):
        return level3(k) + 1

    def level1(k):
        try:
            return level2(k)
        except IndexError as err:
            return ("caught at level1", err.args)
    return level1(0), level1(n)


@T.case((2,),)
def stop_iteration_protocol(n):
    it = iter(range(n))
    out = []
    while True:
        try:
            out.append(next(it))
        except StopIteration:
            break
    return out


# ---------------------------------------------------------------- with statements

class Recorder:
    def __init__(self, log, name, suppress=False):
        self.log = log
        self.name = name
        self.suppress = suppress

    def __enter__(self):
        self.log.append(f"enter {self.name}")
        return self

    def __exit__(self, exc_type, exc, tb):
        self.log.append(f"exit {self.name} {exc_type.__name__ if exc_type else None}")
        return self.suppress


@contextlib.contextmanager
def tagged(log, tag):
    log.append("<" + tag)
    try:
        yield tag.upper()
    except KeyError as e:
        log.append(f"handled {e.args[0]}")
    finally:
        log.append(tag + ">")


@T.case((False,), (True,))
def with_user_context_manager(fail):
    log = []
    with Recorder(log, "a") as r:
        log.append(f"body {r.name}")
        with Recorder(log, "b"), Recorder(log, "c") as c:
            log.append(c.name)
    try:
        with Recorder(log, "d"):
            if fail:
                raise ValueError("boom")
            log.append("d body")
    except ValueError:
        log.append("caught")
    return log


@T.case((True,), (False,))
def with_suppressing_exit(suppress):
    log = []
    try:
        with Recorder(log, "s", suppress=suppress):
            log.append("before")
            {}["x"]
            log.append("unreachable")
        log.append("after with")
    except KeyError:
        log.append("propagated")
    return log


@T.case((0,), (1,), (2,))
def with_contextmanager_decorator(kind):
    log = []
    try:
        with tagged(log, "t") as t:
            log.append(t)
            if kind == 1:
                raise KeyError("k")
            if kind == 2:
                raise ValueError("v")
    except ValueError:
        log.append("value error escaped")
    return log


@T.case(([],),)
def with_return_inside(log):
    def f():
        with Recorder(log, "r"):
            return "from body"
    return f(), log


@T.case((["x"],),)
def with_on_argument_recorded(log):
    with Recorder(log, "arg"):
        log.append("inside")
    with contextlib.suppress(IndexError):
        log.append([][1])
    with contextlib.nullcontext(5) as five:
        log.append(five)
    return len(log)


@T.case((False,), (True,))
def with_exception_uncaught(fail):
    log = []
    with Recorder(log, "u"):
        if fail:
            raise AppError(42)
    return log


@T.case((1,),)
def exit_stack_usage(n):
    log = []
    with contextlib.ExitStack() as stack:
        for i in range(n + 2):
            stack.enter_context(Recorder(log, str(i)))
        stack.callback(log.append, "callback")
    return log


@T.case(A(3, d={"k": 1}),)
def try_except_on_kwarg_dict(n, d):
    out = []
    for key in ("k", "j"):
        try:
            out.append(d[key] * n)
        except KeyError as e:
            d[e.args[0]] = 0
            out.append(("added", e.args[0]))
    return out


# ---------------------------------------------------------------- exception chaining

def chain_of(e):
    out = []
    while e is not None:
        out.append((type(e).__name__, e.__cause__ is not None, e.__suppress_context__))
        e = e.__context__
    return out


def reraise_current():
    raise                               # re-raises the exception the caller is handling


def fail_fresh(kind):
    return {"k": 1}[kind]               # raises KeyError inside the caller's except block


@T.case(([],), ([7],))
def implicit_context_from_builtin_error(xs):
    try:
        try:
            1 / len(xs) / 0
        except ZeroDivisionError:
            xs[5]
    except IndexError as e:
        return chain_of(e)


@T.case(("x",),)
def raise_from_none_suppresses_context(tag):
    try:
        try:
            int(tag)
        except ValueError:
            raise KeyError(tag) from None
    except KeyError as e:
        return chain_of(e), e.__cause__


@T.case((1,), (2,))
def raise_from_class_or_bad_cause(kind):
    try:
        try:
            raise ValueError("inner")
        except ValueError:
            if kind == 1:
                raise RuntimeError("outer") from KeyError
            raise RuntimeError("outer") from 5
    except (RuntimeError, TypeError) as e:
        return type(e).__name__, chain_of(e), type(e.__cause__).__name__


@T.case(("a",),)
def bare_raise_in_callee_reraises_caller_exception(tag):
    try:
        try:
            raise AppError(tag)
        except AppError:
            reraise_current()
    except AppError as e:
        return e.code, chain_of(e)


@T.case(("j",), ("k",))
def callee_error_chains_to_caller_exception(kind):
    try:
        try:
            raise AppError("first")
        except AppError:
            return fail_fresh(kind)
    except KeyError as e:
        return chain_of(e)


@T.case((3,),)
def reraised_exception_keeps_its_context(n):
    saved = None
    try:
        try:
            raise ValueError(n)
        except ValueError as e:
            saved = e
            raise
    except ValueError:
        pass
    try:
        raise saved
    except ValueError as e:
        return chain_of(e)


@T.case((0,), (1,))
def exception_in_finally_chains(kind):
    try:
        try:
            if kind:
                raise KeyError("body")
        finally:
            [][0]
    except IndexError as e:
        return chain_of(e)


@T.case(([1, 2],),)
def next_on_a_list_is_a_type_error(xs):
    try:
        next(xs)
    except TypeError:
        return "TypeError"


@T.case((1,), (2,))
def with_reraise_leaves_no_handled_exception(n):
    log = []
    try:
        with Recorder(log, "a"):
            raise KeyError(n)
    except KeyError:
        log.append("caught")
    with Recorder(log, "b", suppress=True):
        raise ValueError(n)
    try:
        raise IndexError(n)
    except IndexError as e:
        log.append(type(e.__context__).__name__)
    return log
