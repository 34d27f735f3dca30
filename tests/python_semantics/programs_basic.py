"""Programs: locals, globals, closures and cells, literals and container methods, unpacking, slicing, del,
augmented assignment, comparisons, walrus, conditional expressions, f-strings and str methods."""
from program_table import Table

T = Table("basic")

# ---------------------------------------------------------------- locals and globals

SCALE = 3
COUNTER = 0
LOG = []
REGISTRY = {"a": 1}
NAMES = ("x", "y")


@T.case((1, 2), (3, 4), (2.5, -1.0), ("a", "b"))
def locals_arith(a, b):
    c = a + b
    d = c + a
    c = d + b
    return c, d


@T.case((0,), (7,), (-3,))
def locals_reassign_types(n):
    x = n
    x = x * 2
    x = str(x)
    x = x + "!"
    return x


@T.case((2,), (5,), (1.5,))
def global_read(x):
    return x * SCALE + len(NAMES)


@T.case((1,), (5,), (0,), globals=("COUNTER",))
def global_write(step):
    global COUNTER
    COUNTER += step
    if COUNTER > 4:
        COUNTER = -COUNTER
    return COUNTER


@T.case((1,), ("s",), ([1, 2],), globals=("LOG",))
def global_list_mutation(item):
    LOG.append(item)
    LOG.append(len(LOG))
    return len(LOG)


@T.case(("b", 2), ("a", 10), globals=("REGISTRY",))
def global_dict_write(key, value):
    REGISTRY[key] = REGISTRY.get(key, 0) + value
    return sorted(REGISTRY.items())


@T.case((4,), (9,), globals=("COUNTER",))
def global_rebind_then_read(v):
    global COUNTER
    before = COUNTER
    COUNTER = v
    return before, COUNTER, global_read(1)


@T.case((1,), (2,))
def global_unbound_name_error(x):
    if x > 5:
        return x
    return x + undefined_global_name  # noqa: F821


@T.case((1,), (-1,))
def unbound_local_error(x):
    if x > 0:
        y = x
    return y


# ---------------------------------------------------------------- closures and cells

@T.case((1,), (10,), (-2,))
def closure_read(x):
    k = x * 2

    def inner(y):
        return y + k + x
    return inner(1) + inner(2)


@T.case((3,), (0,))
def closure_nonlocal_counter(n):
    count = 0

    def bump(by):
        nonlocal count
        count += by
        return count
    for i in range(n):
        bump(i)
    return count, bump(100)


@T.case((2,), (4,))
def closure_nested_two_levels(a):
    def outer(b):
        def inner(c):
            return a * 100 + b * 10 + c
        return inner(b + 1)
    return [outer(i) for i in range(a)]


@T.case((3,), (5,))
def closure_over_loop_variable(n):
    fns = []
    for i in range(n):
        fns.append(lambda: i * 10)  # noqa: B023 - late binding is the behaviour under test
    bound = []
    for i in range(n):
        bound.append(lambda i=i: i * 10)
    return [f() for f in fns], [f() for f in bound]


@T.case((2,), (6,))
def closure_cell_modified_after_creation(x):
    def get():
        return x
    first = get()
    x = x + 1
    second = get()
    return first, second


@T.case((4,),)
def closure_nonlocal_in_nested(n):
    total = []

    def outer():
        acc = 0

        def inner(v):
            nonlocal acc
            acc += v
            total.append(acc)
        for k in range(n):
            inner(k)
        return acc
    return outer(), total


@T.case((3,), (1,))
def closure_cell_argument(x):
    def setter(v):
        nonlocal x
        x = v
    setter(x * 7)
    return x


@T.case((2,),)
def closure_shared_between_functions(start):
    value = start

    def inc():
        nonlocal value
        value += 1

    def get():
        return value
    inc()
    inc()
    return get()


# ---------------------------------------------------------------- literals and container methods

@T.case((1, 2, 3), ("a", "b", "c"))
def literals_all_kinds(a, b, c):
    t = (a, b, c)
    lst = [a, b, c, a]
    s = {a, b}
    d = {"first": a, "rest": [b, c], 3: t}
    empty = ((), [], {}, set())
    return t, lst, sorted(s, key=repr), d, empty


@T.case(([3, 1, 2],), ([],), (["b", "a"],))
def list_methods(xs):
    xs = list(xs)
    xs.append(10 if not xs or isinstance(xs[0], int) else "z")
    xs.extend(xs[:2])
    xs.insert(1, xs[-1])
    first = xs.index(xs[-1])
    cnt = xs.count(xs[0])
    popped = xs.pop()
    popped0 = xs.pop(0)
    copy_ = xs.copy()
    xs.reverse()
    rev = list(xs)
    xs.sort(key=repr)
    copy_.remove(copy_[0])
    copy_.clear()
    return xs, rev, first, cnt, popped, popped0, copy_


