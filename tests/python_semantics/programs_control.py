"""Programs: for over every common iterable, while, break/continue, for/else and while/else, comprehensions
(nested, conditional, shadowing: 3.12+ inlines them), generator expressions consumed by builtins, user
generators, match statements and recursion."""
from program_table import A, Table

T = Table("control")


# ---------------------------------------------------------------- for loops

@T.case((5,), (0,), (1,))
def for_range_forms(n):
    out = []
    for i in range(n):
        out.append(i)
    for i in range(2, n + 2):
        out.append(i * 10)
    for i in range(n, 0, -2):
        out.append(-i)
    return out, sum(range(n)), list(range(n - 1, -1, -1)), len(range(0, n, 3))


@T.case(([3, 1, 2],), ((1.5, 2.5),), ("xyz",))
def for_list_tuple_str(seq):
    acc = []
    for x in seq:
        acc.append(x * 2)
    return acc


@T.case(({"a": 1, "b": 2, "c": 3},), ({},))
def for_dict_views(d):
    ks, vs, its = [], [], []
    for k in d:
        ks.append(k)
    for k in d.keys():
        ks.append(k.upper())
    for v in d.values():
        vs.append(v * 2)
    for k, v in d.items():
        its.append(f"{k}={v}")
    return ks, vs, its


@T.case((["a", "b", "c"], [1, 2, 3, 4]), ([], [1]))
def for_enumerate_zip_reversed(a, b):
    out = []
    for i, x in enumerate(a):
        out.append((i, x))
    for i, x in enumerate(a, start=10):
        out.append((i, x))
    for x, y in zip(a, b):
        out.append(x * y)
    for x in reversed(b):
        out.append(x)
    for i, (x, y) in enumerate(zip(b, reversed(b))):
        out.append(i + x - y)
    for x in reversed(range(len(a))):
        out.append(x)
    return out


@T.case(([1, 2, 3, 4, 5, 6, 7, 8, 9, 10],), ([2],))
def for_break_continue(xs):
    out = []
    for x in xs:
        if x % 2:
            continue
        if x > 7:
            break
        out.append(x)
    return out


@T.case(([1, 3, 5],), ([1, 4, 5],), ([],))
def for_else(xs):
    for x in xs:
        if x % 2 == 0:
            found = x
            break
    else:
        found = None
    return found


@T.case((10,), (1,), (0,))
def while_loops(n):
    i, total = 0, 0
    while i < n:
        i += 1
        if i == 3:
            continue
        total += i
        if total > 30:
            break
    else:
        total = -total
    return i, total


@T.case((27,), (1,), (6,))
def while_true_collatz(n):
    steps = 0
    while True:
        if n == 1:
            break
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


@T.case((3, 4), (0, 2))
def nested_loops_with_break(rows, cols):
    out = []
    for r in range(rows):
        for c in range(cols):
            if c > r:
                break
            out.append((r, c))
        else:
            out.append("full")
    return out


@T.case(([1, 2, 3],),)
def for_over_iter_next(xs):
    it = iter(xs)
    first = next(it)
    rest = [x * 10 for x in it]
    return first, rest, next(it, "done")


@T.case(([],),)
def next_on_exhausted_raises(xs):
    return next(iter(xs))


# ---------------------------------------------------------------- comprehensions

@T.case((5,), (0,))
def list_comprehensions(n):
    a = [i * i for i in range(n)]
    b = [i for i in range(n) if i % 2 == 0]
    c = [(i, j) for i in range(n) for j in range(i) if (i + j) % 2]
    d = [[i * j for j in range(3)] for i in range(n)]
    e = [x if x > 2 else -x for x in range(n)]
    return a, b, c, d, e


@T.case((4,), (1,))
def set_and_dict_comprehensions(n):
    s = {i % 3 for i in range(n)}
    d = {i: i * i for i in range(n) if i != 2}
    inv = {v: k for k, v in d.items()}
    nested = {i: {j for j in range(i)} for i in range(n)}
    return s, d, inv, nested


@T.case((3,), (7,))
def comprehension_shadowing_and_scope(x):
    i = "outer"
    vals = [i for i in range(x)]
    y = x * 2
    uses_outer = [y + k for k in range(3)]
    return i, vals, uses_outer, x


@T.case((3,),)
def comprehension_with_closures(n):
    fns = [lambda: k for k in range(n)]  # noqa: B023 - late binding is the behaviour under test
    fns2 = [(lambda k=k: k * 2) for k in range(n)]
    return [f() for f in fns], [f() for f in fns2]


@T.case(([[1, 2], [3], []],),)
def comprehension_flatten_and_filter(rows):
    flat = [x for row in rows for x in row]
    lens = {len(r) for r in rows}
    total = sum(x for row in rows for x in row if x > 1)
    return flat, lens, total


@T.case((4,),)
def comprehension_in_nested_function(n):
    def squares(m):
        return [i * i for i in range(m)]
    base = 10
    return [squares(k) for k in range(n)], [base + j for j in squares(n)]


