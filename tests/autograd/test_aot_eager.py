"""Backend "aot_eager" end to end: ember's capture -> AOT autograd (joint trace, functionalization, partition)
-> autograd.Function runtime with ATen kernels, compared against eager PyTorch over several training steps
(outputs, gradients, parameters after an optimizer step, buffers), plus inference, inputs without grad, aliasing
and mutation, double backward, logging, and PyTorch's own capture feeding ember's AOT compiler."""
from __future__ import annotations

import copy
import logging

import pytest
import torch
import torch.fx as fx
from torch import nn

import ember
from ember.autograd import aot as aot_mod
from ember.autograd.aot import AotError, aot_compile
from ember.autograd.runtime import CompiledGraphs, DoubleBackwardError
from ember.backends.aot import aot_eager
from ember.decomp import has_decomposition

F = nn.functional


@pytest.fixture(autouse=True, params=["aten", "prims"])
def fresh(request, monkeypatch):
    """Every test runs twice: graphs of ATen ops (backend aot_eager as is) and graphs decomposed to ember
    prims (``aot_compile(..., decompose=True)`` behind backend aot_eager and behind the direct calls here)."""
    if request.param == "prims":
        import ember.backends.aot as backend_mod

        real = aot_mod.aot_compile

        def decomposing(gm, example_inputs, options=None, **kw):
            kw.setdefault("decompose", True)
            return real(gm, example_inputs, options, **kw)
        monkeypatch.setattr(backend_mod, "aot_compile", decomposing)
        monkeypatch.setitem(globals(), "aot_compile", decomposing)
    ember.reset()
    yield request.param
    ember.reset()


# -- models ------------------------------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(12, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.l3(F.gelu(self.l2(torch.relu(self.l1(x)))))


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6)
        self.conv2, self.bn2 = nn.Conv2d(6, 4, 3), nn.BatchNorm2d(4)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.bn2(self.conv2(x)).mean(dim=(2, 3))


