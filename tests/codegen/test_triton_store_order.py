"""Triton kernels issue their loads before their stores (``triton_gen._stores_last``): a store the compiler
must assume may alias a later load makes a program wait for memory once per store. Checked on the generated
source, and on the rule itself: a load after a store of the same memory (an in-place store) keeps the order."""
from __future__ import annotations

import torch

from ember.codegen.triton_gen import _stores_last
from ember.loopir.kernel import Assign, Store
from tests.codegen.test_combo import _built


def three_updates(p, g, m, v):
    m2 = m * 0.9 + g * 0.1
    v2 = v * 0.999 + g * g * 0.001
    return p - m2 / (v2.sqrt() + 1e-8), m2, v2


def test_stores_come_after_every_load():
    args = [torch.randn(4096), torch.randn(4096), torch.randn(4096), torch.rand(4096)]
    out, fn = _built(three_updates, args)
    (src,) = [s for s in fn.kernel_sources if "tl.store" in s]
    lines = src.splitlines()
    last_load = max(i for i, ln in enumerate(lines) if "tl.load" in ln)
    first_store = min(i for i, ln in enumerate(lines) if "tl.store" in ln)
    assert last_load < first_store, src
    for got, want in zip(out(*args), three_updates(*args)):
        torch.testing.assert_close(got, want)


def _load(var, buf):
    return Assign(var, "load", (buf, 0, None), torch.float32, "x")


def test_a_load_of_memory_stored_before_it_keeps_the_order():
    stmts = [_load("a", "x"), Store("out", 0, "a", "x"), _load("b", "y"), Store("out2", 0, "b", "x")]
    assert _stores_last(stmts, {}) == [stmts[0], stmts[2], stmts[1], stmts[3]]
    # ``out`` is stored in ``y``'s memory: loading ``y`` after it must stay after it
    assert _stores_last(stmts, {"out": "y", "y": "y"}) == stmts
    # a load of the stored buffer itself
    again = [_load("a", "x"), Store("out", 0, "a", "x"), _load("b", "out"), Store("out2", 0, "b", "x")]
    assert _stores_last(again, {}) == again


def test_online_softmax_keeps_a_bodys_fields():
    """The looped-softmax rewrite copies every field of the body it rewrites (found in review: built
    positionally, it put the index extents into ``memory`` once ``memory`` was added)."""
    from ember.loopir.kernel import KernelBody
    from ember.loopir.online import online_softmax
    body = KernelBody(None, [], {"a": (torch.float32, "in")}, {}, aliased={"a", "b"}, memory={"a": "b", "b": "b"},
                      extents={"tmp4": 8192}, scratch={"s": torch.float32})
    out = online_softmax(body)
    assert (out.aliased, out.memory, out.extents, out.scratch) == (body.aliased, body.memory, body.extents,
                                                                   body.scratch)
