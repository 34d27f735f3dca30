"""Programs: attributes, properties, descriptors, classmethods/staticmethods, super(), dunder methods,
namedtuples, dataclasses, enums, side effects on arguments, instances created inside and returned."""
import collections
import dataclasses
import enum
from collections import namedtuple
from dataclasses import dataclass, field
from typing import NamedTuple

from program_table import A, Table

T = Table("objects")


# ---------------------------------------------------------------- classes used by the programs

class Counter:
    instances = 0
    label = "counter"

    def __init__(self, start=0):
        self.value = start
        Counter.instances += 1

    def inc(self, by=1):
        self.value += by
        return self

    @property
    def doubled(self):
        return self.value * 2

    @property
    def clamped(self):
        return self._clamped

    @clamped.setter
    def clamped(self, v):
        self._clamped = max(0, min(10, v))

    @clamped.deleter
    def clamped(self):
        del self._clamped

    @classmethod
    def from_pair(cls, a, b):
        return cls(a + b)

    @staticmethod
    def combine(a, b):
        return a * 10 + b

    def __repr__(self):
        return f"Counter({self.value})"

    def __eq__(self, other):
        return isinstance(other, Counter) and self.value == other.value

    __hash__ = None


class Positive:
    """A data descriptor that validates and stores under a private name."""

    def __set_name__(self, owner, name):
        self.private = "_" + name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return getattr(obj, self.private, 0)

    def __set__(self, obj, value):
        if value < 0:
            raise ValueError(f"{self.private[1:]} must be >= 0, got {value}")
        setattr(obj, self.private, value)


class Constant:
    """A non-data descriptor: an instance attribute shadows it."""

    def __init__(self, v):
        self.v = v

    def __get__(self, obj, objtype=None):
        return self.v if obj is not None else ("class access", self.v)


class Account:
    balance = Positive()
    fee = Constant(2)

    def __init__(self, balance):
        self.balance = balance


class Base:
    def __init__(self, x):
        self.x = x
        self.trail = ["Base"]

    def describe(self):
        return f"Base({self.x})"

    def scale(self):
        return 1

    @classmethod
    def kind(cls):
        return cls.__name__


class Middle(Base):
    def __init__(self, x, y):
        super().__init__(x)
        self.y = y
        self.trail.append("Middle")

    def describe(self):
        return "Middle/" + super().describe()

    def scale(self):
        return super().scale() * 2


class Leaf(Middle):
    def __init__(self, x, y, z):
        super(Leaf, self).__init__(x, y)
        self.z = z
        self.trail.append("Leaf")

    def describe(self):
        return "Leaf/" + super().describe()

    def scale(self):
        return super(Middle, self).scale() + super().scale() * 10

    @classmethod
    def kind(cls):
        return "leaf:" + super().kind()


class Vec:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __add__(self, o):
        return Vec(self.x + o.x, self.y + o.y)

    def __mul__(self, k):
        return Vec(self.x * k, self.y * k)

    __rmul__ = __mul__

    def __neg__(self):
        return Vec(-self.x, -self.y)

    def __eq__(self, o):
        return isinstance(o, Vec) and (self.x, self.y) == (o.x, o.y)

    def __lt__(self, o):
        return (self.x, self.y) < (o.x, o.y)

    def __abs__(self):
        return (self.x ** 2 + self.y ** 2) ** 0.5

    def __iter__(self):
        yield self.x
        yield self.y

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return (self.x, self.y)[i]

    def __contains__(self, v):
        return v in (self.x, self.y)

    def __bool__(self):
        return bool(self.x or self.y)

    def __call__(self, k):
        return self.x * k + self.y

    def __repr__(self):
        return f"Vec({self.x}, {self.y})"

    __hash__ = None


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a):
        self.a = a


class Dynamic:
    def __getattr__(self, name):
        if name.startswith("dyn_"):
            return name[4:]
        raise AttributeError(name)


Pair = namedtuple("Pair", ["left", "right"])
Triple = namedtuple("Triple", "a b c", defaults=(0,))


