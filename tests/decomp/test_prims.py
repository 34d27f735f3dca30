"""Prim meta rules: for every prim, the meta rule's shape/dtype equal its reference output on random inputs;
symbolic sizes (sympy) go through meta rules; nn/shape decompositions equal ATen; missing ops stay externs."""
from __future__ import annotations

import pytest
import sympy
import torch

import ember.decomp as D
from ember.decomp import prims as P
from ember.decomp.interp import MetaMismatch, checked_handler
from ember.decomp.meta import TensorMeta
from ember.decomp.prims import BINARY, REDUCTIONS, UNARY
from decomp_util import assert_same, rand

aten = torch.ops.aten
F32, I64, B = torch.float32, torch.int64, torch.bool


def _dtype_for(domain):
    return {"int": I64, "any": F32, "numeric": F32, "real": F32, "float": F32, "real_float": F32}[domain]


def _prim_cases():
    x, y = rand((3, 4)), rand((3, 4), low=0.5)
    cases = [(n, (rand((3, 4), _dtype_for(d), 1, 3),)) for n, (_, d, _) in UNARY.items()]
    cases += [(n, (rand((3, 4), _dtype_for(d), 1, 4), rand((3, 4), _dtype_for(d), 1, 3))) for n, (_, d, _) in
              BINARY.items()]
    cases += [(n, (x, (1,), True)) for n in REDUCTIONS] + [("sum", (x, (0, 1), False, torch.float64))]
    cases += [("argmax", (x, 1)), ("argmin", (x, 0, True)), ("var_mean", (x, (1,), 1, False)),
              ("where", (x > 0, x, y)), ("convert_element_type", (x, torch.bfloat16)),
              ("full", ((2, 3), 1.5, F32)), ("iota", (5, 2, 3, I64)), ("empty", ((2, 2), F32)),
              ("broadcast_in_dim", (rand((4,)), (3, 4), (1,))), ("reshape", (x, (4, 3))),
              ("permute", (x, (1, 0))), ("squeeze", (rand((3, 1)), (1,))), ("unsqueeze", (x, 1)),
              ("slice", (x, 1, 1, 4, 2)), ("as_strided", (x, (2, 2), (1, 2), 1)), ("view_of", (x,)),
              ("cat", ([x, y], 0)), ("pad", (x, [(1, 2), (0, 1)], 0.5)), ("flip", (x, (0,))), ("clone", (x,)),
              ("gather", (x, 1, torch.tensor([[0, 1]] * 3))),
              ("scatter", (x, 1, torch.tensor([[0, 1]] * 3), rand((3, 2)))),
              ("scatter_add", (x, 0, torch.tensor([[0, 1, 2, 0]]), rand((1, 4)))),
              ("index_select", (x, 0, torch.tensor([2, 0]))),
              ("index", (x, [None, torch.tensor([[0, 3]])])),
              ("index_put", (x, [torch.tensor([0, 0])], rand((2, 4)), True)),
              ("uniform", ((3, 2), 0.0, 1.0, F32, "cpu", 7, 1)), ("normal", ((3,), 0.0, 1.0, F32, "cpu", 7, 2)),
              ("rng_seed", ("cpu",)), ("bernoulli", ((3, 4), 0.3, F32, "cpu")),
              ("native_dropout_mask", ((3, 4), 0.3, F32, "cpu")), ("mm", (x, rand((4, 5)))), ("bmm", (rand((2, 3, 4)), rand((2, 4, 5)))),
              ("addmm", (rand((5,)), x, rand((4, 5)))),
              ("convolution", (rand((1, 2, 5, 5)), rand((3, 2, 3, 3)), None, (1, 1), (1, 1), (1, 1), False,
                               (0, 0), 1)),
              ("sdpa", (rand((1, 2, 3, 4)), rand((1, 2, 5, 4)), rand((1, 2, 5, 6)))),
              ("aten_extern", (aten.cumsum.default, (x, 1)))]
    return cases


CASES = _prim_cases()


def test_every_prim_has_a_case():
    assert {n for n, _ in CASES} | {"rev"} == set(D.PRIMS)


@pytest.mark.parametrize("name,args", CASES, ids=[c[0] for c in CASES])
def test_meta_matches_reference(name, args):
    out = checked_handler(D.PRIMS[name], args, {})
    assert out is not None


def test_meta_mismatch_is_caught():
    bad = D.Prim("bad", lambda x: x.sum(0), lambda x: TensorMeta(x.shape, x.dtype), "pointwise")
    with pytest.raises(MetaMismatch):
        checked_handler(bad, (rand((3, 4)),), {})


