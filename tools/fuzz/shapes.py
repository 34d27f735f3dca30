"""Shape bookkeeping and the tensor-expression registry of the fuzz generator.

Every op is a small function ``op(g, a) -> (expr, shape) | None`` where ``a`` is an operand ``(expr, shape)``
and ``g`` the generator (its ``rng`` and environment). Returning ``None`` means "not applicable to this
operand"; the caller picks another op. Shapes are tracked exactly so that generated programs are valid most of
the time; an occasional invalid one is fine (then ember must raise the same exception type as eager).
"""
from __future__ import annotations

import math

Shape = tuple


def broadcast(a: Shape, b: Shape) -> Shape | None:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y) if 1 in (x, y) else x)
    return tuple(reversed(out))


def paren(expr: str) -> str:
    return expr if expr.isidentifier() else f"({expr})"


UNARY = [
    "torch.exp({a}.clamp(-4, 4))", "torch.log({a}.abs() + 1)", "torch.sigmoid({a})", "torch.tanh({a})",
    "torch.relu({a})", "{a}.neg()", "({a} * {a})", "torch.sqrt({a}.abs() + 0.5)",
    "{a}.clamp(min=-0.5, max=0.7)",
    "{a}.clamp(min=0.1)", "torch.nn.functional.gelu({a})", "torch.abs({a})", "{a}.sin()",
    "torch.rsqrt({a}.abs() + 1)", "torch.nn.functional.silu({a})", "{a}.pow(2)", "({a} ** 3)", "{a}.cos()",
    "torch.nn.functional.leaky_relu({a}, 0.1)", "{a}.clone()", "{a}.contiguous()", "torch.erf({a})",
]
BINARY = [
    "({a} + {b})", "({a} * {b})", "({a} - {b})", "({a} / ({b}.abs() + 1))",
    "torch.where({a} > {b}, {a}, {b})",
    "torch.maximum({a}, {b})", "torch.minimum({a}, {b})", "torch.where({a} > 0.1, {a}, {b} * 2)",
    "torch.add({a}, {b}, alpha=0.5)", "torch.lerp({a}, {b}, 0.3)",
]
SCALAR = ["({a} * {s})", "({a} + {s})", "({a} * 0.5 - {s})", "({a} / ({s} + 1.5))", "(2 - {a})",
          "({s} * {a} + 1)"]
REDUCE_KEEP = ["{a}.sum({d}, keepdim={k})", "{a}.mean(dim={d}, keepdim={k})", "{a}.amax({d}, keepdim={k})",
               "{a}.amin({d}, keepdim={k})", "{a}.var({d}, keepdim={k})", "{a}.std(dim={d}, keepdim={k})",
               "{a}.max({d}, keepdim={k}).values", "torch.logsumexp({a}, {d}, keepdim={k})",
               "{a}.norm(dim={d}, keepdim={k})", "{a}.prod({d}, keepdim={k})"]
REDUCE_SAME = ["torch.softmax({a}, dim={d})", "torch.log_softmax({a}, {d})", "{a}.cumsum({d})"]
REDUCE_ALL = ["{a}.sum()", "{a}.mean()", "{a}.amax()", "{a}.var()", "{a}.norm()"]


def op_unary(g, a):
    return g.rng.choice(UNARY).format(a=paren(a[0])), a[1]


def op_binary(g, a):
    b = g.operand(prefer_shape=a[1])
    shape = broadcast(a[1], b[1])
    if shape is None:
        return None
    return g.rng.choice(BINARY).format(a=paren(a[0]), b=paren(b[0])), shape


def op_scalar(g, a):
    return g.rng.choice(SCALAR).format(a=paren(a[0]), s=g.scalar()), a[1]


def op_reduce(g, a):
    r = len(a[1])
    if r == 0:
        return g.rng.choice(REDUCE_ALL).format(a=paren(a[0])), ()
    d = g.rng.randrange(r)
    dd = d - r if g.rng.random() < 0.3 else d
    if g.rng.random() < 0.25:
        return g.rng.choice(REDUCE_SAME).format(a=paren(a[0]), d=dd), a[1]
    if g.rng.random() < 0.15:
        return g.rng.choice(REDUCE_ALL).format(a=paren(a[0])), ()
    keep = g.rng.random() < 0.4
    shape = a[1][:d] + ((1,) if keep else ()) + a[1][d + 1:]
    return g.rng.choice(REDUCE_KEEP).format(a=paren(a[0]), d=dd, k=keep), shape


