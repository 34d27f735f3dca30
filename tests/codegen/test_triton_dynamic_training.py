"""Triton kernels of a training graph with symbolic sizes, forward and backward (issue 33), run by Triton's
interpreter on CPU tensors (tests/codegen/conftest.py sets TRITON_INTERPRET).

For each program (``dynamic=True``, three sizes): outputs and gradients equal eager's, one graph serves every
size (the kernels of both passes take the sizes as arguments, none is pasted into their source), and every
reduction over a symbolic row gets the launch blocks the static compile of the hinted size chooses
(``triton_gen.launch_config``'s ``hinted_row``): looped, so valid for every row length, but RBLOCK and XBLOCK
sized at the hint. Before, such a reduction ran one row per program with RBLOCK=2048 (inner rows) or 64
(outer) whatever the hint: a backward's 32-wide layer-norm rows used 1/64 of each block.
"""
from __future__ import annotations

import importlib.util
import logging
import re

import pytest
import torch
import torch.nn.functional as F

import ember

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed"),
    pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA machine: the GPU tests cover Triton there"),
]


def _bn(x, w, b):
    mean = x.mean((0, 2, 3), keepdim=True)
    var = x.var((0, 2, 3), keepdim=True, unbiased=False)
    return torch.relu((x - mean) * torch.rsqrt(var + 1e-5) * w.view(1, -1, 1, 1) + b.view(1, -1, 1, 1))


def _rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _attention(q, k, v):
    return (q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5).softmax(-1) @ v


def _r(*s):
    return torch.randn(*s)


# name -> (function, inputs for size n): every size of the inputs is symbolic (dynamic=True)
PROGRAMS = {
    "layer_norm": (lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b).tanh(),
                   lambda n: (_r(n, 2 * n - 1), _r(2 * n - 1), _r(2 * n - 1))),
    "rms_norm": (_rms, lambda n: (_r(3, n, n + 8), _r(n + 8))),
    "batch_norm": (_bn, lambda n: (_r(n, 6, 5, n), _r(6), _r(6))),
    "softmax_rows": (lambda x: x.softmax(-1) * x.shape[0], lambda n: (_r(n + 20, n),)),
    "log_softmax_cols": (lambda x: x.log_softmax(0).exp().sum(1), lambda n: (_r(n, 3 * n),)),
    "attention": (_attention, lambda n: (_r(2, n, 8), _r(2, n, 8), _r(2, n, 8))),
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t),
                      lambda n: (_r(2 * n, n + 3), torch.randint(0, n + 3, (2 * n,)))),
}
SIZES = (17, 12, 23)
_HEADER = re.compile(r"# ember triton kernel \w+: xnumel=(\S+) rnumel=(\S+) (persistent|looped) XBLOCK=(\d+) "
                     r"RBLOCK=(\d+)")
_GRAPH = re.compile(r"^def ((?:forward|backward|inference)_\d+)\(")


def _kernels(text: str) -> tuple[dict, dict]:
    """Per graph kind (forward/backward): the (XBLOCK, RBLOCK) pairs of its 2-D kernels, and the signature of
    each kernel whose extents are symbolic. (Pairs, not kernels: a symbolic elementwise kernel may iterate
    (s0, s1) where the static one flattens it, log_softmax_cols's backward.)"""
    out: dict[str, list] = {}
    params: dict[str, list] = {}
    kind, symbolic = None, False
    for line in text.splitlines():
        m = _GRAPH.match(line)
        if m:
            kind = m.group(1).split("_")[0]
            continue
        h = _HEADER.match(line)
        if h and kind is not None:
            symbolic = bool(re.search(r"s\d", h.group(1) + h.group(2)))
            if h.group(2) != "1":
                out.setdefault(kind, []).append((int(h.group(4)), int(h.group(5))))
        if kind is not None and line.startswith("def ember_") and symbolic:
            params.setdefault(kind, []).append(line)
    return {k: sorted(set(v)) for k, v in out.items()}, params


def _compile_and_run(fn, args, dynamic, caplog):
    ember.reset()
    caplog.clear()
    c = ember.compile(fn, dynamic=dynamic, options={"cpu_backend": "triton"})
    ember.set_logs(output_code=True)
    try:
        with caplog.at_level(logging.INFO, logger="ember"):
            out = _run(c, args)
    finally:
        ember.set_logs(output_code=False)
    return c, out, "\n".join(r.getMessage() for r in caplog.records)


def _run(fn, args):
    args = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
    out = fn(*args)
    g = torch.autograd.grad((out * torch.linspace(0.5, 1.5, out.numel()).reshape(out.shape)).sum(),
                            [a for a in args if a.requires_grad])
    return out, g


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_training_kernels_with_symbolic_sizes(name, caplog):
    fn, inputs = PROGRAMS[name]
    torch.manual_seed(0)
    args = inputs(SIZES[0])
    _, _, static_src = _compile_and_run(fn, args, False, caplog)
    c, _, src = _compile_and_run(fn, args, True, caplog)
    blocks, params = _kernels(src)
    assert set(params) == {"forward", "backward"}, src
    for kind, defs in params.items():       # sizes are arguments, never constants of the source
        assert all(re.search(r"\bs\d+\)", d) for d in defs), (kind, defs)
    assert blocks == _kernels(static_src)[0], (blocks, _kernels(static_src)[0])
    for n in SIZES:
        torch.manual_seed(n)
        args = inputs(n)
        (got, ggot), (want, gwant) = _run(c, args), _run(fn, args)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        for a, b in zip(ggot, gwant):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    stats = ember.stats()
    assert stats["graphs_compiled"] == 1 and stats["symbolic_graphs"] == 1, stats
    assert stats["fallbacks_to_eager"] == 0, stats
