"""Python subclasses of set/frozenset made inside compiled code, and explicit operator-dunder calls on built-in
containers (issue 32: test_sets.py of PyTorch's Dynamo tests). Each case runs compiled under fullgraph and
eagerly on copies of the same inputs: the results (values and exact types), the inputs' contents afterwards
(side effects) must agree."""
from __future__ import annotations

import collections
import copy
import typing

import pytest
import torch
from torch.utils._ordered_set import OrderedSet

import ember


class AddOne(set):
    def add(self, item):
        return super().add(item + 1)


class Tagged(set):
    def __init__(self, items, tag):
        super().__init__(items)
        self.tag = tag


class FSub(frozenset):
    pass


class SSub(set):
    pass


class NewList(list):
    def __new__(cls, arg, tag=None):
        self = super().__new__(cls)
        self.tag = tag
        return self

    def __init__(self, arg, tag=None):
        super().__init__(arg)


class GrandNewList(NewList):
    pass


class PlainList(list):
    pass


class GrandPlainList(PlainList):
    pass


class Stack(list):
    def push(self, v):
        self.append(v)
        return self


class Doubling(tuple):
    def __new__(cls, it):
        return super().__new__(cls, [2 * v for v in it])


class Pair(typing.NamedTuple):
    a: int
    b: int


class ScaledPair(Pair):
    def __new__(cls, a, b=1):
        return super().__new__(cls, a * 10, b)


T = typing.TypeVar("T")


def _override_calls_base(x, s):
    a = AddOne([1, 2])
    a.add(3)
    set.add(a, 10)
    s.add(len(a))
    return x + len(a), a == {1, 2, 4, 10}, 4 in a, sorted(a)


def _binops_give_base_type(x, s):
    p, q = SSub("abc"), SSub("bef")
    outs = [p | q, p & q, p - q, p ^ q, FSub("ab") | FSub("bc"), SSub.__sub__(p, q)]
    return x * len(outs[0]), [(type(o).__name__, sorted(o)) for o in outs]


def _comparisons(x, s):
    p, r = FSub("abc"), SSub("ab")
    res = [r < p, r <= p, p > r, p >= p, p == set("abc"), p != frozenset("abd"), r == SSub("ab"),
           p.issuperset(r), r.issubset(p), p.isdisjoint(SSub("z"))]
    return x + sum(res), res


def _frozenset_subclass_hashes_by_value(x, s):
    k = FSub("ab")
    d = {k: 1}
    return x + d[frozenset("ab")], k in {frozenset("ab")}, frozenset("ba") in {k}, hash(k) == hash(frozenset("ab"))


def _frozenset_subclass_from_generator(x, s):
    f = FSub(c.upper() for c in "abc")
    c = f.copy()
    return x * len(f), type(c).__name__, sorted(c), c is f


def _copies_that_are_the_object(x, s):
    p, t = frozenset("abc"), (1, 2)
    return x + 1, [p.copy() is p, frozenset.copy(p) is p, frozenset(p) is p, tuple(t) is t, t[:] is t,
                   t[0:2] is t, t[::-1] is t, FSub(p) is p]


def _inplace_ops_keep_object(x, s):
    a = SSub("ab")
    b = a
    a |= {"z"}
    a -= {"a"}
    a ^= SSub("bq")
    a &= {"z", "q", "w"}
    return x + len(a), a is b, type(a).__name__, sorted(a)


def _python_init_and_attrs(x, s):
    t = Tagged([3, 1], tag="t1")
    t.update([5])
    s |= t
    return x * t.tag.count("t"), sorted(t), t.tag, len(s)


def _repr_in_fstring(x, s):
    a, f = SSub([1]), FSub([2])
    return x + 1, f"{a} {f} {str(a)}"


def _set_key_in_subclass(x, s):
    c = SSub([frozenset("ab")])
    hit = set("ab") in c
    c.discard(SSub("ab"))
    return x + hit, len(c)


def _update_methods(x, s):
    p, q = SSub("abcd"), set("bcx")
    p.difference_update(q, "d")
    q.intersection_update({"b", "x"}, "bx")
    r = set("ab")
    set.symmetric_difference_update(r, SSub("bc"))
    s.difference_update({1})
    return x + len(p), sorted(p), sorted(q), sorted(r)


