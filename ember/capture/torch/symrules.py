"""Shape rules for the torch-level ops whose meta kernels cannot run on symbolic sizes.

PyTorch's C++ meta/composite kernels of many common ops (``permute``, ``flatten``, ``split``, ``cumsum``,
``where``, ``relu``, ``F.pad``, ``einsum``...) call ``sizes()`` and raise on ``torch.SymInt`` sizes, so the
symbolic meta run of ``symprop.propagate`` cannot give their result sizes. Each rule here computes them from
the arguments' sizes (``TSizes``: a tuple of ``int | sympy.Expr``), with every decision on a symbolic value
going through ``table.decide`` (a recorded relation). ``propagate`` checks each answer against the meta run at
the hints, so a rule that disagrees at the hints is never trusted; a rule must still be right at every size
its relations allow.

Ops whose *number* of outputs depends on a size (``split``, ``chunk``, ``unbind``) decide that number: the
trace unrolls their result, so the entry must only serve sizes that give the same count.
"""
from __future__ import annotations

import sympy
import torch

from .symprop import RULES, Unknown, TSizes, bcast, rule

def _dim(d, n: int) -> int:
    if not isinstance(d, int) or isinstance(d, bool):
        raise Unknown()
    if not -max(n, 1) <= d < max(n, 1):
        raise Unknown()
    return d % max(n, 1)


def _sym(x) -> bool:
    return isinstance(x, sympy.Basic) and bool(x.free_symbols)


def _decide(table, cond) -> bool:
    return table.decide(cond) if isinstance(cond, sympy.Basic) else bool(cond)