@T.case(([5, 3, 9, 1],), ([2, 2, 1],))
def list_sort_variants(xs):
    a = sorted(xs)
    b = sorted(xs, reverse=True)
    c = list(xs)
    c.sort(key=lambda v: -v)
    d = sorted(xs, key=lambda v: (v % 2, v), reverse=True)
    return a, b, c, d


@T.case(({"a": 1, "b": 2},), ({},))
def dict_methods(d):
    d = dict(d)
    g1 = d.get("a")
    g2 = d.get("zz", -1)
    sd = d.setdefault("c", 3)
    sd2 = d.setdefault("c", 4)
    d.update({"d": 4}, e=5)
    d.update([("f", 6)])
    keys = list(d.keys())
    values = list(d.values())
    items = list(d.items())
    popped = d.pop("d")
    popped_default = d.pop("nope", None)
    c = d.copy()
    c["a"] = 100
    last = d.popitem()
    merged = {**d, "z": 0}
    return g1, g2, sd, sd2, keys, values, items, popped, popped_default, c, last, merged, "a" in d


@T.case(({1, 2, 3}, {3, 4}), (set(), {1}))
def set_methods(a, b):
    s = set(a)
    s.add(7)
    s.discard(1)
    s.discard(99)
    u = s.union(b)
    i = s.intersection(b)
    df = s.difference(b)
    sym = s.symmetric_difference(b)
    ops = (s | b, s & b, s - b, s ^ b)
    s2 = s.copy()
    s2.update({100, 200})
    s2.remove(100)
    fs = frozenset(s)
    return s, u, i, df, sym, ops, s2, fs, s.issubset(u), u.issuperset(s), s.isdisjoint({-5})


@T.case(((1, 2, 3, 2),), (("a",),))
def tuple_methods(t):
    return t.count(t[0]), t.index(t[-1]), t + t, t * 2, len(t), t[::-1], tuple(reversed(t))


@T.case(({"x": 1, "y": 2},),)
def dict_iteration_mutating_copy(d):
    out = {}
    for k, v in list(d.items()):
        out[k * 2] = v
        d[k + "_new"] = v * 10
    del d["x"]
    return out


# ---------------------------------------------------------------- unpacking

@T.case(([1, 2, 3, 4, 5],), ((9, 8, 7),), ("abcd",))
def unpack_starred(seq):
    first, *middle, last = seq
    *init, end = seq
    head, *tail = seq
    return first, middle, last, init, end, head, tail


@T.case((((1, 2), [3, (4, 5)]),),)
def unpack_nested(data):
    (a, b), [c, (d, e)] = data
    return a + b + c + d + e, (e, d, c, b, a)


@T.case((1, 2), ("x", "y"))
def unpack_swap(a, b):
    a, b = b, a
    a, b, c = b, a, a
    return a, b, c


@T.case(([1, 2],), ([1, 2, 3],))
def unpack_wrong_length(seq):
    a, b = seq
    return a, b


@T.case(({"a": 1, "b": 2},),)
def unpack_dict_and_splat(d):
    k1, k2 = d
    merged = [*d, *d.values(), *range(2)]
    both = {**d, **{"c": 3}}
    return k1, k2, merged, both, (*d.items(),)


# ---------------------------------------------------------------- slicing, del, augmented assignment

@T.case(([0, 1, 2, 3, 4, 5, 6],), ("abcdefg",), ((9, 8, 7, 6),))
def slicing_get(s):
    return s[1:3], s[:2], s[-2:], s[::2], s[::-1], s[1:-1:2], s[5:1:-1], s[100:], s[:]


@T.case(([0, 1, 2, 3, 4, 5, 6, 7],),)
def slicing_set_and_del(xs):
    xs[1:3] = ["a", "b", "c"]
    xs[::3] = [None] * len(xs[::3])
    del xs[-2:]
    del xs[0]
    xs[len(xs):] = [99]
    return xs


@T.case((5,),)
def del_statements(n):
    a = n
    b = [1, 2, 3]
    d = {"k": 1, "j": 2}
    del a
    del b[0], d["k"]
    try:
        a  # noqa: F821, B018 - reading a deleted local is the behaviour under test
    except UnboundLocalError:
        gone = True
    return b, d, gone


