"""Kernels doing the same work on other buffers (the layers of a transformer) get the same Triton function
text and name, so that one compile and one Triton cache entry serve all of them; the names from the graph stay
in the comments above each function. Runs under Triton's interpreter (tests/codegen/conftest.py)."""
import torch

import ember
from ember.codegen import triton_gen
from tests.codegen.inputs import INTERPRETED as _interpreted


def test_canonical_names_parameters_and_accumulators_by_position():
    src = ("# ember triton kernel kernel7: ...\n# fuses: buf18=amax\n@triton.jit\ndef f(p_buf17, p_arg3):\n"
           "    tmp0 = tl.load(p_buf17 + x)\n    acc_buf18 = tl.max(tmp0)\n    acc_buf18x = acc_buf18\n"
           "    tl.store(p_arg3 + x, acc_buf18 + acc_buf18x)  # p_buf170 stays\n")
    got = triton_gen.canonical(src, ["buf17", "arg3"])
    head, fn = got.split("@triton.jit")
    assert "buf18=amax" in head and "# parameters: p0=buf17, p1=arg3" in head
    assert "def f(p0, p1):" in fn and "tl.load(p0 + x)" in fn and "tl.store(p1 + x, acc0 + acc1)" in fn
    assert "p_buf170" in fn          # a name that only starts like a parameter is left alone


@_interpreted
def test_layers_get_one_kernel_function(monkeypatch):
    monkeypatch.setattr(triton_gen, "_SHARED", {})
    ws = [torch.randn(24, 24) for _ in range(3)]
    made = []
    real = triton_gen.generate

    def spy(*a, **k):
        out = real(*a, **k)
        made.append(out)
        return out
    monkeypatch.setattr("ember.codegen.triton.generate", spy)

    def fn(x):
        for w in ws:
            x = torch.softmax(torch.relu(x @ w) * 2.0, -1) + x
        return x
    x = torch.randn(16, 24)
    torch.testing.assert_close(ember.compile(fn, options={"cpu_backend": "triton"})(x), fn(x))
    names = [fname for _, fname, _ in made]
    texts = {src[src.index("@triton.jit"):] for src, _, _ in made}
    assert len(made) >= 3 and len(set(names)) < len(names) and len(texts) == len(set(names)), names