class Block(nn.Module):
    """Pre-norm transformer block: layernorm, attention with an explicit softmax, MLP, residuals."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class DropoutNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.drop, self.l2 = nn.Linear(10, 32), nn.Dropout(0.3), nn.Linear(32, 3)

    def forward(self, x):
        return self.l2(self.drop(torch.tanh(self.l1(x))))


def _close(actual, expected, what):
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5, msg=lambda m: f"{what}: {m}")


def _train_and_compare(make_model, make_input, steps=3, seeded=False, backend="aot_eager"):
    """Train an eager and a compiled copy side by side with SGD; compare loss, output, grads, params, buffers."""
    torch.manual_seed(0)
    eager = make_model()
    model = copy.deepcopy(eager)
    compiled = ember.compile(model, backend=backend)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        x = make_input(step)
        if seeded:
            torch.manual_seed(100 + step)
        out_e = eager(x)
        if seeded:
            torch.manual_seed(100 + step)
        out_c = compiled(x)
        _close(out_c, out_e, f"step {step} output")
        assert out_c.requires_grad and out_c.grad_fn is not None
        loss_e, loss_c = (out_e ** 2).mean(), (out_c ** 2).mean()
        loss_e.backward()
        loss_c.backward()
        for (name, p), pe in zip(model.named_parameters(), eager.parameters()):
            _close(p.grad, pe.grad, f"step {step} grad of {name}")
        opt_e.step()
        opt_c.step()
        opt_e.zero_grad()
        opt_c.zero_grad()
        for (name, p), pe in zip(model.named_parameters(), eager.parameters()):
            _close(p, pe, f"step {step} parameter {name}")
        for (name, b), be in zip(model.named_buffers(), eager.buffers()):
            _close(b, be, f"step {step} buffer {name}")
    return eager, model, compiled


def _inp(*shape, grad=False):
    return lambda step: torch.randn(*shape, generator=torch.Generator().manual_seed(step), requires_grad=grad)


# -- training ------------------------------------------------------------------------------------------------
def test_aot_eager_registered():
    assert "aot_eager" in ember.list_backends()


def test_mlp_training_steps():
    _train_and_compare(MLP, _inp(5, 12))


def test_mlp_input_grad():
    eager, model, compiled = _train_and_compare(MLP, _inp(5, 12, grad=True), steps=1)
    xe = torch.randn(5, 12, requires_grad=True)
    xc = xe.detach().clone().requires_grad_()
    eager(xe).sum().backward()
    compiled(xc).sum().backward()
    _close(xc.grad, xe.grad, "input grad")


def test_conv_batchnorm_train_updates_running_stats():
    eager, model, _ = _train_and_compare(ConvBN, _inp(2, 3, 8, 8))
    assert int(model.bn.num_batches_tracked) == 3 == int(eager.bn.num_batches_tracked)
    assert not torch.allclose(model.bn.running_mean, torch.zeros(6)), "running stats were not written back"


def test_transformer_block():
    _train_and_compare(Block, _inp(2, 5, 16))


def test_dropout_same_seed_same_mask():
    eager, model, compiled = _train_and_compare(DropoutNet, _inp(6, 10), seeded=True)
    torch.manual_seed(7)
    a = compiled(torch.ones(6, 10))
    torch.manual_seed(8)
    b = compiled(torch.ones(6, 10))
    assert not torch.equal(a, b), "dropout ignored the RNG state"


# -- inference and inputs without grad ---------------------------------------------------------------------------
def test_no_grad_inference_uses_forward_only_graph():
    built = []

    def backend(gm, example_inputs):
        fn = aot_compile(gm, example_inputs)
        built.append(fn.__ember_aot__)
        return fn

    torch.manual_seed(0)
    eager = ConvBN()
    model = copy.deepcopy(eager)
    compiled = ember.compile(model, backend=backend)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        out_c, out_e = compiled(x), eager(x)
    _close(out_c, out_e, "no_grad output")
    assert not out_c.requires_grad and out_c.grad_fn is None
    assert built and not any(isinstance(v[0], CompiledGraphs) for v in built[0].values()), \
        "no_grad built a training variant"
    for (name, b), be in zip(model.named_buffers(), eager.buffers()):   # train-mode BN still updates stats
        _close(b, be, f"buffer {name}")


def test_eval_mode_batchnorm():
    torch.manual_seed(0)
    eager = ConvBN()
    eager(torch.randn(4, 3, 8, 8))      # non-trivial running stats
    eager.eval()
    model = copy.deepcopy(eager)
    compiled = ember.compile(model, backend="aot_eager")
    x = torch.randn(2, 3, 8, 8)
    _close(compiled(x), eager(x), "eval output")
    compiled(x).sum().backward()
    eager(x).sum().backward()
    for (name, p), pe in zip(model.named_parameters(), eager.parameters()):
        _close(p.grad, pe.grad, f"eval grad of {name}")


def test_inputs_without_requires_grad():
    def f(x, w, b):
        return torch.tanh(x @ w) * b, (x * 2).sum()

    compiled = ember.compile(f, backend="aot_eager")
    x = torch.randn(4, 3)
    w, b = torch.randn(3, 5, requires_grad=True), torch.randn(5)
    we = w.detach().clone().requires_grad_()
    (o1, s), (e1, es) = compiled(x, w, b), f(x, we, b)
    _close(o1, e1, "output")
    _close(s, es, "sum")
    assert not s.requires_grad, "an output not depending on a grad input must not require grad"
    o1.sum().backward()
    e1.sum().backward()
    _close(w.grad, we.grad, "grad of w")
    assert x.grad is None and b.grad is None


def test_detached_and_unused_outputs():
    def f(x):
        y = x.exp()
        return y, y.detach() * 2, x.shape[0] * x.sin()

    compiled = ember.compile(f, backend="aot_eager")
    x = torch.randn(3, 4, requires_grad=True)
    xe = x.detach().clone().requires_grad_()
    a, b, c = compiled(x)
    ea, eb, ec = f(xe)
    assert not b.requires_grad and c.requires_grad
    (a.sum() + 0 * b.sum()).backward()      # c unused: its tangent is materialized as zeros
    ea.sum().backward()
    _close(x.grad, xe.grad, "grad with an unused output")


def test_requires_grad_pattern_change_recompiles_variant():
    def f(x, y):
        return (x * y).sin()

    g = fx.symbolic_trace(f)
    x, y = torch.randn(3, requires_grad=True), torch.randn(3)
    compiled = aot_compile(g, [x, y])
    compiled(x, y).sum().backward()
    y2 = y.clone().requires_grad_()
    compiled(x.detach(), y2).sum().backward()
    _close(y2.grad, x.detach() * torch.cos(x.detach() * y), "grad of the second variant")
    assert len(compiled.__ember_aot__) == 2


# -- mutation and aliasing ----------------------------------------------------------------------------------
def test_mutated_input_is_written_back_and_returned_as_itself():
    def f(buf, y):
        buf.mul_(2)
        return buf, (y * buf).sum()

    compiled = ember.compile(f, backend="aot_eager")
    buf, buf_e = torch.ones(3), torch.ones(3)
    y = torch.randn(3, requires_grad=True)
    ye = y.detach().clone().requires_grad_()
    out_buf, s = compiled(buf, y)
    e_buf, es = f(buf_e, ye)
    _close(buf, buf_e, "written-back input")
    assert out_buf is buf, "an output that is the mutated input must be that input"
    s.backward()
    es.backward()
    _close(y.grad, ye.grad, "grad")


def test_view_of_input_output():
    def f(x):
        return x.view(-1)[:4], x.t() * 1

    compiled = ember.compile(f, backend="aot_eager")
    x = torch.randn(3, 2)
    v, t = compiled(x)
    assert v.data_ptr() == x.data_ptr() and torch.equal(v, x.view(-1)[:4])


def test_mutation_with_grad_value_runs_eagerly_and_correctly():
    """An input updated in place with a value that requires grad is beyond AOT tracing (AotError): the graph
    runs as captured, with eager autograd, and a perf hint says why."""
    def f(x, y):
        x.add_(y)
        return x.sin()

    g = fx.symbolic_trace(f)
    x, y = torch.randn(3), torch.randn(3, requires_grad=True)
    ex, ey = x.clone(), y.detach().clone().requires_grad_(True)
    import logging
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda rec: seen.append(rec.getMessage())
    logger = logging.getLogger("ember")
    logger.addHandler(handler)
    ember.set_logs(perf_hints=True)
    try:
        out = aot_compile(g, [x, y])(x, y)
    finally:
        ember.set_logs(perf_hints=False)
        logger.removeHandler(handler)
    expected = f(ex, ey)
    _close(out, expected, "output")
    _close(x, ex, "mutated input")
    (gy,), (egy,) = torch.autograd.grad(out.sum(), [y]), torch.autograd.grad(expected.sum(), [ey])
    _close(gy, egy, "grad")
    assert any("updated in place with a value that requires grad" in m for m in seen), seen


# -- double backward, partitioner, logging, torch.compile ---------------------------------------------------------
def test_double_backward_is_a_clear_error():
    compiled = ember.compile(lambda x: (x ** 3).sum(), backend="aot_eager")
    x = torch.randn(4, requires_grad=True)
    (g,) = torch.autograd.grad(compiled(x), x, create_graph=True)
    _close(g, 3 * x.detach() ** 2, "first-order grad with create_graph")
    with pytest.raises(DoubleBackwardError, match="double backward through an ember aot graph is not supported"):
        g.sum().backward()


def test_fallback_partitioner_matches(monkeypatch):
    monkeypatch.setattr(aot_mod, "_partitioner", lambda: aot_mod.fallback_partition)
    _train_and_compare(Block, _inp(2, 3, 16), steps=2)
    _train_and_compare(ConvBN, _inp(2, 3, 6, 6), steps=2)


def test_save_everything_partition_matches():
    _train_and_compare(MLP, _inp(5, 12), steps=2,
                       backend=lambda gm, ex: aot_compile(gm, ex, recompute=False))


def test_aot_graphs_log(caplog):
    ember.set_logs(aot_graphs=True)
    try:
        with caplog.at_level(logging.INFO, logger="ember"):
            compiled = ember.compile(MLP(), backend="aot_eager")
            compiled(torch.randn(2, 12)).sum().backward()
    finally:
        ember.set_logs(aot_graphs=False)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "training forward graph" in text and "training backward graph" in text
    assert "partition:" in text and "saved" in text


def test_torch_compile_with_ember_aot_backend():
    torch._dynamo.reset()
    try:
        torch.manual_seed(0)
        eager = Block()
        model = copy.deepcopy(eager)
        compiled = torch.compile(model, backend=aot_eager)
        for step in range(2):
            x = _inp(2, 4, 16)(step)
            out_c, out_e = compiled(x), eager(x)
            _close(out_c, out_e, f"torch.compile step {step}")
            out_c.pow(2).mean().backward()
            out_e.pow(2).mean().backward()
            for (name, p), pe in zip(model.named_parameters(), eager.parameters()):
                _close(p.grad, pe.grad, f"torch.compile grad of {name}")
    finally:
        torch._dynamo.reset()


@pytest.mark.parametrize("make_model,make_input", [(MLP, _inp(5, 12)), (Block, _inp(2, 5, 16)),
                                                   (ConvBN, _inp(2, 3, 8, 8))], ids=["mlp", "block", "conv_bn"])
def test_decomposed_to_prims_matches(make_model, make_input):
    """decompose=True: forward and backward graphs of ember prims (run by their reference implementations)."""
    built = []

    def backend(gm, ex):
        fn = aot_compile(gm, ex, decompose=True)
        built.append(fn)
        return fn

    _train_and_compare(make_model, make_input, steps=2, backend=backend)
    graphs = next(v[0] for v in built[0].__ember_aot__.values() if isinstance(v[0], CompiledGraphs))
    for g in (graphs.fwd, graphs.bwd):
        targets = [n.target for n in g.graph.nodes if n.op == "call_function"]
        assert any(str(t).startswith("prims.") for t in targets)
        # what stays ATen is what ember.decomp has no rule for (convolution_backward: an extern op)
        left = [str(t) for t in targets if isinstance(t, torch._ops.OpOverload) and has_decomposition(t)]
        assert not left, left


def test_backend_graphs_follow_the_parametrized_path(fresh):
    """Guards the fixture: under "prims" backend aot_eager's graphs are ember prims, under "aten" ATen ops."""
    import ember.backends.aot as backend_mod

    gm = fx.symbolic_trace(lambda x, w: F.gelu(x @ w).sum())
    fn = backend_mod.aot_eager_factory(None)(gm, [torch.randn(2, 12), torch.randn(12, 3, requires_grad=True)])
    graphs = next(v[0] for v in fn.__ember_aot__.values() if isinstance(v[0], CompiledGraphs))
    targets = [str(n.target) for g in (graphs.fwd, graphs.bwd) for n in g.graph.nodes if n.op == "call_function"]
    has_prims = any(t.startswith("prims.") for t in targets)
    assert has_prims == (fresh == "prims"), targets


