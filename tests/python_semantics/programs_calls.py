"""Programs: calls with defaults, *args, **kwargs, keyword-only and positional-only parameters and
star-unpacking at call sites; inlining of user functions, lambdas, nested functions and functools.partial;
builtins; the math and operator modules."""
import functools
import math
import operator

from program_table import A, Table

T = Table("calls")


def with_defaults(a, b=2, c=None, d=(1, 2)):
    return a, b, c, d


def var_args(*args):
    return args


def var_kwargs(**kwargs):
    return kwargs


def everything(a, b=10, *args, c, d=20, **kwargs):
    return a, b, args, c, d, kwargs


def pos_only(a, b, /, c, d=4):
    return a, b, c, d


def kw_only(*, x, y=5):
    return x * y


def mixed_posonly_kwargs(a, /, **kwargs):
    return a, kwargs


SHARED_DEFAULT = []


def mutable_default(item, acc=SHARED_DEFAULT):
    acc.append(item)
    return list(acc)


# ---------------------------------------------------------------- call forms

@T.case((1,), (5,))
def call_defaults(x):
    return with_defaults(x), with_defaults(x, 3), with_defaults(x, c="c"), with_defaults(x, d=[], b=0)


@T.case((1, 2, 3), ())
def call_var_args(*xs):
    return var_args(), var_args(*xs), var_args(0, *xs, 9, *xs), len(xs)


@T.case(A(1, k="v"), A(0))
def call_var_kwargs(n, **kw):
    return var_kwargs(), var_kwargs(**kw), var_kwargs(a=n, **kw), var_kwargs(**kw, z=n, **{"q": 1})


@T.case((1,), ("a",))
def call_everything(v):
    return (everything(v, c=3), everything(v, 2, 3, 4, c=5, e=6), everything(v, *[7, 8, 9], c=0, d=1),
            everything(*(v,), **{"c": 1, "extra": 2}))


@T.case((1, 2),)
def call_pos_only(a, b):
    return pos_only(a, b, 3), pos_only(a, b, c=3), pos_only(*(a, b), d=0, c=1), mixed_posonly_kwargs(a, a=b)


@T.case((1, 2), check_message=False)
def call_pos_only_by_keyword_error(a, b):
    return pos_only(a=a, b=b, c=3)


@T.case((2,), (3,))
def call_kw_only(v):
    return kw_only(x=v), kw_only(y=v, x=2), kw_only(**{"x": v})


@T.case((2,), check_message=False)
def call_kw_only_positionally_error(v):
    return kw_only(v)


@T.case((1,), check_message=False)
def call_missing_argument_error(v):
    return with_defaults()


@T.case((1,), check_message=False)
def call_unexpected_keyword_error(v):
    return with_defaults(v, zz=1)


@T.case((1,), check_message=False)
def call_duplicate_argument_error(v):
    return with_defaults(v, a=v)


@T.case((1,), (2,), globals=("SHARED_DEFAULT",))
def call_mutable_default_shared(v):
    a = mutable_default(v)
    b = mutable_default(v * 10, [])
    c = mutable_default(v + 1)
    return a, b, c, mutable_default.__defaults__[0] is SHARED_DEFAULT


@T.case(([1, 2, 3], {"sep": "-"}),)
def call_star_unpack_builtins(xs, opts):
    return (max(*xs), min(*xs, 0), "%s" % (xs,), str.join(opts["sep"], map(str, xs)),
            dict(*[[("a", 1)]], **opts), list(zip(*[xs, xs])))


# ---------------------------------------------------------------- inlining

def helper_square(x):
    return x * x


def helper_calls_helper(x):
    return helper_square(x) + helper_square(x + 1)


@T.case((3,), (-1.5,))
def inline_user_functions(x):
    return helper_calls_helper(x) - helper_square(x)


