"""Symbolic versions of the standard-library helpers that library code (nn.Sequential indexing, user loops)
uses on values: itertools (each a lazy iterator over values, like the real one), the dict subclasses of
collections, and ``inspect.signature`` of functions and methods."""
from __future__ import annotations

import collections
import inspect
import itertools
import re
import types

from . import deques
from .builtins_sym import BUILTIN_RULES, _gen
from .interpreter import UserException
from .values import BoundMethod, Const, DictVar, IterVar, TupleVar


def _islice(d, f, it, *bounds):
    b = [d.as_python(f, x) for x in bounds]
    start, stop, step = (0, b[0], 1) if len(b) == 1 else (b + [None])[:3] if len(b) == 2 else b
    start, step = start or 0, step or 1
    it = d.iter(f, it)
    i = 0
    nxt = start
    while stop is None or i < stop:
        ok, v = d.next(f, it)
        if not ok:
            return
        if i == nxt:
            yield v
            nxt += step
        i += 1


def _chain(d, f, *its):
    for x in its:
        it = d.iter(f, x)
        while True:
            ok, v = d.next(f, it)
            if not ok:
                break
            yield v


def _chain_from_iterable(d, f, outer):
    it = d.iter(f, outer)
    while True:
        ok, x = d.next(f, it)
        if not ok:
            return
        yield from _chain(d, f, x)


def _count(d, f, start=Const(0), step=Const(1)):
    i, s = d.as_python(f, start), d.as_python(f, step)
    while True:
        yield Const(i)
        i += s


def _repeat(d, f, v, times=None):
    n = None if times is None else d.as_python(f, times)
    i = 0
    while n is None or i < n:
        yield v
        i += 1


def _product(d, f, *its, repeat=Const(1)):
    pools = [d.unpack_all(f, x) for x in its] * d.as_python(f, repeat)
    for combo in itertools.product(*[range(len(p)) for p in pools]):
        yield TupleVar([pools[k][i] for k, i in enumerate(combo)])


def _accumulate(d, f, it, func=None, initial=None):
    it = d.iter(f, it)
    acc = initial
    if acc is not None:
        yield acc
    while True:
        ok, v = d.next(f, it)
        if not ok:
            return
        acc = v if acc is None else (d.binary(f, "+", acc, v) if func is None else d.call(f, func, [acc, v], {}))
        yield acc


def _pairwise(d, f, it):
    it = d.iter(f, it)
    ok, prev = d.next(f, it)
    while ok:
        ok, v = d.next(f, it)
        if not ok:
            return
        yield TupleVar([prev, v])
        prev = v


def _zip_longest(d, f, *its, fillvalue=Const(None)):
    its = [d.iter(f, x) for x in its]
    while True:
        row, alive = [], False
        for it in its:
            ok, v = d.next(f, it)
            alive |= ok
            row.append(v if ok else fillvalue)
        if not alive:
            return
        yield TupleVar(row)


def _index_tuples(make):
    """An itertools function over a pool's positions (combinations, permutations): the tuples of the pool's
    values at the positions the real function yields, so the order is the real one's."""
    def impl(d, f, it, *rest):
        pool = d.unpack_all(f, it)
        extra = [d.as_python(f, x) for x in rest]
        for combo in make(range(len(pool)), *extra):
            yield TupleVar([pool[i] for i in combo])
    return impl


def _starmap(d, f, func, it):
    it = d.iter(f, it)
    while True:
        ok, v = d.next(f, it)
        if not ok:
            return
        yield d.call(f, func, d.unpack_all(f, v), {})


def _takewhile(d, f, pred, it, drop=False):
    it = d.iter(f, it)
    taking = not drop
    while True:
        ok, v = d.next(f, it)
        if not ok:
            return
        if (drop and taking) or (not drop and not taking):
            yield v
            continue
        holds = d.as_python(f, d.call(f, pred, [v], {}))
        if drop and not holds:
            taking = True
            yield v
        elif not drop:
            if not holds:
                return
            yield v


def _compress(d, f, data, selectors):
    data, sel = d.iter(f, data), d.iter(f, selectors)
    while True:
        ok, v = d.next(f, data)
        ok2, s = d.next(f, sel)
        if not (ok and ok2):
            return
        if d.as_python(f, s):
            yield v