class Pt(NamedTuple):
    x: int
    y: int = 0

    def norm1(self):
        return abs(self.x) + abs(self.y)


@dataclass
class Item:
    name: str
    qty: int = 1
    tags: list = field(default_factory=list)

    def total(self, price):
        return self.qty * price

    def tag(self, t):
        self.tags.append(t)
        return self


@dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int = 0


@dataclass
class Derived(Item):
    extra: float = 0.5

    def __post_init__(self):
        self.extra = self.extra * 2


class Color(enum.Enum):
    RED = 1
    GREEN = 2
    BLUE = 3

    def is_warm(self):
        return self is Color.RED


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 5


class Perm(enum.Flag):
    R = 4
    W = 2
    X = 1


# ---------------------------------------------------------------- attributes, properties, descriptors

@T.case((3,), (0,))
def attr_instance_and_class(v):
    c = Counter(v)
    c.inc().inc(5)
    c.extra = "e"
    return c.value, c.label, Counter.label, c.doubled, c.extra, type(c).__name__, c


@T.case((5,), (-3,), (42,))
def attr_property_setter_deleter(v):
    c = Counter()
    c.clamped = v
    got = c.clamped
    del c.clamped
    return got, hasattr(c, "_clamped"), hasattr(c, "clamped")


@T.case((2,),)
def attr_property_no_setter_error(v):
    c = Counter(v)
    c.doubled = 3
    return c


@T.case((1, 2), (0, 0))
def attr_classmethod_staticmethod(a, b):
    c = Counter.from_pair(a, b)
    d = c.from_pair(b, b)
    return c.value, d.value, Counter.combine(a, b), c.combine(b, a), type(d) is Counter


@T.case((10,), (0,))
def attr_data_descriptor(v):
    acct = Account(v)
    acct.balance = acct.balance + 5
    return acct.balance, acct._balance, Account.fee, acct.fee, vars(acct)


@T.case((-1,),)
def attr_data_descriptor_raises(v):
    return Account(v).balance


@T.case((7,),)
def attr_nondata_descriptor_shadowed(v):
    acct = Account(1)
    before = acct.fee
    acct.fee = v
    return before, acct.fee, Account.fee


@T.case(("dyn_hello",), ("missing",))
def attr_getattr_hook(name):
    d = Dynamic()
    return getattr(d, name, "fallback"), hasattr(d, name)


@T.case((1,),)
def attr_slots(v):
    s = Slotted(v)
    s.b = v + 1
    try:
        s.c = 3
    except AttributeError:
        blocked = True
    return s.a, s.b, blocked, hasattr(s, "__dict__")


@T.case((1,),)
def attr_missing_attribute_error(v):
    c = Counter(v)
    return c.no_such_attribute


@T.case((2, 3),)
def attr_bound_method_objects(a, b):
    c = Counter(a)
    m = c.inc
    m(b)
    m(b)
    unbound = Counter.inc
    unbound(c, 100)
    return c.value, m.__self__ is c, m.__func__ is Counter.inc


# ---------------------------------------------------------------- super() and inheritance

@T.case((1, 2, 3),)
def super_multi_level(x, y, z):
    leaf = Leaf(x, y, z)
    mid = Middle(x, y)
    return (leaf.describe(), mid.describe(), leaf.scale(), mid.scale(), leaf.trail, Leaf.kind(),
            Middle.kind(), isinstance(leaf, Base), issubclass(Leaf, Middle),
            [k.__name__ for k in Leaf.__mro__])


@T.case((4,),)
def super_two_arg_explicit(x):
    leaf = Leaf(x, x, x)
    return super(Leaf, leaf).describe(), super(Middle, leaf).describe(), super(Leaf, Leaf).kind()


class Greeter:
    def greet(self):
        return "hello"


class LoudGreeter(Greeter):
    def greet(self):
        return super().greet().upper() + "!"


class MixinA:
    def who(self):
        return ["A"] + super().who()


class MixinB:
    def who(self):
        return ["B"] + super().who()


class Root:
    def who(self):
        return ["Root"]


