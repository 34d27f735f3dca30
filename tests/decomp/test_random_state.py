"""Compiled random ops consume torch's global generator exactly as eager does.

From the same seed, a compiled call gives eager's random values (dropout masks, bernoulli, rand/randn...) and
leaves the generator in eager's state, so every random op the program runs afterwards also matches eager's:
forward only, in training (the backward reuses the forward's mask, it never draws again), several random ops
in one graph, random ops across graph breaks. Checked on the kernel backend (``ember``), with and without
``fallback_random`` (torch.compile's option; ember's default already gives what it asks for), and on
``aot_eager`` with ember's decompositions (prims run their reference implementations).
"""
import pytest
import torch
from torch import nn

import ember
from ember.autograd import aot as aot_mod

F = nn.functional
BACKENDS = {
    "ember": dict(),
    "ember_fallback_random": dict(options={"fallback_random": True}),
    "aot_eager_prims": dict(backend="aot_eager", options={"aot_decompose": True}),
}


def _draw_after(x):
    """What a program draws next: equal only if the generator ended in the same state."""
    return torch.cat([torch.rand(5).double(), torch.randint(0, 1 << 20, (3,)).double()])


def _rand_eager_part(x):
    return x * torch.rand_like(x)


_eager_rand = ember.disable(_rand_eager_part)


def _graph_break(x):
    y = F.dropout(x, 0.5, training=True)
    y = _eager_rand(y) + torch.randn_like(y)      # a graph break between random ops
    return F.dropout(y.sin(), 0.25, training=True)


def _save_draw_restore(x):
    state = torch.get_rng_state()
    y = F.dropout(x, 0.5, training=True)
    torch.set_rng_state(state)                  # the same mask again, then fresh numbers
    return y * F.dropout(x, 0.5, training=True) + torch.rand_like(x)


def _reseed_inside(x):
    y = torch.randn_like(x)
    torch.manual_seed(11)
    return F.dropout(x + y, 0.5, training=True)


def _generator_object_state(x):
    state = torch.default_generator.get_state()
    y = torch.rand_like(x)
    torch.default_generator.set_state(state)
    return y - torch.rand_like(x)


