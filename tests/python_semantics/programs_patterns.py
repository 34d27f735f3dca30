"""Programs: structural pattern matching beyond the basics (mapping and sequence kinds, class patterns with
__match_args__, keyword and self-matching sub-patterns, the errors CPython raises), and classes and annotated
functions defined inside a function."""
import collections
import collections.abc

from program_table import Table

T = Table("patterns")


class Pt:
    __match_args__ = ("x", "y")

    def __init__(self, x, y):
        self.x = x
        self.y = y

    @property
    def norm1(self):
        return abs(self.x) + abs(self.y)


class NoArgs:
    pass


class BadArgs:
    __match_args__ = ["x"]
    x = 1


class Frozen(collections.abc.Mapping):
    def __init__(self, **kw):
        self._d = dict(kw)

    def __getitem__(self, k):
        return self._d[k]

    def __iter__(self):
        return iter(self._d)

    def __len__(self):
        return len(self._d)


def describe(v):
    match v:
        case {"kind": "pt", "x": int(x), **rest}:
            return ("pt-map", x, sorted(rest))
        case Pt(0, y=0):
            return "origin"
        case Pt(x, y) if x == y:
            return ("diag", x)
        case Pt(norm1=n) if n > 10:
            return ("far", n)
        case Pt(x=x):
            return ("pt", x)
        case str() | bytes():
            return ("text", len(v))
        case [int(a), *_, int(b)]:
            return ("ends", a, b)
        case (x,):
            return ("single", x)
        case float(f) | int(f):
            return ("num", f)
        case _:
            return ("other", type(v).__name__)


@T.case((Pt(0, 0),), (Pt(3, 3),), (Pt(9, 4),), (Pt(1, 2),), ({"kind": "pt", "x": 1, "z": 0},), ({1, 2},))
def match_objects_and_mappings(v):
    return describe(v)


@T.case(("ab",), (b"xyz",), ([1, "m", 2],), ((7,),), (range(3),), (2.5,), (True,))
def match_builtin_values(v):
    return describe(v)


@T.case((Frozen(a=1, b=2),), (collections.OrderedDict(a=5),), (collections.defaultdict(list, a=3),))
def match_mapping_kinds(m):
    match m:
        case {"a": 1, "b": b}:
            out = ("ab", b)
        case {"a": a}:
            out = ("a", a)
        case _:
            out = "none"
    return out, len(m), "missing" in m


@T.case((collections.deque([1, 2, 3]),), ("abc",), ((1, 2),), (bytearray(b"ab"),))
def match_sequence_kinds(s):
    match s:
        case [first, *rest]:
            return ("seq", first, len(rest))
        case _:
            return "not a sequence"


@T.case((1,), (2,), (3,), (4,))
def match_class_pattern_errors(kind):
    try:
        match Pt(1, 2) if kind < 3 else 5:
            case Pt(a, b, c) if kind == 1:
                return "three"
            case NoArgs(a) if kind == 2:
                return "noargs"
            case BadArgs(a) if kind == 3:
                return "bad"
            case int(a, b):
                return "two"
    except TypeError as e:
        return "TypeError", str(e)


@T.case((Pt(1, 2),),)
def match_class_keyword_twice_errors(p):
    try:
        match p:
            case Pt(x, x=1):
                return "matched"
    except TypeError:
        return "TypeError"


@T.case((4,),)
def class_with_super_and_closure(n):
    class Base:
        def __init__(self, k):
            self.k = k

        def total(self):
            return self.k

    class Child(Base):
        bonus = n

        def total(self):
            return super().total() + self.bonus

    objs = [Child(i) for i in range(2)]
    return [o.total() for o in objs], Child.__mro__[1].__name__, isinstance(objs[0], Base)


@T.case((2,),)
def class_with_init_subclass_kwargs(n):
    seen = []

    class Registry:
        def __init_subclass__(cls, tag=None, **kw):
            super().__init_subclass__(**kw)
            seen.append((cls.__name__, tag))

    class A(Registry, tag="a"):
        pass

    class B(A, tag=n):
        pass

    return seen, B.__qualname__.split(".")[-1]


class Interned:
    made = 0

    def __new__(cls, v):
        self = super().__new__(cls)
        self.v = v
        return self

    def __init__(self, v):
        self.w = v * 2


class Bare:
    def __init__(self):
        self.ran_init = True


@T.case((3,),)
def custom_new_calls_object_new(v):
    a = Interned(v)
    b = object.__new__(Bare)
    try:
        object.__new__(5)
    except TypeError:
        err = "TypeError"
    return a.v, a.w, hasattr(b, "ran_init"), type(b).__name__, err


@T.case((2,),)
def nested_function_annotations_and_defaults(n):
    def inner(a: int, b: "list[str]" = None, *, c: float = 1.5) -> str:
        return f"{a}{b}{c}"

    return inner.__annotations__, inner.__defaults__, inner.__kwdefaults__, inner(n)
