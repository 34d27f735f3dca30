"""Objects that answer every attribute, or raise errors other than AttributeError, read by compiled code.

``torch.classes`` (a module whose ``__getattr__`` raises RuntimeError for an unknown custom class) sat in a dict
that transformers' Mamba reads; naming it for a guard read ``obj.__qualname__`` and ``str(obj)``, which raised,
and the whole forward ran eagerly ("internal error while compiling"). Mocks and proxies answer ``__qualname__``
with another proxy. Names in generated code come from ``ember.emit.object_name``, which reads them defensively.
Each case: compiled == eager, one graph, and a changed object is still noticed (the guard holds).
"""
from __future__ import annotations

import types

import pytest
import torch

import ember


class RaisingNamespace(types.ModuleType):
    """Like torch._classes._ClassNamespace: any unknown attribute raises RuntimeError (repr() too)."""
    def __getattr__(self, attr):
        raise RuntimeError(f"Tried to instantiate class '{self.__name__}.{attr}'")


class Proxy:
    """Like a mock: every attribute is another proxy."""
    def __init__(self, scale=2.0):
        self.scale = scale

    def __getattr__(self, attr):
        return Proxy()


NS = RaisingNamespace("ns")
PROXY = Proxy(3.0)
TABLE = {"classes": torch.classes, "ns": NS, "proxy": PROXY}


def _global_namespace(x):
    return x * 2 if NS is not None else x


def _dict_of_odd_objects(x):
    return x + len(TABLE) + (TABLE["ns"] is NS) + (TABLE["classes"] is torch.classes)


def _proxy_attribute(x):
    return x * PROXY.scale


CASES = {"global_namespace": _global_namespace, "dict_of_odd_objects": _dict_of_odd_objects,
         "proxy_attribute": _proxy_attribute}


@pytest.mark.parametrize("case", list(CASES))
def test_odd_objects_are_captured(case):
    fn = CASES[case]
    x = torch.randn(5)
    torch.testing.assert_close(ember.compile(fn, fullgraph=True)(x), fn(x))
    ex = ember.explain(fn)(x)
    assert ex.graph_count == 1 and ex.graph_break_count == 0, str(ex)


def test_replaced_odd_object_is_noticed():
    global PROXY
    compiled = ember.compile(_proxy_attribute)
    x = torch.randn(5)
    old = PROXY
    try:
        torch.testing.assert_close(compiled(x), x * 3.0)
        PROXY = Proxy(5.0)
        torch.testing.assert_close(compiled(x), x * 5.0)
    finally:
        PROXY = old
