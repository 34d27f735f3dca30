"""The kernel compiler's tuning constants (ember.heuristics): one frozen object reached from the options. A
compile with ``options={"heuristics": {...}}`` uses those values (here: fusion capped at one node per kernel
makes more kernels), the next compile without them uses the defaults again, results equal eager either way,
and a misspelt field is a clear error."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import ember
import ember.heuristics as H
from ember.options import make_options


def _chain(x):
    return ((x * 2).sin() + 1).relu().cos()


def _kernel_count(options):
    from ember.autograd.aot import decompose_graph
    from ember.autograd.trace import trace_aten
    from ember.codegen import compile_graph
    gm = decompose_graph(trace_aten(_chain, (torch.randn(64),), training=False).gm)
    fn = compile_graph(gm, "inference", make_options(None, options))
    x = torch.randn(64)
    torch.testing.assert_close(fn(x)[0], _chain(x))
    return fn.source.count("kernel")


def test_heuristics_from_the_options_change_the_code_and_do_not_leak():
    fused = _kernel_count(None)
    split = _kernel_count({"heuristics": {"max_inline_ops": 1, "max_kernel_nodes": 1}})  # a kernel per op
    assert split > fused
    assert _kernel_count(None) == fused
    assert H.heuristics() == H.DEFAULT


def test_compile_with_heuristics_equals_eager():
    f = ember.compile(_chain, options={"heuristics": H.Heuristics(max_kernel_nodes=2, cpp_tile=16)})
    x = torch.randn(257)
    torch.testing.assert_close(f(x), _chain(x))


@pytest.mark.parametrize("bad, err", [({"max_kernel_nodez": 3}, ValueError), ("fast", TypeError),
                                      ([("max_kernel_nodes", 3)], TypeError)])
def test_bad_heuristics_are_clear_errors(bad, err):
    with pytest.raises(err, match="heuristics"):
        make_options(None, {"heuristics": bad})


def test_heuristics_are_frozen_and_documented():
    h = H.Heuristics()
    with pytest.raises(dataclasses.FrozenInstanceError):
        h.max_kernel_nodes = 3     # type: ignore[misc]
    assert "heuristics" in ember.list_options()
    with H.override(max_kernel_nodes=5):
        assert H.heuristics().max_kernel_nodes == 5
    assert H.heuristics().max_kernel_nodes == H.DEFAULT.max_kernel_nodes
