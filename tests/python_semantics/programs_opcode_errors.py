"""Programs: errors that CPython's eval loop raises itself (not a builtin function), caught and returned so
that their type and message are compared: unpacking, `*`/`**` arguments and displays, `except` clauses
naming non-exceptions, unbound cells, failed `from ... import`, and binding arguments to parameters."""
import itertools

from program_table import Table

T = Table("opcode_errors")


def params(a, b, /, c, d=1, *, e, f=2):
    return a, b, c, d, e, f


def star(*args, **kwargs):
    return args, kwargs


class KeysOnly:
    def keys(self):
        return ["b"]

    def __getitem__(self, k):
        return k * 2


class Indexed:
    def __getitem__(self, i):
        if i < 3:
            return i
        raise IndexError(i)


def caught(fn, *args, **kwargs):
    try:
        return "ok", fn(*args, **kwargs)
    except (TypeError, ValueError, NameError, ImportError) as e:
        return type(e).__name__, str(e)


def unpack_two(v):
    a, b = v
    return a, b


def unpack_star(v):
    a, *b, c = v
    return a, b, c


@T.case(([1, 2, 3],), ((1,),), (5,), ("ab",), (Indexed(),), ({"k": 1, "j": 2},))
def unpacking_errors(v):
    return caught(unpack_two, v), caught(unpack_star, v), caught(unpack_two, itertools.count())


@T.case((1,), (2,), (3,), (4,), (5,))
def star_and_double_star_errors(kind):
    if kind == 1:
        return caught(lambda: star(*5))
    if kind == 2:
        return caught(lambda: star(1, **{"a": 1}, **{"a": 2}))
    if kind == 3:
        return caught(lambda: star(**5))
    if kind == 4:
        return caught(lambda: [*None]), caught(lambda: {**3}), caught(lambda: (*1.5,))
    return caught(lambda: star(*Indexed(), **KeysOnly())), caught(lambda: star(**{1: 2}))


@T.case((1,), (2,), (3,))
def except_clause_naming_a_non_exception(kind):
    def run():
        try:
            raise KeyError(kind)
        except (KeyError if kind == 1 else "KeyError" if kind == 2 else (ValueError, 3)):
            return "caught"
    return caught(run)


@T.case((True,), (False,))
def unbound_cells(define):
    def read_free():
        return later

    def delete_own():
        x = 1
        del x

        def use():
            return x
        return use()
    out = [caught(read_free)]
    if define:
        later = 1
        out.append(read_free())
    out.append(caught(delete_own))
    return out


@T.case(("sep",), ("no_such_name",))
def from_import_errors(name):
    def run():
        if name == "sep":
            from os import sep
            return sep
        from os import no_such_name
        return no_such_name
    kind, msg = caught(run)
    return kind, msg.split(" (")[0]


@T.case((1,), (2,), (3,), (4,), (5,), (6,), (7,), (8,))
def binding_errors(kind):
    calls = {1: lambda: params(1), 2: lambda: params(e=1), 3: lambda: params(1, 2, 3, 4, 5, e=1),
             4: lambda: params(1, 2, 3, a=1, e=2), 5: lambda: params(1, 2, 3, c=1, e=2),
             6: lambda: params(1, 2, 3, zz=1, e=2), 7: lambda: params(1, 2, 3, 4, 5, 6),
             8: lambda: params(1, 2, 3)}
    return caught(calls[kind])