@T.case((4,), (0,))
def inline_lambdas(n):
    double, add = (lambda v: v * 2), (lambda a, b=1, *rest, **kw: a + b + sum(rest) + len(kw))
    return double(n), add(n), add(n, 2, 3, 4, x=1), (lambda: n)(), sorted([3, 1, 2], key=lambda v: -v)


@T.case((2, 3),)
def inline_nested_functions(a, b):
    def mul(x, y=b):
        return x * y

    def apply(f, *args, **kwargs):
        return f(*args, **kwargs)
    return mul(a), apply(mul, a, y=10), apply(apply, mul, a, b)


@T.case((5,), (2,))
def inline_partial(x):
    p = functools.partial(with_defaults, x, c="pc")
    q = functools.partial(everything, c=1)
    r = functools.partial(pow, 2)
    s = functools.partial(p, 0)
    return p(), p(9), p(d="d"), q(x, 2, 3), r(x), s(), p.args, sorted(p.keywords)


@T.case((3,),)
def inline_higher_order(n):
    def compose(f, g):
        return lambda v: f(g(v))
    (inc,) = (lambda v: v + 1,)
    sq = compose(helper_square, inc)
    return [sq(i) for i in range(n)], list(map(compose(inc, inc), range(n)))


@T.case((3,),)
def inline_functools_reduce_and_lru(n):
    @functools.lru_cache(maxsize=None)
    def tri(k):
        return 0 if k == 0 else k + tri(k - 1)
    total = functools.reduce(operator.add, range(n + 1), 0)
    return total, functools.reduce(lambda a, b: a * b, [1, 2, n]), tri(n)


@T.case((2,),)
def inline_function_attributes(n):
    def f(a, b=n):
        """doc"""
        return a + b
    f.custom = n * 3
    return f.__name__, f.__doc__, f.__defaults__, f.custom, f(1), callable(f), f.__code__.co_argcount


# ---------------------------------------------------------------- builtins

class HasLen:
    def __len__(self):
        return 3


@T.case((1, "s", [1], (1,), {1: 2}, None, 2.0, True),)
def builtin_isinstance_type(*vals):
    return ([isinstance(v, int) for v in vals], [isinstance(v, (list, tuple)) for v in vals],
            [type(v).__name__ for v in vals], [type(v) is int for v in vals], isinstance(True, int),
            issubclass(bool, int), len(HasLen()), callable(len))


@T.case(([3, -1, 2],), ([0.5, -2.5],))
def builtin_numeric(xs):
    return (min(xs), max(xs), abs(xs[1]), sum(xs), sum(xs, 10), round(2.675, 2), round(xs[0]), round(7.5),
            round(-0.5), divmod(7, -2), divmod(-7.5, 2), pow(2, 10), pow(2, -1), pow(3, 4, 5), int("42"),
            int("ff", 16), int(3.9), int(-3.9), float("1.5"), float(3), str(xs[0]), bool(0), bool(xs),
            repr("q"), repr(xs), hex(255), oct(8), bin(5), ord("a"), chr(66), hash(7) == hash(7.0))


@T.case(([3, 1, 2], "abc"),)
def builtin_iteration(xs, s):
    return (list(enumerate(s)), list(zip(xs, s)), list(zip(xs, s, range(9))), list(map(str, xs)),
            list(map(operator.add, xs, xs)), list(filter(None, [0, 1, "", "a"])),
            list(filter(lambda v: v > 1, xs)), sorted(s, reverse=True), sorted(xs, key=lambda v: -v),
            list(reversed(xs)), any([]), all([]), any(xs), all(x > 1 for x in xs), list(range(3)),
            tuple(s), set(s) == {"a", "b", "c"}, dict(zip(s, xs)), list(iter(xs)))


class Obj:
    cls_attr = "c"

    def __init__(self):
        self.a = 1


