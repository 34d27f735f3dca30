"""``copy.copy``/``copy.deepcopy`` of user objects inside compiled code, and ``id()`` of values the trace made.

transformers builds its KV cache inside ``forward`` from a deep copy of the model's config (a class with its
own ``__getattribute__``); ``object.__reduce_ex__`` is written in C, so every decoder call broke the graph
(T5, BART, Whisper). Each case: compiled == eager (the result, the original object untouched, the copy's
independence) and, where the class is a plain Python class, one graph with no break.
"""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

import ember


class Plain:
    def __init__(self):
        self.scale = 2.0
        self.sub = {"k": [1, 2, 3]}
        self.name = "cfg"


class WithGetattribute:
    """Like transformers' PreTrainedConfig: an attribute map read through ``__getattribute__``."""
    attribute_map = {"hidden": "hidden_size"}

    def __init__(self):
        self.hidden_size = 3
        self.layers = [4, 5]

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


class Empty:
    pass


@dataclasses.dataclass
class DC:
    scale: float = 3.0
    dims: tuple = (1, 2)
    extra: dict = dataclasses.field(default_factory=lambda: {"a": [1.5]})


class Shared:
    """Two attributes name one list: a deep copy keeps them one list (the memo keys on id())."""
    def __init__(self):
        self.a = [1.0, 2.0]
        self.b = self.a


def _deep_plain(x, o):
    c = copy.deepcopy(o)
    c.sub["k"].append(4)
    c.scale = 5.0
    return x * c.scale + len(c.sub["k"]) + x * o.scale + len(o.sub["k"])


def _deep_getattribute(x, o):
    c = copy.deepcopy(o)
    c.layers.append(6)
    return x * c.hidden + sum(c.layers) + len(o.layers)


def _deep_empty(x, o):
    c = copy.deepcopy(o)
    return x + (type(c) is Empty) + (c is not o)


def _deep_dataclass(x, o):
    c = copy.deepcopy(o)
    c.extra["a"].append(2.5)
    return x * c.scale + sum(c.extra["a"]) + len(o.extra["a"]) + (c == o)


def _deep_shared(x, o):
    c = copy.deepcopy(o)
    c.a.append(3.0)
    return x + len(c.b) + len(o.b) + (c.a is c.b)


def _shallow(x, o):
    c = copy.copy(o)
    c.scale = 7.0
    c.sub["k"].append(9)         # shared with the original: eager mutates o.sub too
    return x * c.scale + x * o.scale + len(o.sub["k"])


CASES = [("deepcopy_plain", _deep_plain, Plain), ("deepcopy_getattribute", _deep_getattribute, WithGetattribute),
         ("deepcopy_empty", _deep_empty, Empty), ("deepcopy_dataclass", _deep_dataclass, DC),
         ("deepcopy_shared_alias", _deep_shared, Shared), ("copy_plain", _shallow, Plain)]


@pytest.mark.parametrize("name,fn,cls", CASES, ids=[c[0] for c in CASES])
def test_copy_of_object_in_one_graph(name, fn, cls):
    x = torch.randn(4)
    o_eager, o_comp = cls(), cls()
    expected = fn(x, o_eager)
    got = ember.compile(fn)(x, o_comp)
    torch.testing.assert_close(got, expected)
    assert vars(o_comp) == vars(o_eager)            # the original changed only as eager changed it
    expected2 = fn(x, o_eager)
    torch.testing.assert_close(ember.compile(fn)(x, o_comp), expected2)
    ex = ember.explain(fn)(x, cls())
    assert ex.graph_count == 1 and ex.graph_break_count == 0, str(ex)


class Slotted:
    __slots__ = ("a",)

    def __init__(self):
        self.a = [1]


class OwnReduce:
    def __init__(self, v=1):
        self.v = v

    def __reduce__(self):
        return (OwnReduce, (self.v + 10,))


@pytest.mark.parametrize("cls", [Slotted, OwnReduce])
def test_copy_of_other_classes_matches_eager(cls):
    """Classes whose C reduce path differs are not restated: they may break, but they compute what eager does."""
    def fn(x, o):
        c = copy.deepcopy(o)
        return x + (c is not o) + (getattr(c, "v", 0))
    x = torch.randn(3)
    torch.testing.assert_close(ember.compile(fn)(x, cls()), fn(x, cls()))


def test_id_of_values_made_in_the_trace():
    def fn(x):
        a, b = [1], {"k": 2}
        alias = a
        memo = {id(a): "a", id(b): "b"}
        return x + (id(a) == id(alias)) + (id(a) != id(b)) + len(memo) + (memo[id(alias)] == "a")
    x = torch.randn(3)
    torch.testing.assert_close(ember.compile(fn)(x), fn(x))
    ex = ember.explain(fn)(x)
    assert ex.graph_count == 1 and ex.graph_break_count == 0, str(ex)