class Diamond(MixinA, MixinB, Root):
    def who(self):
        return ["D"] + super().who()


@T.case(("x",),)
def super_cooperative_mro(tag):
    return Diamond().who(), LoudGreeter().greet(), tag


# ---------------------------------------------------------------- dunder methods

@T.case((1, 2, 3, 4), (0, 0, 1, 1))
def dunder_operators(a, b, c, d):
    v, w = Vec(a, b), Vec(c, d)
    s = v + w
    return (s, v * 2, 3 * w, -v, v == Vec(a, b), v < w, sorted([w, v]), abs(w), list(v), len(v), v[1],
            a in v, bool(v), v(10), repr(s), str(s), [x for x in w], max(v, w), min([v, w]), f"{s!r}")


@T.case((1,),)
def dunder_unsupported_operand_error(a):
    return Vec(a, a) - Vec(a, a)


# ---------------------------------------------------------------- namedtuples, dataclasses, enums

@T.case((1, 2), ("a", "b"))
def namedtuple_ops(a, b):
    p = Pair(a, b)
    q = p._replace(right=a)
    left, right = p
    t = Triple(a, b)
    return (p, q, p.left, p[1], left, right, p._fields, p._asdict(), t, t.c, len(t), p == (a, b), tuple(q),
            Pair._make([b, a]), isinstance(p, tuple), p + (1,), p.count(a), p.index(b))


@T.case((3, -4), (0, 0))
def namedtuple_typed_class(x, y):
    p = Pt(x, y)
    q = Pt(x)
    return p, q, p.norm1(), q.y, p._replace(x=1).norm1(), Pt._fields, Pt._field_defaults


@T.case(("apple", 3, 1.5), ("pear", 0, 2.0))
def dataclass_basic(name, qty, price):
    a = Item(name, qty)
    b = Item(name, qty)
    c = Item("x")
    a.tag("t1").tag("t2")
    return (a.total(price), a == b, a.tags, b.tags, c.tags is not b.tags, repr(c), dataclasses.asdict(a),
            dataclasses.astuple(c), [f.name for f in dataclasses.fields(Item)], a)


@T.case((1, 2), (2, 0))
def dataclass_frozen_ordered(major, minor):
    v = Version(major, minor)
    w = Version(major)
    try:
        v.major = 10
        mutated = True
    except dataclasses.FrozenInstanceError:
        mutated = False
    return v, w, v > w, sorted([v, w, Version(0, 9)]), mutated, hash(v) == hash(Version(major, minor)), \
        dataclasses.replace(v, minor=7)


@T.case(("n", 2),)
def dataclass_inheritance_post_init(name, qty):
    d = Derived(name, qty, extra=1.5)
    e = Derived(name)
    return d, e.extra, d.total(2), isinstance(d, Item), d == Derived(name, qty, [], 1.5)


@T.case((1,), (2,), (3,))
def enum_members(v):
    c = Color(v)
    by_name = Color["GREEN"]
    return (c, c.name, c.value, c is Color.RED, c == by_name, c.is_warm(), [m.name for m in Color],
            len(Color), Color.BLUE in Color, isinstance(c, Color), list(Color.__members__),
            Level.HIGH > Level.LOW, Level.LOW + 1, Level(5), int(Level.HIGH), Perm.R | Perm.W,
            bool(Perm.R & Perm.W), (Perm.R | Perm.X).value, str(c), repr(Color.RED))


@T.case((9,),)
def enum_bad_value_error(v):
    return Color(v)


@T.case(("RED",), ("GREEN",), ("BLUE",))
def enum_dispatch(name):
    c = Color[name]
    if c is Color.RED:
        return "stop"
    elif c == Color.GREEN:
        return "go"
    return {Color.BLUE: "calm"}[c]


# ---------------------------------------------------------------- side effects on arguments

@T.case(([1, 2], 3), ([], "x"))
def side_effect_list_append(xs, v):
    xs.append(v)
    xs.extend([v, v])
    xs[0] = "first"
    return len(xs)


