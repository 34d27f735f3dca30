"""Dynamic shapes on CUDA (issue 33): programs of the dynamic table (tests/dynamic_programs.py) compiled by
ember's Triton kernels with symbolic sizes, called at several sizes: outputs and gradients equal eager, and the
graph count stays at most torch.compile's."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import ember

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dynamic_programs import PROGRAMS  # noqa: E402

pytestmark = pytest.mark.gpu
# the programs run on the H100 so far (programs that make a CPU tensor inside, such as a causal mask from
# torch.ones(t, t), mix devices on CUDA inputs, which eager rejects)
NAMES = ["elementwise", "row_sum", "half_slice", "view_by_size", "cat_two_dynamic", "square_matmul",
         "broadcasting", "softmax_dynamic_dim", "mlp_two_layers", "layernorm_module", "conv_dynamic_batch",
         # ATen's composite matmul, linear and attention read plain sizes on the H100's torch 2.11: one graph per
         # size before ember traced its own compositions (ember/autograd/symcompose.py)
         "linear_no_bias_seq", "matmul_3d_by_2d", "bmm_two_symbolic_dims", "sdpa_additive_mask", "nanogpt_block"]
BY_NAME = {p.name: p for p in PROGRAMS}


def _cuda(x):
    return x.cuda() if isinstance(x, torch.Tensor) else x


def _run(model, args, training):
    args = [a.detach().clone().requires_grad_(training and a.is_floating_point()) if isinstance(a, torch.Tensor)
            else a for a in args]
    out = model(*args)
    outs = [o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor)]
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    grads = []
    if training and leaves and any(o.requires_grad for o in outs):
        loss = sum(o.float().sum() for o in outs if o.requires_grad)
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    return out, grads


@pytest.mark.parametrize("training", [False, True], ids=["infer", "train"])
@pytest.mark.parametrize("name", NAMES)
def test_program_on_cuda(name, training):
    prog = BY_NAME[name]
    ember.reset()
    model = prog.make()
    if isinstance(model, torch.nn.Module):
        model = model.cuda()
    c = ember.compile(model)
    for s in prog.sizes:
        torch.manual_seed(s)
        args = [_cuda(a) for a in prog.inputs(s)]
        (got, ggrads), (want, wgrads) = _run(c, args, training), _run(model, args, training)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
        for g, w in zip(ggrads, wgrads):
            if w is not None:
                torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    s = ember.stats()
    assert s["fallbacks_to_eager"] == 0, s
    assert s["graphs_compiled"] <= 2, s