def test_pointwise_prims_reject_mixed_dtypes_and_shapes():
    with pytest.raises(TypeError):
        P.add.meta(TensorMeta((3,), F32), TensorMeta((3,), torch.float64))
    with pytest.raises(ValueError):
        P.add.meta(TensorMeta((3,), F32), TensorMeta((1,), F32))
    with pytest.raises(TypeError):
        P.add.meta(TensorMeta((3,), I64), 1.5)


def test_symbolic_meta_through_decompositions():
    s, t = sympy.symbols("s t", positive=True, integer=True)
    x = TensorMeta((s, t, 8), F32)
    assert D.meta_decomposition(aten._softmax.default, x, -1, False).shape == (s, t, 8)
    out, mean, rstd = D.meta_decomposition(aten.native_layer_norm.default, x, [8], None, None, 1e-5)
    assert out.shape == (s, t, 8) and mean.shape == (s, t, 1)
    assert D.meta_decomposition(aten.sum.dim_IntList, x, [1]).shape == (s, 8)
    assert D.meta_decomposition(aten.view.default, x, [s * t, 8]).shape == (s * t, 8)
    assert D.meta_decomposition(aten.t.default, TensorMeta((s, t), F32)).stride == (1, t)
    sl = D.meta_decomposition(aten.slice.Tensor, x, 2, 1, 7, 2)
    assert sl.shape == (s, t, 3) and sl.stride == (8 * t, 8, 2)


def test_trace_decomposition_runs():
    x, w, b = rand((2, 3, 4)), rand((4,)), rand((4,))
    gm = D.trace_decomposition(aten.native_layer_norm.default, x, [4], w, b, 1e-5)
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert targets and all(t in D.PRIMS.values() or t.__name__ == "_getitem" for t in targets)
    assert_same(tuple(gm(x, w, b)), aten.native_layer_norm.default(x, [4], w, b, 1e-5))


NN = [
    (aten.native_layer_norm.default, lambda: (rand((2, 3, 4)), [4], rand((4,)), rand((4,)), 1e-5)),
    (aten.rms_norm.default, lambda: (rand((2, 3, 4)), [4], rand((4,)), 1e-6)),
    (aten.native_batch_norm.default, lambda: (rand((4, 3, 5)), rand((3,)), rand((3,)), None, None, True, 0.1, 1e-5)),
    (aten.native_batch_norm.default, lambda: (rand((4, 3, 5)), rand((3,)), rand((3,)), rand((3,)), rand((3,), low=0.5),
                                              False, 0.1, 1e-5)),
    (aten._native_batch_norm_legit_functional.default,
     lambda: (rand((4, 3, 2, 2)), rand((3,)), rand((3,)), rand((3,)), rand((3,), low=0.5), True, 0.1, 1e-5)),
    (aten.native_group_norm.default, lambda: (rand((2, 4, 5)), rand((4,)), rand((4,)), 2, 4, 5, 2, 1e-5)),
    (aten.native_layer_norm_backward.default,
     lambda: (rand((2, 3, 4)), rand((2, 3, 4)), [4], *aten.native_layer_norm(rand((2, 3, 4)), [4], None, None, 1e-5)[1:],
              rand((4,)), rand((4,)), [True, True, True])),
    (aten.native_batch_norm_backward.default,
     lambda: (rand((4, 3, 5)), rand((4, 3, 5)), rand((3,)), None, None,
              *aten.native_batch_norm(rand((4, 3, 5)), None, None, None, None, True, 0.1, 1e-5)[1:], True, 1e-5,
              [True, True, True])),
    (aten.nll_loss_forward.default, lambda: (torch.log_softmax(rand((5, 4)), 1), torch.tensor([0, 3, -100, 1, 2]),
                                             rand((4,), low=0.1), 1, -100)),
    (aten.nll_loss_forward.default, lambda: (rand((5, 4)), torch.tensor([0, 3, 2, 1, 2]), None, 0, -100)),
    (aten.nll_loss_backward.default, lambda: (torch.tensor(0.7), rand((5, 4)), torch.tensor([0, 3, 2, 1, 2]), None, 1,
                                              -100, torch.tensor(5.0))),
    (aten.mse_loss.default, lambda: (rand((3, 4)), rand((3, 4)), 1)),
    (aten.mse_loss_backward.default, lambda: (torch.tensor(1.3), rand((3, 4)), rand((3, 4)), 1)),
    (aten.embedding.default, lambda: (rand((10, 3)), torch.tensor([[1, 2], [9, 1]]))),
    (aten.embedding_dense_backward.default, lambda: (rand((2, 2, 3)), torch.tensor([[1, 2], [9, 1]]), 10, 2, False)),
    (aten.matmul.default, lambda: (rand((2, 1, 3, 4)), rand((5, 4, 2)))),
    (aten.matmul.default, lambda: (rand((4,)), rand((2, 4, 3)))),
    (aten.linear.default, lambda: (rand((2, 3, 4)), rand((5, 4)), rand((5,)))),
    (aten.addmm.default, lambda: (rand((5,)), rand((3, 4)), rand((4, 5)))),
    (aten.cat.default, lambda: ([rand((2, 3)), rand((1, 3), torch.float64)], 0)),
    (aten.stack.default, lambda: ([rand((2, 3)), rand((2, 3))], -1)),
    (aten.split.Tensor, lambda: (rand((7, 3)), 3)), (aten.chunk.default, lambda: (rand((3, 7)), 3, 1)),
    (aten.unbind.int, lambda: (rand((3, 2)), 1)), (aten.expand.default, lambda: (rand((3, 1)), [2, -1, 4])),
    (aten.select.int, lambda: (rand((3, 4)), 1, -1)), (aten.slice.Tensor, lambda: (rand((5, 4)), 0, -3, None, 2)),
    (aten.squeeze.dim, lambda: (rand((3, 1)), 1)), (aten.transpose.int, lambda: (rand((2, 3, 4)), 0, -1)),
    (aten._to_copy.default, lambda: (rand((3, 4)),)), (aten.roll.default, lambda: (rand((3, 4)), [1, -2], [0, 1])),
    (aten.repeat.default, lambda: (rand((2, 3)), [2, 1, 2])), (aten.tril.default, lambda: (rand((3, 4)), 1)),
    (aten.constant_pad_nd.default, lambda: (rand((3, 4)), [1, 2, -1, 0], 0.5)),
    (aten.arange.start_step, lambda: (1, 10, 3)), (aten.full.default, lambda: ([2, 3], 1.5)),
    (aten.zeros_like.default, lambda: (rand((2, 3), I64),)), (aten.copy.default, lambda: (rand((2, 3)), rand((3,), I64))),
    (aten.index.Tensor, lambda: (rand((4, 5, 6)), [torch.tensor([0, 2]), None, torch.tensor([1, 5])])),
    (aten.index_put.default, lambda: (rand((4, 3)), [torch.tensor([0, 0, 2])], rand((3, 3)), True)),
    (aten.scatter.value, lambda: (rand((3, 4)), 1, torch.tensor([[0], [3], [1]]), 2.0)),
]