def _explicit_dunders(x, s):
    p, q = {1, 2}, frozenset({2, 3})
    return x + 1, [set.__or__(p, q), set.__sub__(p, q), frozenset.__and__(q, p), set.__xor__(p, q),
                   set.__or__(p, 1), set.__eq__(p, {2, 1}), set.__ne__(p, [1, 2]), set.__le__(p, 3),
                   [1].__add__([2]), [1].__eq__((1,)), (1, 2).__lt__((1, 3)), (1,).__eq__([1]),
                   {1: 2}.__or__({3: 4}), {1: 2}.__or__(5), p.__contains__(1), sorted(p.__iter__())]


def _returned_subclass_objects(x, s):
    t = Tagged("ab", tag="out")
    return x + 1, t, FSub("xy"), SSub()


def _ordered_set_ops(x, s):
    a = OrderedSet(["c", "b", "a"])
    b = OrderedSet(["b", "d"])
    outs = [a | b, a & b, a - b, a ^ b, a.union(b), a.intersection(b), a.difference(b)]
    return x * len(a), [list(o) for o in outs], a != b, a == OrderedSet("cba"), a <= OrderedSet("abcd")


def _generic_alias_of_module_typevar(x, s):
    alias = typing.cast(OrderedSet[T], OrderedSet([1]))
    return x + len(alias), list[T] == list[T]


class _EqOnly:
    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return isinstance(other, _EqOnly) and other.v == self.v

    def __ne__(self, other):
        return super().__ne__(other)


def _object_ne_through_super(x, s):
    a, b, c = _EqOnly(1), _EqOnly(1), _EqOnly(2)
    return x + 1, [a != b, a != c, a.__ne__(3), object.__eq__(a, a), object.__eq__(a, b)]


def _ordering_with_unrelated_type(x, s):
    outs = []
    for op in (lambda a: a <= 1, lambda a: 1 < a, lambda a: a > "s"):
        try:
            outs.append(op(OrderedSet([1])))
        except TypeError as e:
            outs.append(str(e))
    return x + 1, outs


def _list_subclass_new_via_super(x, s):
    a, b = NewList([1, 2, 3], tag=7), GrandNewList([4])
    return x + len(a) + a.tag, a, b, type(b).__name__, b.tag, list(a)


def _list_subclass_plain(x, s):
    c = GrandPlainList([5, 6])
    c.append(1)
    st = Stack().push(1).push(2)
    return x * len(c), c, c + [9], c == [5, 6, 1], 6 in c, c[1:], sorted(c), repr(c), st, st[-1], type(c + [9])


def _container_new_called_directly(x, s):
    e = list.__new__(list, [1, 2], extra="ignored")
    e.append(3)
    z = GrandPlainList.__new__(GrandPlainList, [1, 2], extra="ignored")
    return x + 1, e, z, type(z).__name__, set.__new__(set, [1]), dict.__new__(dict)


def _tuple_subclass_new_runs_once(x, s):
    d, p = Doubling([1, 2]), ScaledPair(2)
    return x + d[0] + p.a, d, p, Pair(3, 4), type(d).__name__, tuple(d) == (2, 4), p == (20, 1)


def _tuple_new_checks(x, s):
    out = []
    for call in (lambda: tuple.__new__(tuple, [1], extra=1), lambda: tuple.__new__(tuple, [1], [2]),
                 lambda: tuple.__new__(list, [1])):
        try:
            call()
        except TypeError as e:
            out.append(str(e))
    return x + 1, out, tuple.__new__(Doubling, [5])


CASES = [_tuple_subclass_new_runs_once, _tuple_new_checks, _list_subclass_new_via_super, _list_subclass_plain, _container_new_called_directly,
         _override_calls_base, _binops_give_base_type, _comparisons, _frozenset_subclass_hashes_by_value,
         _frozenset_subclass_from_generator, _copies_that_are_the_object, _inplace_ops_keep_object,
         _python_init_and_attrs, _repr_in_fstring, _set_key_in_subclass, _update_methods, _explicit_dunders,
         _returned_subclass_objects, _ordered_set_ops, _generic_alias_of_module_typevar, _object_ne_through_super,
         _ordering_with_unrelated_type]


def _same(a, b):
    assert type(a) is type(b), (a, b)
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for u, v in zip(a, b):
            _same(u, v)
    else:
        assert a == b, (a, b)
        assert getattr(a, "__dict__", None) == getattr(b, "__dict__", None), (a, b)


@pytest.mark.parametrize("fn", CASES, ids=[c.__name__.lstrip("_") for c in CASES])
def test_container_subclasses_and_dunders(fresh_ember, fn):
    x, s = torch.randn(3), {1, 2}
    s_eager, s_ember = copy.copy(s), copy.copy(s)
    want = fn(x, s_eager)
    got = ember.compile(fn, backend="eager", fullgraph=True)(x, s_ember)
    _same(got, want)
    assert s_ember == s_eager