for _fn, _impl in ((itertools.combinations, _index_tuples(itertools.combinations)),
                   (itertools.permutations, _index_tuples(itertools.permutations)),
                   (itertools.combinations_with_replacement, _index_tuples(itertools.combinations_with_replacement)),
                   (itertools.starmap, _starmap), (itertools.takewhile, _takewhile),
                   (itertools.dropwhile, lambda d, f, p, it: _takewhile(d, f, p, it, drop=True)),
                   (itertools.compress, _compress)):
    BUILTIN_RULES[_fn] = _gen(_impl)

for _fn, _impl in ((itertools.islice, _islice), (itertools.chain, _chain),
                   (itertools.chain.from_iterable, _chain_from_iterable), (itertools.count, _count),
                   (itertools.repeat, _repeat), (itertools.product, _product), (itertools.accumulate, _accumulate),
                   (itertools.pairwise, _pairwise), (itertools.zip_longest, _zip_longest)):
    BUILTIN_RULES[_fn] = _gen(_impl)


def _tee(d, f, args, kwargs):
    """``itertools.tee(it, n=2)``: ``n`` lazy iterators over one source, sharing the items fetched so far (the
    source advances only when the furthest one needs a new item, as the real tee's shared buffer does)."""
    if not 1 <= len(args) + len(kwargs) <= 2 or set(kwargs) - {"n"} or (len(args) == 2 and kwargs):
        return NotImplemented
    n = d.as_python(f, args[1] if len(args) == 2 else kwargs.get("n", Const(2)))
    if type(n) is not int:
        raise UserException(TypeError(f"'{type(n).__name__}' object cannot be interpreted as an integer"))
    if n < 0:
        raise UserException(ValueError("n must be >= 0"))
    src = d.iter(f, args[0])
    fetched: list = []
    state = {"done": False}

    def one():
        i = 0
        while True:
            if i == len(fetched):
                if state["done"]:
                    return
                ok, v = d.next(f, src)
                if not ok:
                    state["done"] = True
                    return
                fetched.append(v)
            yield fetched[i]
            i += 1

    return TupleVar([IterVar(one(), "itertools.tee iterator") for _ in range(n)])


BUILTIN_RULES[itertools.tee] = _tee


def _dict_subclass(cls):
    def h(d, f, args, kwargs):
        factory = None
        if cls is collections.defaultdict:
            factory = args[0] if args else Const(None)
            args = args[1:]
        r = DictVar({}, {}, cls, default_factory=factory)
        if args:
            d.call_method(f, r, "update", [args[0]], {})
        for k, v in kwargs.items():
            r.items[k] = v
            r.keys.setdefault(k, Const(k))
        r.mutated = False
        return r
    return h


for _cls in (collections.OrderedDict, collections.defaultdict):
    BUILTIN_RULES[_cls] = _dict_subclass(_cls)
BUILTIN_RULES[collections.deque] = deques.make
BUILTIN_RULES[types.MappingProxyType] = deques.make_proxy


def _signature(d, f, args, kwargs):
    """``inspect.signature`` of a function or of a method bound to any object: it depends on the function
    alone (a bound method drops the first parameter), so it is computed once, at trace time. A Signature is
    immutable, so the result is a constant; other callables run through inspect's own Python code."""
    if len(args) != 1 or kwargs:
        return NotImplemented
    fn = args[0]
    if type(fn) is BoundMethod and type(fn.func) is Const and type(fn.func.value) is types.FunctionType:
        real = types.MethodType(fn.func.value, object())
    elif type(fn) is Const and isinstance(fn.value, (types.FunctionType, types.BuiltinFunctionType)):
        real = fn.value
    else:
        return NotImplemented
    try:
        return Const(inspect.signature(real))
    except (TypeError, ValueError):
        return NotImplemented


BUILTIN_RULES[inspect.signature] = _signature


def _regex(fn):
    """``re.compile``/``re.search``/... on constant patterns and strings: run for real (the compiled pattern
    and the match are immutable values); anything else (a repl function, a traced string) is left to the
    general rules."""
    def rule(d, f, args, kwargs):
        vals = list(args) + list(kwargs.values())
        if not all(type(v) is Const and not callable(v.value) for v in vals):
            return NotImplemented
        try:
            r = fn(*[a.value for a in args], **{k: v.value for k, v in kwargs.items()})
        except (re.error, TypeError, ValueError) as e:
            raise UserException(e) from None
        return d.from_python(r)
    return rule


for _fn in (re.compile, re.search, re.match, re.fullmatch, re.findall, re.split, re.escape):
    BUILTIN_RULES[_fn] = _regex(_fn)
