"""trace_aten and functionalize, differentially against eager (outputs, gradients, input mutations)."""
import pytest
import torch
from torch.utils._pytree import tree_flatten

from ember.autograd.functionalize import functionalize, has_mutations, run_functional
from ember.autograd.trace import run_traced, trace_aten
from tests.autograd.cases import CASES


def _clone(args):
    return [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
            for a in args]


def _assert_close(got, want):
    g, w = tree_flatten(got)[0], tree_flatten(want)[0]
    assert len(g) == len(w)
    for a, b in zip(g, w):
        if b is None:
            assert a is None or not a.any()
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def _eager_with_grads(fn, args, tangent_seed=1):
    out = fn(*args)
    diff = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
    wrt = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    torch.manual_seed(tangent_seed)
    tangents = [torch.randn_like(o) for o in diff]
    grads = torch.autograd.grad(diff, wrt, tangents, allow_unused=True) if diff and wrt else []
    return out, list(grads), tangents


def _all_inputs_ok(got_args, want_args):
    for a, b in zip(got_args, want_args):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a.detach(), b.detach())


@pytest.mark.parametrize("functional", [False, True], ids=["raw", "functional"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_inference_trace_matches_eager(name, functional):
    fn, args = CASES[name]()
    eager_args, run_args = _clone(args), _clone(args)
    with torch.no_grad():
        traced = trace_aten(fn, _clone(args), training=False)
        if functional:
            traced = functionalize(traced)
            assert has_mutations(traced.gm) == []
            got, _ = run_functional(traced, *run_args)
        else:
            got, _ = run_traced(traced, *run_args)
        want = fn(*eager_args)
    _assert_close(got, want)
    _all_inputs_ok(run_args, eager_args)


@pytest.mark.parametrize("functional", [False, True], ids=["raw", "functional"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_joint_trace_matches_eager_gradients(name, functional):
    fn, args = CASES[name]()
    eager_args, run_args = _clone(args), _clone(args)
    traced = trace_aten(fn, _clone(args), training=True)
    want, want_grads, tangents = _eager_with_grads(fn, eager_args)
    assert traced.num_tangents == len(tangents)
    if functional:
        traced = functionalize(traced)
        assert has_mutations(traced.gm) == []
        got, grads = run_functional(traced, *run_args, *tangents)
    else:
        got, grads = run_traced(traced, *run_args, *tangents)
    _assert_close(got, want)
    assert len(grads) == len(traced.grad_input_indices)
    if want_grads:
        _assert_close(grads, want_grads)
    _all_inputs_ok(run_args, eager_args)


def test_functionalize_reports_write_backs():
    fn, args = CASES["conv_bn"]()
    traced = functionalize(trace_aten(fn, _clone(args), training=True))
    # running_mean, running_var, num_batches_tracked of the BatchNorm are inputs 4, 5, 6.
    assert sorted(i for i, _ in traced.write_backs) == [4, 5, 6]
    text = traced.gm.code
    assert "aten.add_." not in text and "native_batch_norm.default" not in text


def test_trace_records_aten_overloads_only():
    fn, args = CASES["mlp"]()
    traced = trace_aten(fn, _clone(args), training=True)
    targets = {n.target for n in traced.gm.graph.nodes if n.op == "call_function"}
    import operator
    assert all(isinstance(t, torch._ops.OpOverload) or t is operator.getitem for t in targets)
    assert all("val" in n.meta for n in traced.gm.graph.nodes if n.op != "output")


def test_autocast_is_honoured_like_eager():
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    fn = lambda a, b: (a @ b).relu()  # noqa: E731
    with torch.autocast("cpu", dtype=torch.bfloat16):
        traced = trace_aten(fn, [x, w], training=False)
        want = fn(x, w)
    got, _ = run_traced(traced, x, w)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want)
    assert any(n.target is torch.ops.aten._to_copy.default for n in traced.gm.graph.nodes)


def test_no_grad_training_trace_has_no_backward():
    fn, args = CASES["mlp"]()
    with torch.no_grad():
        traced = trace_aten(fn, _clone(args), training=True)
    assert traced.num_tangents == 0


def test_in_place_view_ops_leave_the_producer_its_own_shape():
    # stft's pattern: an op's result reshaped in place (squeeze_, transpose_); the producing node keeps the
    # shape the op returned, so decomposing/lowering that node sees the right metadata
    def fn(x):
        y = torch.fft.rfft(x.unsqueeze(0), dim=-1)
        y.squeeze_(0)
        y.transpose_(0, 1)
        return torch.view_as_real(y) * 2

    x = torch.randn(6, 10)
    traced = trace_aten(fn, [x], training=False)
    for node in traced.gm.graph.nodes:
        if node.op == "call_function" and "fft_r2c" in str(node.target):
            assert tuple(node.meta["val"].shape) == (1, 6, 6)
    import ember
    torch.testing.assert_close(ember.compile(fn)(x), fn(x))


def test_op_without_outputs_runs_in_compiled_graph():
    import ember

    def fn(a):
        ld, piv = torch.linalg.ldl_factor(a)       # traces an aten op returning nothing (_linalg_check_errors)
        return ld * 2, piv

    a = torch.randn(4, 4)
    a = a @ a.T + 4 * torch.eye(4)
    got, want = ember.compile(fn)(a), fn(a)
    torch.testing.assert_close(got[0], want[0])
    assert torch.equal(got[1], want[1])