def test_compiling_inside_autocast_leaves_no_fake_in_the_autocast_cache():
    """Autocast caches the bf16 casts of parameters for the region: tracing must not leave fakes there."""
    torch.manual_seed(0)
    eager = MLP()
    model = copy.deepcopy(eager)
    x = torch.randn(4, 12)
    with torch.autocast("cpu"):
        out_c = aot_compile(fx.symbolic_trace(model), [x])(x)     # parameters stay module attributes
        out_e = eager(x)
        again = model(x)            # the same parameters, eagerly, in the same autocast region
        assert type(again) is torch.Tensor and type(out_c) is torch.Tensor
        _close(again, out_e, "eager after compiling")
        _close(out_c, out_e, "compiled under autocast")


def test_tracing_leaves_autocast_state_as_it_was():
    """A graph that enters an autocast region and ends inside it (the glue exits it later): tracing it must not
    leave the caller inside autocast."""
    def enters(x):
        torch.autocast("cpu", dtype=torch.bfloat16).__enter__()
        return x @ x

    assert not torch.is_autocast_enabled("cpu")
    traced, _ = aot_mod._trace(enters, [torch.randn(3, 3)], training=False)
    assert not torch.is_autocast_enabled("cpu")
    assert any("_to_copy" in str(n.target) for n in traced.gm.graph.nodes), "the trace did not see autocast"