def _factor(n: int, rng) -> tuple:
    divs = [d for d in range(2, n) if n % d == 0]
    if not divs or rng.random() < 0.3:
        return (n,)
    d = rng.choice(divs)
    return (d, n // d)


def op_reshape(g, a):
    n = math.prod(a[1])
    new = _factor(n, g.rng)
    meth = "view" if g.rng.random() < 0.3 else "reshape"
    shown = list(new)
    if len(shown) > 1 and g.rng.random() < 0.4:
        shown[g.rng.randrange(len(shown))] = -1
    return f"{paren(a[0])}.{meth}({', '.join(map(str, shown))})", new


def op_transpose(g, a):
    r = len(a[1])
    if r < 2:
        return None
    if r == 2 and g.rng.random() < 0.4:
        return f"{paren(a[0])}.t()", (a[1][1], a[1][0])
    if g.rng.random() < 0.5:
        i, j = g.rng.sample(range(r), 2)
        s = list(a[1])
        s[i], s[j] = s[j], s[i]
        return f"{paren(a[0])}.transpose({i}, {j})", tuple(s)
    perm = list(range(r))
    g.rng.shuffle(perm)
    return f"{paren(a[0])}.permute({', '.join(map(str, perm))})", tuple(a[1][p] for p in perm)


def op_flip(g, a):
    if not a[1]:
        return None
    d = g.rng.randrange(len(a[1]))
    return f"{paren(a[0])}.flip({d})", a[1]


def slice_spec(rng, shape) -> tuple[str, tuple] | None:
    """A basic-indexing subscript for ``shape`` and the result shape (ints, slices with steps, None, ...)."""
    if not shape:
        return None
    parts, out = [], []
    n = rng.randint(1, len(shape))
    for size in shape[:n]:
        c = rng.random()
        if c < 0.2 and size > 1:
            i = rng.randrange(-size, size)
            parts.append(str(i))
        elif c < 0.3:
            parts.append(":")
            out.append(size)
        elif c < 0.4:
            parts.append("None, :")
            out += [1, size]
        else:
            start = rng.randrange(0, max(1, size - 1))
            step = rng.choice([1, 1, 2, 3])
            stop = rng.choice([None, size, size - 1]) if size > start + 1 else None
            end = size if stop is None else stop
            length = max(0, (end - start + step - 1) // step)
            if length == 0:
                start, stop, length = 0, None, (size + step - 1) // step
            parts.append(f"{start or ''}:{'' if stop is None else stop}{'' if step == 1 else f':{step}'}")
            out.append(length)
    if rng.random() < 0.2 and n < len(shape):
        parts.append("...")
    out += list(shape[n:])
    return ", ".join(parts), tuple(out)


def op_slice(g, a):
    spec = slice_spec(g.rng, a[1])
    if spec is None:
        return None
    return f"{paren(a[0])}[{spec[0]}]", spec[1]


def op_unsqueeze(g, a):
    r = len(a[1])
    if r >= 4:
        return None
    d = g.rng.randint(-(r + 1), r)
    pos = d if d >= 0 else d + r + 1
    return f"{paren(a[0])}.unsqueeze({d})", a[1][:pos] + (1,) + a[1][pos:]


def op_squeeze(g, a):
    ones = [i for i, s in enumerate(a[1]) if s == 1]
    if not ones:
        return None
    d = g.rng.choice(ones)
    return f"{paren(a[0])}.squeeze({d})", a[1][:d] + a[1][d + 1:]


def op_expand(g, a):
    if len(a[1]) >= 4:
        return None
    m = g.rng.randint(2, 4)
    if 1 in a[1] and g.rng.random() < 0.5:
        new = tuple(m if s == 1 else s for s in a[1])
        shown = ", ".join(str(m) if s == 1 else "-1" for s in a[1])
        return f"{paren(a[0])}.expand({shown})", new
    return f"{paren(a[0])}.unsqueeze(0).expand({m}, *{paren(a[0])}.shape)", (m,) + a[1]


def op_narrow(g, a):
    if not a[1]:
        return None
    d = g.rng.randrange(len(a[1]))
    size = a[1][d]
    start = g.rng.randrange(size)
    length = g.rng.randint(1, size - start)
    return f"{paren(a[0])}.narrow({d}, {start}, {length})", a[1][:d] + (length,) + a[1][d + 1:]


def op_chunk(g, a):
    if not a[1]:
        return None
    d = g.rng.randrange(len(a[1]))
    size = a[1][d]
    if g.rng.random() < 0.5:
        c = g.rng.randint(1, 3)
        cs = -(-size // c)
        pieces = [min(cs, size - i) for i in range(0, size, cs)]
        i = g.rng.randrange(len(pieces))
        return f"{paren(a[0])}.chunk({c}, {d})[{i}]", a[1][:d] + (pieces[i],) + a[1][d + 1:]
    cs = g.rng.randint(1, size)
    pieces = [min(cs, size - i) for i in range(0, size, cs)]
    i = g.rng.randrange(len(pieces))
    ii = i - len(pieces) if g.rng.random() < 0.3 else i
    return f"torch.split({a[0]}, {cs}, dim={d})[{ii}]", a[1][:d] + (pieces[i],) + a[1][d + 1:]


def op_cat(g, a):
    if not a[1]:
        return None
    d = g.rng.randrange(len(a[1]))
    others = [(n, s) for n, s in g.env.tensors.items()
              if len(s) == len(a[1]) and all(x == y for i, (x, y) in enumerate(zip(s, a[1])) if i != d)]
    b = g.rng.choice(others) if others and g.rng.random() < 0.6 else (f"{paren(a[0])} * 2", a[1])
    if g.rng.random() < 0.5:
        shape = a[1][:d] + (a[1][d] + b[1][d],) + a[1][d + 1:]
        return f"torch.cat([{a[0]}, {b[0]}], dim={d})", shape
    if b[1] != a[1]:
        b = (f"{paren(a[0])}.sin()", a[1])
    return f"torch.stack([{a[0]}, {b[0]}], {d})", a[1][:d] + (2,) + a[1][d:]


def op_index(g, a):
    s = a[1]
    if not s:
        return None
    c = g.rng.random()
    d = g.rng.randrange(len(s))
    if c < 0.25:
        idx = [g.rng.randrange(s[d]) for _ in range(g.rng.randint(1, 4))]
        return f"{paren(a[0])}.index_select({d}, torch.tensor({idx}))", s[:d] + (len(idx),) + s[d + 1:]
    if c < 0.45:
        n = math.prod(s)
        mult = g.rng.choice([1, 3, 7])
        return (f"torch.gather({a[0]}, {d}, torch.arange({n}).reshape({list(s)}) * {mult} % {s[d]})", s)
    if c < 0.65:
        idx = [g.rng.randrange(-s[0], s[0]) for _ in range(g.rng.randint(1, 4))]
        return f"{paren(a[0])}[torch.tensor({idx})]", (len(idx),) + s[1:]
    if c < 0.8 and a[0].isidentifier():
        thr = round(g.rng.uniform(-0.5, 0.5), 2)
        red = g.rng.choice(["sum()", "abs().sum()", "numel() * 1.0 + 0 * {a}.sum()"])
        expr = f"{paren(a[0])}[{paren(a[0])} > {thr}].{red}".replace("{a}", paren(a[0]))
        return expr, ()
    i = g.rng.randrange(-s[0], s[0])
    return f"{paren(a[0])}[{i}]", s[1:]


def op_fresh(g, a):
    c = g.rng.choice(["torch.zeros_like({a})", "torch.ones_like({a}) * {s}", "torch.full_like({a}, {s})",
                      "torch.empty_like({a}).fill_(1.5)", "{a}.new_ones({shape})"])
    return c.format(a=paren(a[0]), s=g.scalar(), shape=list(a[1])), a[1]


OPS = [(op_unary, 5), (op_binary, 5), (op_scalar, 3), (op_reduce, 4), (op_reshape, 2), (op_transpose, 2),
       (op_flip, 1), (op_slice, 3), (op_unsqueeze, 1), (op_squeeze, 1), (op_expand, 1), (op_narrow, 1),
       (op_chunk, 2), (op_cat, 2), (op_index, 3), (op_fresh, 1)]

# Views that can be written through (for in-place statements on views of inputs / temporaries).
VIEW_OPS = [op_slice, op_transpose, op_narrow, op_unsqueeze, op_chunk, op_squeeze]