@T.case(({"a": 1}, "b"), ({}, "z"))
def side_effect_dict_writes(d, key):
    d[key] = len(d)
    d.setdefault("count", 0)
    d["count"] += 1
    d.pop("a", None)
    return sorted(d)


@T.case((Counter(5), 2), (Counter(0), 0))
def side_effect_setattr_on_arg(c, v):
    c.value = c.value + v
    setattr(c, "label", f"L{v}")
    c.inc(v)
    c.new_attr = [v]
    return c.value


@T.case(([[1], [2]],),)
def side_effect_nested_mutation(rows):
    for r in rows:
        r.append(r[0] * 10)
    rows.append([])
    return rows


@T.case(([1, 2, 3],),)
def side_effect_aliasing(xs):
    ys = xs
    ys.append(4)
    zs = xs[:]
    zs.append(5)
    return xs is ys, xs is zs, zs


@T.case((Item("a"),), (Item("b", 2, ["t"]),))
def side_effect_dataclass_arg(item):
    item.qty *= 3
    item.tag("seen")
    return item.total(2)


@T.case(([3, 1, 2],),)
def side_effect_then_raise(xs):
    xs.append(0)
    xs.sort()
    return xs[10]


# ---------------------------------------------------------------- instances created and returned

@T.case((2, 3), (0, 1))
def returns_new_instances(a, b):
    vs = [Vec(a, i) for i in range(b)]
    item = Item("made", a)
    return vs, item, Counter(a + b), Pair(a, b), Version(a, b)


@T.case((3,),)
def class_defined_inside_function(n):
    class Local:
        total = n

        def __init__(self, k):
            self.k = k

        def get(self):
            return self.k + self.total
    objs = [Local(i) for i in range(n)]
    return [o.get() for o in objs], Local.__name__, Local.total


@T.case((2,),)
def class_attribute_mutation_via_instance(n):
    before = Counter.instances
    cs = [Counter(i) for i in range(n)]
    return Counter.instances - before, len(cs)


@T.case(A(3, scale=2.0),)
def object_with_dunder_dict_and_vars(v, scale):
    o = Obj2(v, scale)
    o.__dict__["z"] = 1
    return vars(o), o.z, sorted(dir(o))[-3:]


class Obj2:
    def __init__(self, v, scale):
        self.v = v
        self.scale = scale


# ---------------------------------------------------------------- dict subclasses made inside (ModelOutput)

class AttrDict(dict):
    """Items readable as attributes; dict's own __init__."""

    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError:
            raise AttributeError(k) from None

    def __setattr__(self, k, v):
        self[k] = v


class OutputDict(collections.OrderedDict):
    """transformers' ModelOutput pattern: a dataclass over an OrderedDict; set fields are both items and
    attributes, indexing by int goes through to_tuple()."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = self.__dict__.get(f.name)
            if v is not None:
                self[f.name] = v

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def __setattr__(self, name, value):
        if name in {f.name for f in dataclasses.fields(self)} and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclass
class ModelOut(OutputDict):
    loss: object = None
    logits: object = None
    hidden: object = None


@T.case((3, 4), (0, 2))
def dict_subclass_made_inside(a, b):
    d = AttrDict(x=a, y=[b])
    d.z = a + b
    d.y.append(d.x)
    del d["x"]
    return d, d.z, sorted(d), "z" in d, len(d), d.get("x", -1), dict(d), list(d.items())


@T.case((1.5, None), (2.0, 7))
def ordered_dict_dataclass_output(a, b):
    o = ModelOut(logits=a, hidden=b)
    o["extra"] = a * 2
    o.loss = a - 1
    return (o, vars(o), o[0], o["logits"], o.to_tuple(), len(o), list(o), o.hidden is None,
            isinstance(o, dict))


class Config:
    def __init__(self, **kw):
        self.__dict__.update(kw)
        self.__dict__["n"] = len(kw)


@T.case(A(1, b=2), A(c=3))
def dunder_dict_writes_of_new_object(*args, **kw):
    c = Config(**kw)
    c.extra = args
    d = c.__dict__
    d["late"] = 1
    return vars(c), c.n, c.late, sorted(d)
