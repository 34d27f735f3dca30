"""Programs: `except*` on exception groups and on plain exceptions: splitting, re-raising the matched part,
raising from a clause, and what propagates out of the statement."""
from program_table import Table

T = Table("groups")


def shape(e):
    """A comparable description of an exception (group) tree."""
    if isinstance(e, BaseExceptionGroup):
        return (type(e).__name__, e.message, [shape(x) for x in e.exceptions])
    return (type(e).__name__, e.args)


def raiser(kind):
    if kind == "group":
        raise ExceptionGroup("g", [ValueError(1), TypeError(2), ExceptionGroup("inner", [ValueError(3)])])
    if kind == "naked":
        raise ValueError("naked")
    if kind == "other":
        raise KeyError("other")
    return "no error"


@T.case(("group",), ("naked",), ("other",), ("none",))
def except_star_split(kind):
    log = []
    try:
        try:
            log.append(raiser(kind))
        except* ValueError as eg:
            log.append(("value", shape(eg)))
        except* TypeError as eg:
            log.append(("type", shape(eg)))
    except BaseException as e:      # noqa: BLE001 - what the statement lets through
        log.append(("escaped", shape(e)))
    return log


@T.case(("group",), ("naked",))
def except_star_reraise_matched_part(kind):
    try:
        try:
            raiser(kind)
        except* ValueError:
            raise
        except* TypeError:
            pass
    except BaseException as e:      # noqa: BLE001
        return shape(e)


@T.case(("group",), ("naked",))
def except_star_clause_raises_new(kind):
    try:
        try:
            raiser(kind)
        except* ValueError as eg:
            raise RuntimeError(len(eg.exceptions))
    except BaseException as e:      # noqa: BLE001
        return shape(e), type(e.__context__).__name__ if not isinstance(e, BaseExceptionGroup) else None


@T.case((1,),)
def except_star_naming_a_group_is_an_error(n):
    out = "not caught"
    try:
        try:
            raise ValueError(n)
        except* ExceptionGroup:
            out = "caught"
    except TypeError as e:
        return "TypeError", str(e)
    return out


@T.case(("group",), ("none",))
def except_star_with_else_and_finally(kind):
    log = []
    try:
        try:
            raiser(kind)
        except* (ValueError, TypeError) as eg:
            log.append(shape(eg))
        else:
            log.append("else")
        finally:
            log.append("finally")
    except BaseException as e:      # noqa: BLE001
        log.append(("escaped", shape(e)))
    return log