# -- inputs that alias each other --------------------------------------------------------------------------------
def _read_both(a, b):
    return a * 2 + b


def _mutate_first(a, b):
    a.add_(1)
    return b * 2


def _mutate_second(a, b):
    b.mul_(3)
    return a + 1


def _mutate_both(a, b):
    a.add_(1)
    b.add_(2)
    return a * 2, b.sum()


def _setitem_from_alias(a, b):
    a.select(0, 0).copy_(b[1] * 2)        # a[0] = b[1] * 2 (fx.symbolic_trace cannot trace setitem)
    return b.sum(0)


def _mutate_and_return_alias(a, b):
    a.mul_(2)
    return b


ALIASING = [
    ("read_same", _read_both, lambda x: (x, x)),
    ("mutate_first_same", _mutate_first, lambda x: (x, x)),
    ("mutate_first_row", _mutate_first, lambda x: (x, x[0])),
    ("mutate_first_transpose", _mutate_first, lambda x: (x, x.t())),
    ("mutate_row_read_all", _mutate_first, lambda x: (x[1], x)),
    ("mutate_first_tail", _mutate_first, lambda x: (x, x[1:])),
    ("mutate_second_row", _mutate_second, lambda x: (x, x[1])),
    ("mutate_both_same", _mutate_both, lambda x: (x, x)),
    ("mutate_both_row", _mutate_both, lambda x: (x, x[0])),
    ("disjoint_rows", _mutate_first, lambda x: (x[0], x[1])),
    ("setitem_from_alias", _setitem_from_alias, lambda x: (x, x)),
    ("return_alias", _mutate_and_return_alias, lambda x: (x, x[2])),
]


