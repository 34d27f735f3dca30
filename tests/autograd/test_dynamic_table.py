"""Dynamic shapes through AOT autograd (and the kernel compiler): the program table of tests/dynamic_programs.py
run with backend "aot_eager" and "ember", for inference and for training.

For each program and its sequence of sizes: outputs (and, training, the gradients of every floating input)
equal eager's, the graph count is at most torch.compile's for the same calls, and nothing falls back to eager.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import ember

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dynamic_programs import PROGRAMS, same, torch_graph_count  # noqa: E402

BY_NAME = {p.name: p for p in PROGRAMS}


def _leaves(args):
    return [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]


def _outputs(out):
    flat = out if isinstance(out, (tuple, list)) else [out]
    return [o for o in flat if isinstance(o, torch.Tensor) and o.requires_grad]


def _call(fn, args, training):
    args = [a.detach().clone().requires_grad_(training and a.is_floating_point()) if isinstance(a, torch.Tensor)
            else a for a in args]
    out = fn(*args)
    grads = []
    outs = _outputs(out) if training else []
    if outs and any(a.requires_grad for a in _leaves(args)):
        loss = sum((o.float() * torch.linspace(0.5, 1.5, o.numel()).reshape(o.shape)).sum() for o in outs)
        grads = torch.autograd.grad(loss, [a for a in _leaves(args) if a.requires_grad], allow_unused=True)
    return out, grads


def run(prog, backend: str, training: bool, options: dict | None = None) -> dict:
    ember.reset()
    model = prog.make()
    c = ember.compile(model, backend=backend, options=options)
    for s in prog.sizes:
        torch.manual_seed(s)
        args = prog.inputs(s)
        got, want = _call(c, args, training), _call(model, args, training)
        same(got[0], want[0], rtol=1e-4, atol=1e-5)
        for g, w in zip(got[1], want[1]):
            if w is None:
                assert g is None or not g.abs().sum()
            else:
                same(g, w, rtol=1e-4, atol=1e-5)
    return ember.stats()


@pytest.mark.parametrize("training", [False, True], ids=["infer", "train"])
@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("prog", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_program(prog, backend, training):
    stats = run(prog, backend, training)
    assert stats["fallbacks_to_eager"] == 0, stats
    assert stats["graphs_compiled"] <= torch_graph_count(prog.name), stats