FORWARD = {
    "dropout": lambda x: F.dropout(x, 0.5, training=True) * 2,
    "dropout_p03_fused": lambda x: F.dropout(x.sin() + 1, 0.3, training=True).cos(),
    "dropout_2d_rows": lambda x: F.dropout(x.view(8, 12), 0.6, training=True).sum(1),
    "bernoulli_scalar_inplace": lambda x: torch.empty_like(x).bernoulli_(0.3) * x,
    "bernoulli_tensor_p": lambda x: torch.bernoulli(x.sigmoid()) + x,
    "two_dropouts_and_randn_like": lambda x: F.dropout(F.dropout(x, 0.2, True).relu(), 0.5, True)
    + torch.randn_like(x),
    "rand_like_then_dropout": lambda x: F.dropout(x * torch.rand_like(x), 0.4, True) + torch.rand_like(x),
    "randn_randint_dropout": lambda x: F.dropout(x + torch.randn(96), 0.5, True) * torch.randint(0, 3, (96,)),
    "graph_break": _graph_break,
    "get_set_rng_state_inside": _save_draw_restore,
    "manual_seed_inside": _reseed_inside,
    "generator_get_set_state_inside": _generator_object_state,
    # eager fills the mask in its input's memory order (dims by decreasing stride)
    "dropout_transposed": lambda x: F.dropout(x.view(8, 12).t(), 0.5, training=True),
    "dropout_permuted_3d": lambda x: F.dropout(x.view(2, 6, 8).permute(2, 0, 1), 0.3, training=True) * 3,
    "dropout_of_transposed_sin": lambda x: F.dropout(x.view(8, 12).t().sin(), 0.5, training=True),
    # random ATen calls fill a tensor laid out like their (computed) input, in memory order
    "rand_like_transposed": lambda x: torch.rand_like(x.view(8, 12).t() * 2),
    "randn_like_transposed": lambda x: torch.randn_like(x.view(8, 12).t().cos()) + 1,
    "randint_like_transposed": lambda x: torch.randint_like(x.view(8, 12).t() + 1, 10),
    "exponential_transposed": lambda x: (x.view(8, 12).t() * 2).exponential_(),
    "normal_tensor_mean_transposed": lambda x: torch.normal(x.view(8, 12).t() * 3, 1.0),
    "bernoulli_tensor_transposed": lambda x: torch.bernoulli((x.view(8, 12).t() * 2).sigmoid()),
    # in-place draws into a fresh transposed tensor (functionalized to as_strided_scatter on it)
    "bernoulli_functional_transposed": lambda x: torch.bernoulli(x.view(8, 12).t(), 0.3),   # fills row-major
    "bernoulli_inplace_empty_like_transposed": lambda x: torch.empty_like(x.view(8, 12).t()).bernoulli_(0.3),
    "uniform_inplace_empty_like_permuted":
        lambda x: torch.empty_like(x.view(2, 6, 8).permute(2, 0, 1)).uniform_(),
    # ATen's native_dropout (what CUDA's dropout traces to), called directly here on CPU
    "native_dropout": lambda x: torch.native_dropout(x * 2, 0.4, True)[0],
    "native_dropout_p0_draws": lambda x: torch.native_dropout(x, 0.0, True)[0] + torch.rand_like(x),
    "native_dropout_transposed_mask": lambda x: torch.native_dropout(x.view(8, 12).t(), 0.5, True)[1].float(),
    # library random ops built on bernoulli_ / exponential_ / uniform_ and ATen random calls
    "dropout2d": lambda x: F.dropout2d(x.view(2, 6, 4, 2), 0.5, True),
    "alpha_dropout": lambda x: F.alpha_dropout(x, 0.3, True),
    "feature_alpha_dropout": lambda x: F.feature_alpha_dropout(x.view(2, 6, 8), 0.3, True),
    "rrelu_training": lambda x: F.rrelu(x, training=True),
    "gumbel_softmax": lambda x: F.gumbel_softmax(x.view(8, 12), tau=0.5),
    "randperm_multinomial": lambda x: x[torch.randperm(96)] + torch.multinomial(x.abs() + 0.1, 96, True),
    "dropout_channels_last": lambda x: F.dropout(x.view(2, 6, 4, 2).contiguous(
        memory_format=torch.channels_last) * 2, 0.5, True),
    # a draw nothing reads still advances eager's generator
    "unread_dropout": lambda x: (F.dropout(x, 0.5, training=True), x - 1)[1],
    "unread_bernoulli_": lambda x: (torch.empty_like(x).bernoulli_(0.5), x * 3)[1],
    "unread_dropout_then_rand": lambda x: (F.dropout(x.cos(), 0.1, True), x + torch.rand(96))[1],
}


def _run(fn, x, seed):
    torch.manual_seed(seed)
    out = fn(x)
    return out, _draw_after(x), torch.get_rng_state()


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("case", list(FORWARD))
def test_forward_random_values_and_generator_state_match_eager(case, backend):
    fn = FORWARD[case]
    compiled = ember.compile(fn, **BACKENDS[backend])
    x = torch.randn(96, generator=torch.Generator().manual_seed(3))
    for seed in (0, 1):                       # the compiling call and a cached one
        out_c, next_c, state_c = _run(compiled, x, seed)
        out_e, next_e, state_e = _run(fn, x, seed)
        torch.testing.assert_close(out_c, out_e, msg=lambda m: f"{case}: random values differ: {m}")
        assert torch.equal(state_c, state_e), f"{case}: generator state after the call differs from eager's"
        assert torch.equal(next_c, next_e), f"{case}: the next random op draws different numbers"


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(12, 32), nn.Linear(32, 4)
        self.drop1, self.drop2 = nn.Dropout(0.5), nn.Dropout(0.2)

    def forward(self, x):
        h = self.drop1(torch.tanh(self.a(x)))
        return self.b(self.drop2(h + 0.1 * torch.randn_like(h)))


class _UnreadDropout(_Net):
    def forward(self, x):
        h = torch.tanh(self.a(x))
        self.drop1(h)                       # drawn, never read: the generator still advances
        return self.b(self.drop2(h))


