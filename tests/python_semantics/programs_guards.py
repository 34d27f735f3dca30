"""Programs whose path through the code depends on facts a trace would guard on: argument types and
values, container lengths and keys, attribute values, function identities, global flags. Each has several
argument sets, so ``compile_python`` must re-check its guards (and recompile) as the calls go by."""
import math

from program_table import A, Table

T = Table("guards")

MODE = "fast"
HISTORY = []


class Config:
    def __init__(self, mode, depth=1):
        self.mode = mode
        self.depth = depth


@T.case((3,), (4,), ("a",), ([1, 2],), (2.5,), (None,), (True,), ((1, "x"),), ({"k": 1},))
def guard_type_dispatch(x):
    if x is None:
        return "none"
    if isinstance(x, bool):
        return ("bool", not x)
    if isinstance(x, int):
        return ("int", x * 2)
    if isinstance(x, float):
        return ("float", math.floor(x))
    if isinstance(x, str):
        return ("str", x * 3)
    if type(x) is tuple:
        return ("tuple", x[::-1])
    if hasattr(x, "keys"):
        return ("mapping", list(x.keys()))
    return ("other", len(x))


@T.case(({"a": 1},), ({"a": 1, "b": 2},), ({"b": 5},), ({},), ({"a": "s", "c": None},))
def guard_dict_keys_and_len(d):
    out = []
    if "a" in d:
        out.append(d["a"] * 2)
    if len(d) > 1:
        out.append(sorted(d))
    for k in d:
        out.append(k)
    return out


@T.case(([],), ([1],), ([1, 2, 3],), ([1, 2, 3],), (["a", "b"],))
def guard_list_length_unrolled(xs):
    total = 0 if not xs or isinstance(xs[0], int) else ""
    for x in xs:
        total = total + x
    return total, len(xs)


@T.case((Config("fast"),), (Config("slow", 3),), (Config("fast", 2),), (Config(None),))
def guard_attribute_values(cfg):
    if cfg.mode == "fast":
        r = [i for i in range(cfg.depth)]
    elif cfg.mode is None:
        r = "unset"
    else:
        r = {cfg.mode: cfg.depth}
    cfg.depth += 1
    return r


def _sq(v):
    return v * v


@T.case((_sq, 3), (abs, -3), (str, 7), (_sq, 1.5), (len, "abcd"))
def guard_function_identity(f, x):
    return f(x), f is _sq, getattr(f, "__name__", "?")


@T.case(("slow",), ("fast",), ("fast",), ("other",), globals=("MODE", "HISTORY"))
def guard_global_flag_changes(new_mode):
    global MODE
    before = MODE
    if MODE == "fast":
        HISTORY.append("was fast")
    MODE = new_mode
    return before, len(HISTORY)


@T.case(((1, 2),), ((1, "2"),), ((("n",), 2),), ((1, 2, 3),))
def guard_tuple_contents(t):
    a, b = t[0], t[1]
    if isinstance(a, tuple):
        return a + (b,)
    return a + b if type(a) is type(b) else (str(a) + str(b))


@T.case((0,), (1,), (-1,), (2 ** 70,), (0.0,), (-0.0,), (float("inf"),))
def guard_numeric_values(x):
    sign = (x > 0) - (x < 0)
    return sign, abs(x), x == 0, str(x), math.copysign(1.0, x)


@T.case(A(1), A(1, scale=2), A(1, 2), A(x=5), A(1, scale=3, offset=1))
def guard_call_shapes(x, scale=1, offset=0):
    return x * scale + offset


@T.case((True, 2), (False, 2), (True, "ab"), (0, 3), ("", 1))
def guard_truthiness_branch(flag, v):
    if flag:
        return v * 2
    return [v] * 2


@T.case((Config("m"), "mode"), (Config("m"), "depth"), (Config("m"), "missing"))
def guard_dynamic_attribute_name(obj, name):
    if hasattr(obj, name):
        setattr(obj, name, getattr(obj, name) * 2)
        return getattr(obj, name)
    return getattr(obj, name, "absent")


@T.case(([3, 1, 2],), ((3, 1, 2),), ("cab",), ({3: "x", 1: "y"},), (range(3),))
def guard_iterable_kinds(xs):
    out = []
    for i, x in enumerate(xs):
        out.append((i, x))
    print("iterated", len(out), type(xs).__name__)
    return out, sorted(xs), list(reversed(list(xs)))


class Shape:
    sides = 0

    def area(self):
        raise NotImplementedError


class Square(Shape):
    sides = 4

    def __init__(self, s):
        self.s = s

    def area(self):
        return self.s * self.s


class Circle(Shape):
    def __init__(self, r):
        self.r = r

    def area(self):
        return round(math.pi * self.r ** 2, 6)


@T.case((Square(2),), (Circle(1),), (Square(3),), (Shape(),))
def guard_method_dispatch_on_class(shape):
    return type(shape).__name__, shape.sides, shape.area()


@T.case((Square(2),),)
def augmented_assignment_attributes(sq):
    sq.s += 1
    sq.s *= 3
    sq.extra = [1]
    sq.extra += [2]
    del sq.extra[0]
    sq.tmp = "t"
    del sq.tmp
    return sq.s, sq.extra, hasattr(sq, "tmp")


@T.case((0.0,), (-0.0,), (float("nan"),), (complex(0, 0),), (complex(0, -0.0),), (complex(1, 0),),
        (complex(1, -0.0),), (0.0,))
def guard_float_zero_sign_and_nan(x):
    return repr(x), str(-x), x == x, x == 0