# -- objects that existed before the call: their class overrides a method and reaches the C base through super()
class PlusOneDict(dict):
    def __getitem__(self, k):
        return super().__getitem__(k) + 1

    def __iter__(self):
        return iter(sorted(super().keys(), reverse=True))


class Lookup(dict):
    """transformers' ClassInstantier: __getitem__ builds from what the base type stores."""
    def __getitem__(self, key):
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


class Members(set):
    def __contains__(self, x):
        return super().__contains__(x) or super().__contains__(-x)


def _existing_super_getitem(x, o):
    return x * o["a"] + len(o), list(o), "b" in o, dict.get(o, "b", 0), sorted(dict.items(o))


def _existing_lookup_instantiates(x, o):
    return o["relu"](x), o["gelu"](x)


def _existing_set_super_contains(x, o):
    return x + (3 in o) + (-2 in o) + (7 in o), len(o), sorted(o)


def _existing_mutation_through_base_breaks(x, o):
    dict.__setitem__(o, "z", 1)
    return x + 1


EXISTING = [
    (_existing_super_getitem, lambda: PlusOneDict(a=2, b=3), lambda: PlusOneDict(a=5, c=1)),
    (_existing_lookup_instantiates, lambda: Lookup(relu=torch.nn.ReLU, gelu=(torch.nn.GELU, {"approximate": "tanh"})),
     lambda: Lookup(relu=torch.nn.Tanh, gelu=torch.nn.GELU)),
    (_existing_set_super_contains, lambda: Members({2, 3}), lambda: Members({7, 1})),
]


@pytest.mark.parametrize("fn,make,make_other", EXISTING, ids=[c[0].__name__.lstrip("_") for c in EXISTING])
def test_existing_container_subclass_reaches_its_base(fresh_ember, fn, make, make_other):
    """The object's items as its base type stores them are guarded: a call with other contents recompiles."""
    compiled = ember.compile(fn, backend="eager", fullgraph=True)
    for mk in (make, make, make_other):
        x = torch.randn(3)
        _same(compiled(x, mk()), fn(x, mk()))


def test_existing_container_subclass_base_mutation_is_replayed(fresh_ember):
    """Changing an existing object's items through its base type is captured and replayed on the object
    (through the base type, so the class's overrides do not run again), also under fullgraph=True."""
    for fullgraph in (True, False):
        o = PlusOneDict(a=1)
        ember.compile(_existing_mutation_through_base_breaks, backend="eager", fullgraph=fullgraph)(torch.ones(1), o)
        assert sorted(dict.items(o)) == [("a", 1), ("z", 1)]


# -- dict subclasses that ember holds as plain mappings (their __iter__/__getitem__ are dict's)
class PlainSub(dict):
    pass


class Doubler(dict):
    """A constructor that transforms its items: remaking the mapping through the class would double again."""
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        for key in list(dict.keys(self)):
            dict.__setitem__(self, key, dict.__getitem__(self, key) * 2)


class OSub(collections.OrderedDict):
    pass


class DSub(collections.defaultdict):
    pass


def _mapping_copy_types(x, d, o, dd):
    c, oc, dc = d.copy(), o.copy(), dd.copy()
    return x + 1, [type(c).__name__, c, type(d | {"z": 1}).__name__, type(oc).__name__, oc, type(dc).__name__,
                   dc.default_factory, dict(dc)]


def _mapping_made_again_not_transformed(x, d, o, dd):
    return x + 1, [str(d), sorted(d.values()), d == {"a": 2}, max(d.values())]


def _mapping_new_subclass_returned(x, d, o, dd):
    n = Doubler(b=3)
    n["c"] = 1
    return x + 1, n, type(n).__name__


MAPPING_CASES = [_mapping_copy_types, _mapping_made_again_not_transformed, _mapping_new_subclass_returned]


@pytest.mark.parametrize("fn", MAPPING_CASES, ids=[c.__name__.lstrip("_") for c in MAPPING_CASES])
def test_dict_subclass_values(fresh_ember, fn):
    def inputs():
        return Doubler(a=1), OSub(b=2), DSub(list, k=[1])
    x = torch.randn(3)
    want = fn(x, *inputs())
    got = ember.compile(fn, backend="eager", fullgraph=True)(x, *inputs())
    _same(got, want)