class _TransposedDropout(_Net):
    def forward(self, x):
        h = torch.tanh(self.a(x)).t()          # the mask is drawn in the transposed layout
        return self.b(self.drop1(h).t())


TRAINING = {"two_dropouts_randn_like": _Net, "unread_dropout": _UnreadDropout,
            "transposed_dropout": _TransposedDropout}


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("case", list(TRAINING))
def test_training_step_reuses_forward_mask_and_leaves_eager_state(case, backend):
    _check_training(case, backend)


@pytest.mark.parametrize("case", list(TRAINING))
def test_fallback_partitioner_keeps_unread_draws(case, monkeypatch):
    monkeypatch.setattr(aot_mod, "_partitioner", lambda: aot_mod.fallback_partition)
    _check_training(case, "aot_eager_prims")


def _check_training(case, backend):
    torch.manual_seed(0)
    eager = TRAINING[case]()
    model = TRAINING[case]()
    model.load_state_dict(eager.state_dict())
    compiled = ember.compile(model, **BACKENDS[backend])
    for step in range(2):
        x = torch.randn(6, 12, generator=torch.Generator().manual_seed(10 + step))
        results = []
        for m in (compiled, eager):
            m.zero_grad()
            torch.manual_seed(100 + step)
            out = m(x)
            out.square().sum().backward()
            results.append((out, _draw_after(x), torch.get_rng_state(), [p.grad for p in m.parameters()]))
        (out_c, next_c, state_c, grads_c), (out_e, next_e, state_e, grads_e) = results
        torch.testing.assert_close(out_c, out_e)
        for gc, ge in zip(grads_c, grads_e):
            torch.testing.assert_close(gc, ge)
        assert torch.equal(state_c, state_e), "generator state after the training step differs from eager's"
        assert torch.equal(next_c, next_e)


@pytest.mark.parametrize("fn", [_save_draw_restore, _reseed_inside], ids=["get_set_rng_state", "manual_seed"])
def test_generator_state_calls_break_the_graph(fn):
    with pytest.raises(ember.Unsupported) as info:
        ember.compile(fn, fullgraph=True)(torch.randn(8))
    msg = str(info.value)
    assert "random generator's state" in msg and "test_random_state.py" in msg, msg


aten = torch.ops.aten
DECOMPOSED = [(op, p, train, layout) for op in ("native_dropout", "dropout") for p in (0.0, 0.3, 1.0)
              for train in (True, None, False) for layout in ("rows", "transposed")
              if not (op == "dropout" and train is None)] + \
    [("bernoulli_p", p, None, "rows") for p in (0.0, 0.3, 1.0)]
# bernoulli.p's decomposition draws in the layout of its input, which decompose_graph sets to the layout of the
# tensor eager fills (row-major for a functional call, the tensor's own for a functionalized bernoulli_); run on
# a transposed real tensor alone it cannot know which (the compiled rows above cover both).


@pytest.mark.parametrize("op,p,train,layout", DECOMPOSED, ids=str)
def test_random_decompositions_draw_as_aten(op, p, train, layout):
    """Each random decomposition run on real tensors: ATen's values, and the generator left where ATen leaves
    it (ATen draws for p == 0 and p == 1 in native_dropout on CPU, train None means training)."""
    import ember.decomp as D
    x = torch.randn(6, 10, generator=torch.Generator().manual_seed(5))
    x = x.t() if layout == "transposed" else x
    target, args = {"native_dropout": (aten.native_dropout.default, (x, p, train)),
                    "dropout": (aten.dropout.default, (x, p, train)),
                    "bernoulli_p": (aten.bernoulli.p, (x, p))}[op]
    results = []
    for run in (lambda: target(*args), lambda: D.run_decomposition(target, *args)):
        torch.manual_seed(0)
        out = run()
        results.append((out if isinstance(out, tuple) else (out,), torch.get_rng_state()))
    (ref, ref_state), (got, got_state) = results
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r)
    assert torch.equal(got_state, ref_state), "the decomposition drew otherwise than ATen"
