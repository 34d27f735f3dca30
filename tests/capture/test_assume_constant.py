"""Functions marked ``torch._dynamo.assume_constant_result`` (the attribute ``_dynamo_marked_constant``;
transformers 5 marks its install probes such as ``is_torch_distributed_available()`` that way, under
``lru_cache``). Called on constant arguments, the trace runs them once and uses the result as a constant, as
torch.compile does, rather than tracing their bodies (regexes and ``importlib.metadata`` there broke
Wav2Vec2's graph four times). Differential: compiled == eager, no graph break.
"""
from __future__ import annotations

import functools
import re

import pytest
import torch

import ember

_NORM = re.compile(r"[-_.]+")


def _mark(fn):
    fn._dynamo_marked_constant = True        # what transformers' _make_compile_constant does
    return fn


@functools.lru_cache
@_mark
def probe_available() -> bool:              # transformers' spelling: lru_cache above the marker
    return _NORM.sub("-", "Torch.Distributed").lower() == "torch-distributed"


@torch._dynamo.assume_constant_result
def normalized(name: str) -> str:          # torch's own decorator, constant arguments
    return _NORM.sub("-", name).lower()


@_mark
def version_tuple() -> tuple:
    return tuple(int(p) for p in _NORM.sub(".", "2_13-0").split("."))


@functools.lru_cache(maxsize=8)
@_mark
def scale_for(kind: str) -> float:
    return {"a-b": 2.0}.get(_NORM.sub("-", kind), 0.5)


def _uses_probe(x):
    return x.sin() if probe_available() else x.cos()


def _uses_normalized(x):
    return x * len(normalized("Foo_Bar.baz"))


def _uses_tuple(x):
    major, minor, _ = version_tuple()
    return x + major * 10 + minor


def _uses_cached_arg(x):
    return x * scale_for("a_b") + scale_for("c")


CASES = [_uses_probe, _uses_normalized, _uses_tuple, _uses_cached_arg]


@pytest.mark.parametrize("fn", CASES, ids=[c.__name__ for c in CASES])
def test_marked_constant_runs_once_no_break(fn):
    ember.reset()
    compiled = ember.compile(fn)
    for _ in range(2):
        x = torch.randn(6)
        torch.testing.assert_close(compiled(x), fn(x))
    assert ember.stats()["graph_breaks"] == 0, ember.stats()


def test_marked_function_with_tensor_argument_is_traced():
    @torch._dynamo.assume_constant_result
    def double(t):
        return t * 2                       # not a constant call: traced as usual

    def fn(x):
        return double(x) + 1

    ember.reset()
    x = torch.randn(4)
    torch.testing.assert_close(ember.compile(fn)(x), fn(x))