@T.case(([1, 2, 3], {"a": 1}),)
def augmented_assignment_subscripts(xs, d):
    xs[0] += 10
    xs[-1] *= 3
    d["a"] -= 5
    d["b"] = d.get("b", 0)
    d["b"] += 1
    xs += [4]
    s = "ab"
    s *= 2
    n = 7
    n //= 2
    n **= 3
    n %= 10
    n <<= 2
    n |= 1
    n ^= 8
    n &= 0xFF
    n >>= 1
    f = 1.0
    f /= 4
    return xs, d, s, n, f


@T.case(([1, 2],),)
def augmented_list_alias(xs):
    alias = xs
    xs += [3]
    t = (1,)
    t_alias = t
    t += (2,)
    return alias is xs, t_alias, t


# ---------------------------------------------------------------- comparisons, walrus, conditionals

@T.case((1, 2, 3), (3, 2, 1), (2, 2, 2), (1.5, 1.5, 4))
def chained_comparisons(a, b, c):
    return (a < b < c, a <= b <= c, a == b == c, a < b > c, a != b != c, 0 < a < 10 and b is not None,
            a in (1, 2) not in [a])


@T.case(([1, 5, 2, 8, 3],), ([],))
def walrus_in_loops(xs):
    out = []
    it = iter(xs)
    while (v := next(it, None)) is not None:
        if (double := v * 2) > 4:
            out.append(double)
    big = [y for x in xs if (y := x * x) > 5]
    return out, big, (n := len(xs)), n + 1


@T.case((0,), (5,), (-5,), ("",), ("x",), (None,))
def conditional_expressions(x):
    a = "truthy" if x else "falsy"
    b = x if x else "default"
    c = (x or "or-default", x and "and-value")
    d = not x
    return a, b, c, d


@T.case((0,), (1,), (2,), (3,), (15,), (-4,))
def if_elif_chain(n):
    if n < 0:
        kind = "negative"
    elif n == 0:
        kind = "zero"
    elif n % 15 == 0:
        kind = "fizzbuzz"
    elif n % 2 == 0 and n < 10:
        kind = "small even"
    elif not n % 3:
        kind = "div3"
    else:
        kind = "other"
    return kind


@T.case((1, 1.0), (None, None), ([], []), (1, True))
def identity_and_equality(a, b):
    return a == b, a is b, a is None, b is not None, type(a) is type(b), [a] == [b]


# ---------------------------------------------------------------- f-strings and str methods

@T.case((3.14159, 42, "hi"), (-2.5, 7, "a'b"))
def fstrings(x, n, s):
    return (f"{x:.2f}|{n:05d}|{n:x}|{n:>6}|{s!r}|{s!s}|{s:*^9}", f"{x!r:>20}", f"{n:,}", f"{x:e}",
            f"{n + 1}-{s}-{[n, s]}", f"{x:{n % 10}.{1}f}", f"{n!a}", f"{'lit'}", f"{n:b}", f"{0.25:%}")


@T.case(("  Hello, World  ",), ("a,b,,c",), ("",))
def str_methods(s):
    t = s.strip()
    return (t.lower(), t.upper(), t.split(","), s.split(), t.replace("l", "L", 2), t.startswith("He"),
            t.endswith(("d", "c")), t.find("o"), t.rfind("o"), "-".join(t.split(",")), t.title(),
            t.capitalize(), s.lstrip(), s.rstrip(), t.partition(","), t.rpartition(","), t.count("l"),
            t.isdigit(), t.isalpha(), t.zfill(20), t.center(20, "."), t.ljust(18, "_"), t.rjust(18),
            t.swapcase(), t.splitlines(), t.casefold(), t.removeprefix("He"), t.removesuffix("c"),
            t.encode(), str(len(t)), t.format(), "{}-{x}".format(t, x=1), "%s=%d" % ("k", 3), t[::-1])


@T.case(("abc",), ("a",))
def str_index_error(s):
    return s.index("z")


@T.case((7,), (-3,), (0,))
def int_and_bool_arith(n):
    return (n // 2, n % 3, -n // 2, n ** 2, n / 4, divmod(n, 3), n & 5, n | 8, n ^ 3, ~n, n << 2, n >> 1,
            True + True, n * True, abs(n), -n, +n, n.bit_length(), (n).to_bytes(2, "big", signed=True))


@T.case((0.1, 0.2), (1e300, 1e10), (-0.0, 0.0))
def float_arith(a, b):
    return a + b, a * b, a - b, a / b if b else None, a ** 2, float(a).is_integer(), round(a, 3), a == b


@T.case((3,), ("x",))
def print_side_effect(v):
    print("value:", v)
    print(v, v, sep="|", end=";\n")
    return v