@T.case(("a",), ("b",), ("cls_attr",))
def builtin_getattr_family(name):
    o = Obj()
    before = (getattr(o, name, "dflt"), hasattr(o, name))
    setattr(o, name, 99)
    after = (getattr(o, name), hasattr(o, name), vars(o))
    delattr(o, name)
    return before, after, getattr(o, name, None), hasattr(o, name)


@T.case(("zz",),)
def builtin_getattr_missing_raises(name):
    return getattr(Obj(), name)


@T.case(([1, 2, 3],), ("ab",))
def builtin_len_errors_and_conversions(v):
    return len(v), list(v), str(v), repr(v), tuple(v), int(len(v) > 2)


@T.case((None,),)
def builtin_len_type_error(v):
    return len(v)


@T.case(("x",),)
def builtin_int_value_error(s):
    return int(s)


# ---------------------------------------------------------------- math and operator

@T.case((2.0,), (0.5,), (9,))
def math_module(x):
    return (math.sqrt(x), math.floor(x), math.ceil(x), math.exp(x), math.log(x), math.log(x, 2), math.log2(x),
            math.log10(x), math.sin(x), math.cos(x), math.tan(x), math.atan2(x, 1), math.hypot(x, 3),
            math.fabs(-x), math.pi, math.e, math.inf > x, math.isnan(x), math.isclose(x, x + 1e-12),
            math.gcd(12, 18), math.factorial(5), math.prod([1, 2, x]), math.fsum([0.1] * 10), math.trunc(x),
            math.copysign(x, -1), math.degrees(x), math.radians(x), math.comb(5, 2), math.perm(4, 2),
            math.isqrt(int(x)), math.modf(x), math.frexp(x), math.tanh(x), math.erf(x))


@T.case((-1.0,),)
def math_domain_error(x):
    return math.sqrt(x)


@T.case((3, 4), (10, 3), ("a", "b"))
def operator_module(a, b):
    return (operator.add(a, b), operator.mul(a, 2), operator.eq(a, b), operator.lt(a, b), operator.ge(a, b),
            operator.not_(a), operator.truth(b), operator.concat([a], [b]), operator.is_(a, b),
            operator.contains([a, b], a), operator.getitem([a, b], 1), operator.itemgetter(0, 1)([a, b]),
            operator.attrgetter("real")(3), operator.methodcaller("count", a)([a, a, b]),
            operator.index(3), operator.neg(5), operator.pos(-2), operator.abs(-4))


@T.case((7, 2), (9, 4))
def operator_numeric_inplace(a, b):
    xs = [a]
    xs = operator.iadd(xs, [b])
    d = {"k": a}
    operator.setitem(d, "j", b)
    operator.delitem(d, "k")
    return (operator.sub(a, b), operator.truediv(a, b), operator.floordiv(a, b), operator.mod(a, b),
            operator.pow(a, b), operator.and_(a, b), operator.or_(a, b), operator.xor(a, b),
            operator.lshift(a, b), operator.rshift(a, b), operator.invert(a), xs, d)


@T.case((1, 0),)
def operator_zero_division(a, b):
    return operator.truediv(a, b)


@T.case((5, 0), (5.0, 0.0), (0, 0))
def zero_division_variants(a, b):
    out = []
    for op in (lambda: a / b, lambda: a // b, lambda: a % b, lambda: divmod(a, b)):
        try:
            out.append(op())
        except ZeroDivisionError as e:
            out.append(("zde", str(e)))
    return out


class _Chunker:
    def feed(self, x, y=2):
        return x * y


def _plain(a, b, *rest, k=1, **kw):
    return a


@T.case((3,),)
def inspect_signature_of_method(x):
    import inspect
    c = _Chunker()
    sig = inspect.signature(c.feed)
    n = len(sig.parameters)
    names = list(sig.parameters)
    p = inspect.signature(_plain).parameters
    return (n, names, c.feed(x) if n == 2 else None, [str(v) for v in p.values()], p["k"].default,
            str(inspect.signature(_plain)), "rest" in p)
