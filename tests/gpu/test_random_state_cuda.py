"""tests/decomp/test_random_state.py on CUDA: compiled random ops (Triton kernels around ATen's random kernels)
give eager's values and leave the CUDA generator (its philox seed and offset) where eager does. On CUDA,
dropout traces to ATen's fused native_dropout, whose philox offset increment and element mapping depend on the
tensor's size and layout; the mask prim reruns it on a tensor of the input's layout.

Run on the device machine: ``python -m pytest -q tests/gpu/test_random_state_cuda.py``.
"""
import pytest
import torch
from torch import nn

import ember

pytestmark = pytest.mark.gpu
F = nn.functional
BACKENDS = {
    "ember": dict(),
    "aot_eager_prims": dict(backend="aot_eager", options={"aot_decompose": True}),
}


def _draw_after():
    return torch.cat([torch.rand(5, device="cuda").double(),
                      torch.randint(0, 1 << 20, (3,), device="cuda").double()])


FORWARD = {
    "dropout": lambda x: F.dropout(x, 0.5, training=True) * 2,
    "dropout_fused": lambda x: F.dropout(x.sin() + 1, 0.3, training=True).cos(),
    "dropout_transposed": lambda x: F.dropout(x.view(32, 40).t(), 0.5, training=True),
    "two_dropouts_and_randn_like": lambda x: F.dropout(F.dropout(x, 0.2, True).relu(), 0.5, True)
    + torch.randn_like(x),
    "rand_like_then_dropout": lambda x: F.dropout(x * torch.rand_like(x), 0.4, True) + torch.rand_like(x),
    "rand_like_transposed": lambda x: torch.rand_like(x.view(32, 40).t() * 2),
    "bernoulli_inplace": lambda x: torch.empty_like(x).bernoulli_(0.3) * x,
    "unread_dropout": lambda x: (F.dropout(x, 0.5, training=True), x - 1)[1],
}


def _run(fn, x, seed):
    torch.manual_seed(seed)
    out = fn(x)
    return out, _draw_after(), torch.cuda.get_rng_state()


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("case", list(FORWARD))
def test_cuda_random_values_and_generator_state_match_eager(case, backend):
    fn = FORWARD[case]
    compiled = ember.compile(fn, **BACKENDS[backend])
    x = torch.randn(1280, device="cuda")
    for seed in (0, 1):
        out_c, next_c, state_c = _run(compiled, x, seed)
        out_e, next_e, state_e = _run(fn, x, seed)
        torch.testing.assert_close(out_c, out_e, msg=lambda m: f"{case}: random values differ: {m}")
        assert torch.equal(state_c, state_e), f"{case}: CUDA generator state after the call differs from eager's"
        assert torch.equal(next_c, next_e)


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(12, 64), nn.Linear(64, 4)
        self.drop1, self.drop2 = nn.Dropout(0.5), nn.Dropout(0.2)

    def forward(self, x):
        h = self.drop1(torch.tanh(self.a(x)))
        return self.b(self.drop2(h + 0.1 * torch.randn_like(h)))


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_cuda_training_step_matches_eager(backend):
    torch.manual_seed(0)
    eager = _Net().cuda()
    model = _Net().cuda()
    model.load_state_dict(eager.state_dict())
    compiled = ember.compile(model, **BACKENDS[backend])
    for step in range(2):
        x = torch.randn(16, 12, device="cuda")
        results = []
        for m in (compiled, eager):
            m.zero_grad()
            torch.manual_seed(100 + step)
            out = m(x)
            out.square().sum().backward()
            results.append((out, _draw_after(), torch.cuda.get_rng_state(), [p.grad for p in m.parameters()]))
        (out_c, next_c, state_c, grads_c), (out_e, next_e, state_e, grads_e) = results
        torch.testing.assert_close(out_c, out_e)
        for gc, ge in zip(grads_c, grads_e):
            torch.testing.assert_close(gc, ge)
        assert torch.equal(state_c, state_e)
        assert torch.equal(next_c, next_e)


def test_cuda_graphs_replay_draws_like_eager():
    """mode="reduce-overhead": a replayed CUDA graph still draws from the generator as eager does (PyTorch
    advances the philox offset of a graph-captured draw on each replay)."""
    fn = FORWARD["rand_like_then_dropout"]
    compiled = ember.compile(fn, mode="reduce-overhead")
    x = torch.randn(4096, device="cuda")
    for seed in range(4):                      # the recording call, then replays
        out_c, next_c, state_c = _run(compiled, x, seed)
        out_c = out_c.clone()
        out_e, next_e, state_e = _run(fn, x, seed)
        torch.testing.assert_close(out_c, out_e)
        assert torch.equal(state_c, state_e) and torch.equal(next_c, next_e)