@T.case(([1, 0, 3],),)
def comprehension_raises_inside(xs):
    return [10 // x for x in xs]


# ---------------------------------------------------------------- generator expressions consumed by builtins

@T.case(([3, 1, 4, 1, 5],), ([7],))
def genexp_builtins(xs):
    return (sum(x * 2 for x in xs), any(x > 4 for x in xs), all(x > 0 for x in xs), min(x for x in xs),
            max(x % 4 for x in xs), sorted(-x for x in xs), list(x + 1 for x in xs),
            tuple(x for x in xs if x != 1), dict((x, x * x) for x in xs), set(x % 2 for x in xs),
            ",".join(str(x) for x in xs), "".join(chr(97 + x) for x in xs))


@T.case((5,),)
def genexp_lazy_and_partial(n):
    g = (i * i for i in range(n))
    first = next(g)
    rest = list(g)
    again = list(g)
    return first, rest, again, sum((i for i in range(n)), 100)


@T.case(([1, 2, 3],), ([],))
def genexp_min_max_defaults(xs):
    return min((x for x in xs), default=-1), max((x for x in xs), default=None), max(xs, key=lambda v: -v,
                                                                                      default=0)


# ---------------------------------------------------------------- user generators

def countdown(n):
    while n > 0:
        yield n
        n -= 1


def pairs(xs):
    for i in range(0, len(xs) - 1, 2):
        yield xs[i], xs[i + 1]
    return "unused"


def chain_gen(a, b):
    yield from a
    yield from countdown(b)
    yield "end"


def gen_with_finally(log, n):
    try:
        for i in range(n):
            yield i
    finally:
        log.append("closed")


@T.case((4,), (0,))
def generator_for_loop(n):
    out = []
    for v in countdown(n):
        out.append(v)
    return out, list(countdown(n)), sum(countdown(n))


@T.case(([1, 2, 3, 4, 5],),)
def generator_tuple_yield(xs):
    total = 0
    for a, b in pairs(xs):
        total += a * b
    return total, list(pairs(xs))


@T.case((["x", "y"], 2),)
def generator_yield_from(a, b):
    return [v for v in chain_gen(a, b)]


@T.case((3,), (0,))
def generator_finally_runs(n):
    log = []
    for v in gen_with_finally(log, n):
        log.append(v)
    return log


@T.case((5,),)
def generator_early_break(n):
    log = []
    g = gen_with_finally(log, n)
    for v in g:
        if v == 1:
            break
    log.append("after-break")
    g.close()
    return log


@T.case((3,),)
def generator_send(n):
    def acc():
        total = 0
        while True:
            got = yield total
            if got is None:
                return
            total += got
    g = acc()
    next(g)
    out = [g.send(i) for i in range(n)]
    return out


# ---------------------------------------------------------------- match statements

@T.case((0,), (1,), (5,), ("hi",), ([1, 2],), ([1, 2, 3, 4],), ({"op": "add", "x": 1},), ((3, "z"),),
        ({"op": "neg"},), (None,), (2.5,))
def match_basic(v):
    match v:
        case 0:
            return "zero"
        case 1 | 2:
            return "one-or-two"
        case int(n) if n > 3:
            return f"big int {n}"
        case str() as s:
            return "str " + s
        case (x, "z"):
            return ("tuple-z", x)
        case [a, b]:
            return ("pair", a, b)
        case [first, *rest] if len(rest) > 1:
            return ("seq", first, rest)
        case {"op": "add", "x": x}:
            return ("add", x)
        case {"op": op, **others}:
            return ("op", op, others)
        case None:
            return "none"
        case _:
            return "other"


class Point:
    __match_args__ = ("x", "y")

    def __init__(self, x, y):
        self.x = x
        self.y = y


@T.case((0, 0), (0, 5), (3, 0), (2, 2), (1, 7))
def match_class_patterns(x, y):
    p = Point(x, y)
    match p:
        case Point(0, 0):
            return "origin"
        case Point(x=0, y=yy):
            return f"on y axis at {yy}"
        case Point(xx, 0):
            return f"on x axis at {xx}"
        case Point(a, b) if a == b:
            return "diagonal"
        case _:
            return "somewhere"


# ---------------------------------------------------------------- recursion

def fact(n):
    return 1 if n <= 1 else n * fact(n - 1)


def fib(n):
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


def is_even(n):
    return True if n == 0 else is_odd(n - 1)


def is_odd(n):
    return False if n == 0 else is_even(n - 1)


@T.case((5,), (0,), (10,))
def recursion_simple(n):
    return fact(n), fib(n)


@T.case((7,), (4,))
def recursion_mutual(n):
    return is_even(n), is_odd(n)


@T.case(([1, [2, [3, [4]], 5]],),)
def recursion_nested_lists(xs):
    def flatten(v):
        if isinstance(v, list):
            out = []
            for e in v:
                out.extend(flatten(e))
            return out
        return [v]

    def depth(v):
        return 1 + max((depth(e) for e in v), default=0) if isinstance(v, list) else 0
    return flatten(xs), depth(xs)


@T.case((3,),)
def recursion_with_accumulator_arg(n):
    def walk(k, acc):
        if k == 0:
            return acc
        acc.append(k)
        return walk(k - 1, acc)
    result = walk(n, [])
    return result


@T.case((3, 0), (2, 1))
def loop_with_try_continue(n, bad):
    out = []
    for i in range(n):
        try:
            if i == bad:
                raise ValueError(i)
            out.append(i)
        except ValueError as e:
            out.append(("err", e.args))
            continue
        finally:
            out.append("f")
    return out


@T.case(([4, 0, 2],), ([5, 0],))
def loop_else_with_return_inside(xs):
    for x in xs:
        while x > 0:
            x -= 3
            if x == 1:
                return ("returned", x)
        else:
            continue
    else:
        return "exhausted"


@T.case(A([1, 2, 3], key=lambda v: v % 2),)
def sort_with_lambda_key_kwarg(xs, key):
    return sorted(xs, key=key), min(xs, key=key), max(xs, key=key)
