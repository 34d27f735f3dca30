"""A C++ outer reduction whose kept points are a symbolic batch times a multiple of the vector width (a
channels-last global pool over 16 or 32 channels, any batch) vectorizes across them as the static kernel
does (``cpp_colred.XVec``): symbolic kernels used to take the scalar loop, and the quick suite's ResNet
compiled with a symbolic batch ran 7-17% slower than static (issue 33). Values equal eager's at several
batch sizes."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import ember
import ember.codegen.wrapper as wrapper

from tests.loopir.backends import CPU_BACKENDS


def _nhwc(b, c, h, w):
    return torch.randn(b, c, h, w).to(memory_format=torch.channels_last)


# name: (function, channels, spatial size)
CASES = {
    "avg_pool_16": (lambda x: x.mean((2, 3)), 16, 8),
    "avg_pool_32": (lambda x: x.mean((2, 3)), 32, 6),
    "relu_sum_16": (lambda x: F.relu(x).sum((2, 3)), 16, 5),
    "adaptive_pool_linear_32": (lambda x: F.adaptive_avg_pool2d(x * 2 + 1, 1).flatten(1).square(), 32, 4),
}


@pytest.mark.skipif("cpp" not in CPU_BACKENDS, reason="needs a C++ compiler")
@pytest.mark.parametrize("name", sorted(CASES))
def test_symbolic_batch_pool_is_vectorized(name, monkeypatch):
    fn, c, hw = CASES[name]
    sources: list[str] = []
    real = wrapper.make_wrapper

    def spy(*a, **k):
        out = real(*a, **k)
        sources.extend(out.kernel_sources)
        return out
    monkeypatch.setattr(wrapper, "make_wrapper", spy)
    ember.reset()
    f = ember.compile(fn, options={"cpu_backend": "cpp"})
    for b in (3, 5, 7, 2):
        x = _nhwc(b, c, hw, hw)
        if b == 3:
            ember.mark_dynamic(x, 0)
        torch.testing.assert_close(f(x), fn(x), rtol=1e-5, atol=1e-5)
    kernels = [k for k in "\n".join(sources).split("extern \"C\"") if "rindex" in k]
    pools = [k for k in kernels if re.search(r"xindex < \(?\d+ ?\* ?s\d+\)?", k)]
    assert pools, "no reduction kernel over a symbolic batch:\n" + "\n".join(kernels)
    for k in pools:
        assert "xindex += EMBER_VW" in k and "ember_vload" in k, k
