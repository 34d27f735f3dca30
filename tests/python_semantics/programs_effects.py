"""Programs: side effects on objects that existed before the call, replayed after a compiled call: deletions
(dict keys, attributes, slots, globals), writes whose new values come from other changed objects, and
mutating functions called through dict methods and the operator module."""
import operator

from program_table import A, Table

T = Table("effects")

TABLE_G = {"a": 1, "b": 2}
COUNT_G = 5
oct = "shadows the builtin"     # noqa: A001 - deleting this global makes `oct` the builtin again


class Box:
    def __init__(self, v):
        self.v = v


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a):
        self.a = a


@T.case(([1, 2], [3, 4]), ([0], [9]))
def swap_first_items(a, b):
    x = a[0]
    a[0] = b[0]
    b[0] = x
    return a[0] + b[0]


@T.case(({"x": 1, "y": 2}, [10, 20]),)
def values_moved_between_containers(d, xs):
    d["x"], xs[0] = xs[0], d["x"]
    d.pop("y")
    xs.append(d)
    return len(xs)


@T.case((Box(1), Box(2)),)
def attributes_swapped_and_deleted(p, q):
    p.v, q.v = q.v, p.v
    p.extra = [p.v]
    del q.v
    return hasattr(q, "v"), p.extra


@T.case(({"k": 1, "j": 2},),)
def dict_deletions_then_reads(d):
    del d["k"]
    r = d.pop("j")
    d["k"] = r + 1
    d.setdefault("z", 0)
    del d["z"]
    return sorted(d.items()), "z" in d


@T.case(({"k": 1},), ({},))
def dict_methods_called_through_the_type(d):
    dict.update(d, {"a": 1})
    dict.setdefault(d, "b", [2])
    v = dict.pop(d, "k", None)
    dict.__setitem__(d, "c", v)
    return dict.get(d, "c"), dict.copy(d)


@T.case(([1, 2],),)
def operator_mutating_functions(xs):
    ys = operator.iconcat(xs, [3])
    operator.delitem(xs, 0)
    operator.setitem(xs, 0, "s")
    operator.iadd(xs, (9,))
    return ys is xs, operator.concat(xs, [0]), operator.iconcat((1,), (2,))


@T.case((3,), globals=("COUNT_G", "oct"))
def global_deleted_then_rebound(n):
    global COUNT_G, oct
    before = COUNT_G
    del COUNT_G
    try:
        COUNT_G
    except NameError:
        missing = True
    del oct
    as_builtin = oct(8)
    COUNT_G = before + n
    return missing, as_builtin, COUNT_G


@T.case(("a",), ("zz",), globals=("TABLE_G",))
def global_dict_key_deleted(key):
    try:
        del TABLE_G[key]
    except KeyError:
        return "missing", dict(TABLE_G)
    TABLE_G["n"] = len(TABLE_G)
    return "deleted", dict(TABLE_G)


@T.case((Slotted(1),), (Slotted(5),))
def slots_set_delete_and_missing(s):
    s.b = s.a + 1
    del s.a
    out = [hasattr(s, "a"), s.b]
    try:
        del s.a
    except AttributeError:
        out.append("no a")
    try:
        s.c = 1
    except AttributeError:
        out.append("no c")
    s.a = 7
    return out, hasattr(s, "__dict__")


@T.case((Box(3),),)
def attribute_added_then_deleted_then_missing(b):
    b.tmp = 1
    del b.tmp
    try:
        del b.tmp
    except AttributeError:
        return "gone twice", hasattr(b, "tmp"), b.v


@T.case(A([1], key="k"),)
def kwargs_dict_and_list_swapped(xs, **kw):
    kw["xs"] = xs
    xs.append(kw.pop("key"))
    return kw, xs


@T.case(({"k": [0]}, ([9], 1)),)
def builtin_results_alias_their_arguments(d, t):
    x = dict.get(d, "k")
    x.append(1)
    y = tuple.__getitem__(t, 0)
    y.append(2)
    z = dict.copy(d)
    z["k"].append(3)
    return z["k"] is d["k"], max([t[0], [0]]) is t[0]
