"""Reproducers from PyTorch's Dynamo test files run against ember, third batch (issue 32, tools/peer): each
compiled and compared with eager on fresh inputs."""
from __future__ import annotations

import re

import pytest
import torch

import ember
from ember.errors import Unsupported


# -- breaks the user asked for ------------------------------------------------------------------------------
# torch._dynamo.graph_break() and a call to a torch.compiler.disable'd function are graph breaks: under
# fullgraph=True they raise ember.Unsupported naming the line; otherwise the call runs eagerly (a disabled
# function sees torch.compiler.is_compiling() False, as in eager) and the rest is compiled.
_SEEN: list[bool] = []


def _record(x):
    _SEEN.append(torch.compiler.is_compiling())
    return x.sin()


_tc_disabled = torch.compiler.disable(_record)
_td_disabled = torch._dynamo.disable(_record)
_td_disabled_shallow = torch._dynamo.disable(_record, recursive=False)


def _graph_break_top(x):
    x = x + 1
    torch._dynamo.graph_break()
    return x * 2


def _graph_break_nested(x):
    def inner(y):
        torch._dynamo.graph_break()
        return y.cos()
    return inner(x + 1) * 2


def _graph_break_in_loop(x):
    for i in range(2):
        x = x + i
        torch._dynamo.graph_break()
    return x


def _compiler_disable(x):
    return _tc_disabled(x + 1) * 2


def _dynamo_disable(x):
    return _td_disabled(x + 1) * 2


def _dynamo_disable_not_recursive(x):
    return _td_disabled_shallow(x + 1) * 2


def _disable_decorator_nested(x):
    @torch.compiler.disable
    def inner(y):
        _SEEN.append(torch.compiler.is_compiling())
        return y.tan()
    return inner(x + 1) - 1


class _Holder:
    @torch.compiler.disable
    def method(self, y):
        _SEEN.append(torch.compiler.is_compiling())
        return y.exp()


_HOLDER = _Holder()


def _disable_method(x):
    return _HOLDER.method(x + 1) * 3


_BREAKS = [_graph_break_top, _graph_break_nested, _graph_break_in_loop, _compiler_disable, _dynamo_disable,
           _dynamo_disable_not_recursive, _disable_decorator_nested, _disable_method]


@pytest.mark.parametrize("fn", _BREAKS, ids=lambda f: f.__name__)
def test_requested_break_raises_under_fullgraph(fresh_ember, fn):
    with pytest.raises(Unsupported, match=re.escape(__file__.rsplit("/", 1)[-1])):
        ember.compile(fn, fullgraph=True, backend="eager")(torch.randn(3))


@pytest.mark.parametrize("fn", _BREAKS, ids=lambda f: f.__name__)
def test_requested_break_runs_eagerly(fresh_ember, fn):
    x = torch.randn(3)
    _SEEN.clear()
    expected = fn(x.clone())
    seen_eager = list(_SEEN)
    _SEEN.clear()
    before = ember.stats()["graph_breaks"]
    got = ember.compile(fn, backend="eager")(x.clone())
    torch.testing.assert_close(got, expected)
    assert _SEEN == seen_eager        # the disabled function ran eagerly, once per eager call
    assert ember.stats()["graph_breaks"] > before