def _alias_run(fn, make, compile_fn):
    """Eager and compiled on the same aliasing pattern of fresh storages: outputs and storages equal, twice."""
    torch.manual_seed(0)
    base = torch.randn(3, 3)
    compiled = compile_fn(fn, make(base.clone()))
    for step in range(2):
        xe, xc = base.clone() + step, base.clone() + step
        out_e, out_c = fn(*make(xe)), compiled(*make(xc))
        _close(out_c, out_e, f"step {step} outputs")
        _close(xc, xe, f"step {step} storage after the call")
    return compiled


@pytest.mark.parametrize("name,fn,make", ALIASING, ids=[a[0] for a in ALIASING])
def test_aliased_inputs_aot_compile(name, fn, make):
    _alias_run(fn, make, lambda f, ex: aot_compile(fx.symbolic_trace(f), list(ex)))


@pytest.mark.parametrize("name,fn,make", ALIASING, ids=[a[0] for a in ALIASING])
def test_aliased_inputs_ember_compile(name, fn, make):
    _alias_run(fn, make, lambda f, ex: ember.compile(f, backend="aot_eager"))


def test_aliasing_pattern_change_builds_a_variant():
    """Compiled for two distinct tensors, then called with a tensor and its row: the mutation must show."""
    compiled = aot_compile(fx.symbolic_trace(_mutate_first), [torch.randn(3, 3), torch.randn(3)])
    x, xe = torch.randn(3, 3), None
    xe = x.clone()
    _close(compiled(x, x[0]), _mutate_first(xe, xe[0]), "aliased call after a distinct compile")
    _close(x, xe, "storage")
    a, b = torch.randn(3, 3), torch.randn(3)
    ae, be = a.clone(), b.clone()
    _close(compiled(a, b), _mutate_first(ae, be), "distinct call again")
    assert len(compiled.__ember_aot__) == 2


def test_aliased_inputs_with_grad():
    """A weight and its view, read only: gradients reach the weight through both; a mutated aliasing pair
    beside an input that requires grad: values and the gradient of that input."""
    def reads(w, v, x):
        return (x @ w).sum() + (v * x[0]).sum()

    def mutates(a, b, w):
        a.add_(1)
        return (b * w).sum()

    for fn, make in ((reads, lambda w, x: (w, w[0], x)), (mutates, lambda w, x: (x, x[0], w))):
        torch.manual_seed(0)
        w, x = torch.randn(3, 3, requires_grad=True), torch.randn(3, 3)
        we, xe = w.detach().clone().requires_grad_(), x.clone()
        compiled = aot_compile(fx.symbolic_trace(fn), list(make(w.detach().clone().requires_grad_(), x.clone())))
        out_c, out_e = compiled(*make(w, x)), fn(*make(we, xe))
        _close(out_c, out_e, f"{fn.__name__} output")
        _close(x, xe, f"{fn.__name__} storage")
        out_c.backward()
        out_e.backward()
        _close(w.grad, we.grad, f"{fn.__name__} grad")


def test_mutated_alias_that_requires_grad_runs_eagerly():
    """A pair of aliasing inputs, one mutated, one requiring grad: beyond AOT (refused), runs eagerly."""
    def f(a, b):
        a.mul_(2)
        return (b * 3).sum()

    w = torch.randn(3, 3)
    compiled = aot_compile(fx.symbolic_trace(f), [w, w[0].clone().requires_grad_()])
    base = torch.randn(3, 3)
    leaf = base.clone().requires_grad_()
    x, xe = leaf.clone(), leaf.clone()
    out_c, out_e = compiled(x, x[0]), f(xe, xe[0])
    _close(out_c, out_e, "output")
    _close(x, xe, "storage")
    (gc,), (ge,) = torch.autograd.grad(out_c, leaf), torch.autograd.grad(out_e, leaf)
    _close(gc, ge, "grad")