def _ceil_div(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return sympy.floor((sympy.sympify(a) + b - 1) / b)


def _arg(args, kwargs, i: int, *names, default=None):
    if len(args) > i:
        return args[i]
    for n in names:
        if n in kwargs:
            return kwargs[n]
    return default


# -- same shape as the first tensor ------------------------------------------------------------------------
@rule("cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "softmax", "log_softmax", "_softmax",
      "relu", "relu_", "gelu", "silu", "mish", "leaky_relu", "elu", "hardtanh", "hardswish", "hardsigmoid",
      "relu6", "sigmoid", "tanh", "clamp", "clamp_min", "clamp_max", "clip", "layer_norm", "group_norm",
      "batch_norm", "instance_norm", "rms_norm", "dropout", "alpha_dropout", "feature_alpha_dropout",
      "dropout1d", "dropout2d", "dropout3d", "roll", "flip", "fliplr", "flipud", "to", "float", "half",
      "double", "bfloat16", "int", "long", "bool", "type", "type_as", "nan_to_num", "normalize",
      "tril", "triu", "tril_", "triu_", "contiguous", "clone", "detach",
      "zeros_like", "ones_like", "empty_like", "rand_like", "randn_like", "full_like", "requires_grad_",
      "cpu", "cuda")
def _same(table, args, kwargs):
    t = args[0] if args else kwargs.get("input", kwargs.get("self"))
    if not isinstance(t, TSizes):
        raise Unknown()
    return tuple(t)


# binary pointwise ops: broadcasting (their C++ meta kernels expand with concrete sizes); in place: self's shape
_BINARY = ("add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow", "rsub",
           "atan2", "hypot", "copysign", "xlogy", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
           "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "truediv", "floordiv", "mod",
           "and_", "or_", "xor")
_INPLACE = ("add_", "sub_", "mul_", "div_", "pow_", "remainder_", "fmod_", "floor_divide_", "iadd", "isub",
            "imul", "itruediv", "ifloordiv", "imod", "ipow")


@rule(*_INPLACE)
def _inplace_binary(table, args, kwargs):
    """``x.add_(y)``: ``y`` (a tensor or a number) broadcasts to ``x``, whose shape the result keeps."""
    t = args[0] if args else None
    if not isinstance(t, TSizes):
        raise Unknown()
    for o in list(args[1:]) + list(kwargs.values()):
        if isinstance(o, TSizes) and tuple(bcast(table, t, o)) != tuple(t):
            raise Unknown()
    return tuple(t)


@rule("masked_fill", "masked_fill_")
def _masked_fill(table, args, kwargs):
    """The mask broadcasts to ``self`` (two symbolic sizes it pairs must be equal: a relation)."""
    t, mask = args[0], _arg(args, kwargs, 1, "mask")
    if not isinstance(mask, TSizes) or tuple(bcast(table, t, mask)) != tuple(t):
        raise Unknown()
    return tuple(t)


@rule("where", "maximum", "minimum", "fmax", "fmin", "lerp", "addcmul", "addcdiv", *_BINARY)
def _broadcast(table, args, kwargs):
    shapes = [a for a in list(args) + list(kwargs.values()) if isinstance(a, TSizes)]
    if not shapes:
        raise Unknown()
    out: tuple = ()
    for s in shapes:
        out = bcast(table, out, s)
    return out


# -- views: permutations and reshapes of dims --------------------------------------------------------------
@rule("permute")
def _permute(table, args, kwargs):
    t = args[0]
    dims = args[1] if len(args) == 2 and isinstance(args[1], tuple) else args[1:] or kwargs.get("dims")
    return tuple(t[_dim(i, len(t))] for i in dims)


@rule("transpose", "swapaxes", "swapdims", "transpose_")
def _transpose(table, args, kwargs):
    t = list(args[0])
    a, b = _dim(_arg(args, kwargs, 1, "dim0"), len(t)), _dim(_arg(args, kwargs, 2, "dim1"), len(t))
    t[a], t[b] = t[b], t[a]
    return tuple(t)


@rule("t")
def _t(table, args, kwargs):
    return tuple(reversed(args[0]))


@rule("movedim", "moveaxis")
def _movedim(table, args, kwargs):
    t = args[0]
    src, dst = _arg(args, kwargs, 1, "source"), _arg(args, kwargs, 2, "destination")
    src, dst = (src if isinstance(src, tuple) else (src,)), (dst if isinstance(dst, tuple) else (dst,))
    n = len(t)
    src, dst = [_dim(s, n) for s in src], [_dim(x, n) for x in dst]
    rest = iter(i for i in range(n) if i not in src)
    placed = dict(zip(dst, src))
    return tuple(t[placed[i]] if i in placed else t[next(rest)] for i in range(n))


@rule("flatten")
def _flatten(table, args, kwargs):
    t = args[0]
    if not t:
        return (1,)
    a = _dim(_arg(args, kwargs, 1, "start_dim", default=0), len(t))
    b = _dim(_arg(args, kwargs, 2, "end_dim", default=-1), len(t))
    p: object = sympy.Integer(1)
    for s in t[a:b + 1]:
        p = p * s
    return tuple(t[:a]) + (_int(p),) + tuple(t[b + 1:])


def _int(e):
    return int(e) if isinstance(e, sympy.Integer) else e


@rule("unflatten")
def _unflatten(table, args, kwargs):
    from .symprop import RULES as _R
    t = args[0]
    d = _dim(_arg(args, kwargs, 1, "dim"), len(t))
    sizes = _arg(args, kwargs, 2, "sizes")
    inner = _R["view"](table, [TSizes((t[d],)), tuple(sizes)], {})
    return tuple(t[:d]) + tuple(inner) + tuple(t[d + 1:])


@rule("squeeze")
def _squeeze(table, args, kwargs):
    t = args[0]
    d = _arg(args, kwargs, 1, "dim")
    dims = range(len(t)) if d is None else [_dim(x, len(t)) for x in (d if isinstance(d, tuple) else (d,))]
    # a symbolic size is >= 2: never squeezed
    return tuple(s for i, s in enumerate(t) if not (i in dims and isinstance(s, int) and s == 1))


@rule("unsqueeze")
def _unsqueeze(table, args, kwargs):
    t = list(args[0])
    d = _dim(_arg(args, kwargs, 1, "dim"), len(t) + 1)
    return tuple(t[:d]) + (1,) + tuple(t[d:])


@rule("select")
def _select(table, args, kwargs):
    t = args[0]
    d = _dim(_arg(args, kwargs, 1, "dim"), len(t))
    return tuple(t[:d]) + tuple(t[d + 1:])


@rule("narrow")
def _narrow(table, args, kwargs):
    t = list(args[0])
    d = _dim(_arg(args, kwargs, 1, "dim"), len(t))
    length = _arg(args, kwargs, 3, "length")
    if not isinstance(length, (int, sympy.Basic)) or isinstance(length, TSizes):
        raise Unknown()
    t[d] = length
    return tuple(t)


@rule("unfold")
def _unfold(table, args, kwargs):
    t = list(args[0])
    d = _dim(_arg(args, kwargs, 1, "dimension"), len(t))
    size, step = _arg(args, kwargs, 2, "size"), _arg(args, kwargs, 3, "step")
    if not (isinstance(size, int) and isinstance(step, int)) or step <= 0:
        raise Unknown()
    if not _decide(table, sympy.Ge(t[d], size) if _sym(t[d]) else t[d] >= size):
        raise Unknown()
    n = t[d] - size
    t[d] = (n // step + 1) if isinstance(n, int) else _int(sympy.floor(n / step) + 1)
    return tuple(t) + (size,)


@rule("repeat")
def _repeat(table, args, kwargs):
    t = args[0]
    reps = args[1] if len(args) == 2 and isinstance(args[1], tuple) else args[1:]
    if len(reps) < len(t):
        raise Unknown()
    full = (1,) * (len(reps) - len(t)) + tuple(t)
    return tuple(_int(sympy.sympify(a) * b) for a, b in zip(full, reps))


# -- sequences of pieces -----------------------------------------------------------------------------------
def _pieces(table, t, d: int, sizes) -> list:
    return [tuple(t[:d]) + (_int(sympy.sympify(s)),) + tuple(t[d + 1:]) for s in sizes]


def _split_even(table, t, d: int, k):
    """``t`` split in pieces of ``k`` along ``d``: the number of pieces is decided (a relation) at the hints."""
    n = t[d]
    count = max(1, int(table.hint(_ceil_div(n, k)) if _sym(n) or _sym(k) else _ceil_div(n, k)))
    # count pieces exactly when (count - 1) * k < n <= count * k
    if not (_decide(table, sympy.Gt(n, (count - 1) * sympy.sympify(k)))
            and _decide(table, sympy.Le(n, count * sympy.sympify(k)))):
        raise Unknown()
    last = sympy.sympify(n) - (count - 1) * sympy.sympify(k)
    return _pieces(table, t, d, [k] * (count - 1) + [last])


@rule("split", "unsafe_split", "split_with_sizes")
def _split(table, args, kwargs):
    t = args[0]
    k = _arg(args, kwargs, 1, "split_size", "split_size_or_sections", "split_sizes")
    d = _dim(_arg(args, kwargs, 2, "dim", default=0), len(t))
    if isinstance(k, tuple) and not isinstance(k, TSizes):
        total = sum((sympy.sympify(s) for s in k), sympy.Integer(0))
        if not _decide(table, sympy.Eq(total, t[d]) if _sym(total) or _sym(t[d]) else total == t[d]):
            raise Unknown()
        return _pieces(table, t, d, k)
    if not isinstance(k, (int, sympy.Basic)) or isinstance(k, bool):
        raise Unknown()
    return _split_even(table, t, d, k)


@rule("chunk")
def _chunk(table, args, kwargs):
    t = args[0]
    c = _arg(args, kwargs, 1, "chunks")
    d = _dim(_arg(args, kwargs, 2, "dim", default=0), len(t))
    if not isinstance(c, int) or c <= 0:
        raise Unknown()
    return _split_even(table, t, d, _int(_ceil_div(t[d], c)))


@rule("unbind")
def _unbind(table, args, kwargs):
    t = args[0]
    d = _dim(_arg(args, kwargs, 1, "dim", default=0), len(t))
    n = t[d]
    if _sym(n):
        n = table.hint(n)
        table.decide(sympy.Eq(t[d], n))      # the trace unrolls one output per index
    return [tuple(t[:d]) + tuple(t[d + 1:])] * int(n)


@rule("stack")
def _stack(table, args, kwargs):
    ts = _arg(args, kwargs, 0, "tensors")
    if not ts or not all(isinstance(x, TSizes) for x in ts):
        raise Unknown()
    shape = _same_shapes(table, ts)
    d = _dim(_arg(args, kwargs, 1, "dim", default=0), len(shape) + 1)
    return tuple(shape[:d]) + (len(ts),) + tuple(shape[d:])


def _same_shapes(table, ts) -> tuple:
    first = ts[0]
    for x in ts[1:]:
        if len(x) != len(first):
            raise Unknown()
        for a, b in zip(first, x):
            if not _decide(table, sympy.Eq(a, b) if _sym(a) or _sym(b) else a == b):
                raise Unknown()
    return tuple(first)


# -- reductions, matmuls, padding, resizing, einsum --------------------------------------------------------
@rule("all", "any", "amax", "amin", "logsumexp", "count_nonzero")
def _reduce(table, args, kwargs):
    t = args[0]
    dim = _arg(args, kwargs, 1, "dim")
    keep = _arg(args, kwargs, 2, "keepdim", default=False)
    if dim is None:
        return tuple(1 for _ in t) if keep else ()
    dims = {_dim(x, len(t)) for x in (dim if isinstance(dim, tuple) else (dim,))}
    return tuple(1 if i in dims else s for i, s in enumerate(t) if keep or i not in dims)


@rule("addmm")
def _addmm(table, args, kwargs):
    a, b = args[1], args[2]
    if len(a) != 2 or len(b) != 2:
        raise Unknown()
    return (a[0], b[1])


@rule("pad")
def _pad(table, args, kwargs):
    t = list(args[0])
    pad = _arg(args, kwargs, 1, "pad")
    if not isinstance(pad, tuple) or len(pad) % 2 or len(pad) // 2 > len(t):
        raise Unknown()
    for k in range(len(pad) // 2):
        d = len(t) - 1 - k
        t[d] = _int(sympy.sympify(t[d]) + pad[2 * k] + pad[2 * k + 1])
        if not _decide(table, sympy.Ge(t[d], 0) if _sym(t[d]) else t[d] >= 0):
            raise Unknown()
    return tuple(t)


@rule("interpolate", "upsample")
def _interpolate(table, args, kwargs):
    t = args[0]
    size, scale = _arg(args, kwargs, 1, "size"), _arg(args, kwargs, 2, "scale_factor")
    n = len(t) - 2
    if n < 1:
        raise Unknown()
    if size is not None:
        size = size if isinstance(size, tuple) else (size,) * n
        return tuple(t[:2]) + tuple(size)
    scale = scale if isinstance(scale, tuple) else (scale,) * n
    if _arg(args, kwargs, 5, "recompute_scale_factor") or len(scale) != n:
        raise Unknown()
    out = []
    for s, f in zip(t[2:], scale):
        if not isinstance(f, (int, float)) or float(f) != int(f):
            raise Unknown()     # floor(s * 1.5) is computed in floating point by PyTorch: not modelled
        out.append(_int(sympy.sympify(s) * int(f)))
    return tuple(t[:2]) + tuple(out)


@rule("einsum")
def _einsum(table, args, kwargs):
    eq = args[0]
    ops = args[1] if len(args) == 2 and not isinstance(args[1], TSizes) else args[1:]
    if not isinstance(eq, str) or "." in eq or not all(isinstance(o, TSizes) for o in ops):
        raise Unknown()
    eq = eq.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ops):
        raise Unknown()
    size: dict = {}
    for term, o in zip(terms, ops):
        if len(term) != len(o):
            raise Unknown()
        for c, n in zip(term, o):
            size[c] = bcast(table, (size[c],), (n,))[0] if c in size else n
    if "->" not in eq:
        rhs = "".join(sorted(c for c in size if lhs.count(c) == 1))
    return tuple(size[c] for c in rhs)


_ = (torch, RULES)