@pytest.mark.parametrize("op,make", NN, ids=[f"{c[0]}-{i}" for i, c in enumerate(NN)])
def test_nn_and_shape_decompositions(op, make):
    args = make()
    assert_same(D.run_decomposition(op, *args), op(*args))


@pytest.mark.parametrize("dtype", [F32, torch.float64, torch.bfloat16])
def test_rng_decompositions_draw_eagers_numbers(dtype):
    """Same seed, same masks as eager (native_dropout, its backward and bernoulli), so seeded programs compiled
    with decompositions compute what eager computes; and a different seed draws a different mask."""
    x, g = rand((64, 64), dtype), rand((64, 64), dtype)
    torch.manual_seed(0)
    out, mask = aten.native_dropout.default(x, 0.3, True)
    torch.manual_seed(0)
    d_out, d_mask = D.run_decomposition(aten.native_dropout.default, x, 0.3, True)
    assert torch.equal(d_mask, mask) and torch.equal(d_out, out)
    assert abs(mask.float().mean().item() - 0.7) < 0.05
    assert torch.equal(D.run_decomposition(aten.native_dropout_backward.default, g, mask, 1 / 0.7),
                       aten.native_dropout_backward.default(g, mask, 1 / 0.7))
    torch.manual_seed(1)
    b = aten.bernoulli.p(x, 0.4)
    torch.manual_seed(1)
    d_b = D.run_decomposition(aten.bernoulli.p, x, 0.4)
    assert torch.equal(d_b, b) and not torch.equal(d_b, d_mask.to(dtype))
    u1 = P.uniform((4,), 0.0, 1.0, F32, "cpu", 5, 3)
    assert torch.equal(u1, P.uniform((4,), 0.0, 1.0, F32, "cpu", 5, 3))


def test_missing_op_stays_extern_and_is_reported():
    x = rand((3, 4))
    assert not D.has_decomposition(aten.sort.default)
    assert_same(D.run_decomposition(aten.sort.default, x, 1), torch.sort(x, 1))
    report = D.coverage_report([aten.sort.default, aten.gelu.default])
    assert report["missing"] == ["aten.sort.default"] and report["decomposed"] == ["aten.gelu.default"]
    assert "aten.sort.default" in D.coverage_report()["missing"]
