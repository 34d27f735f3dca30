"""partition_joint: fwd + bwd graphs reproduce eager outputs and gradients; the min-cut saves fewer bytes."""
import itertools
import random

import pytest
import torch
from torch import nn

from ember.autograd.functionalize import functionalize
from ember.autograd.partition import FlowNetwork, PartitionError, partition_joint, partition_traced
from ember.autograd.trace import lift_module, trace_aten

F = nn.functional
# Written here independently of partition.py's tables: ops the backward must never recompute.
NEVER_RECOMPUTED = {"mm", "addmm", "bmm", "convolution", "native_dropout", "bernoulli", "rand", "rand_like",
                    "randn", "randn_like", "sum", "amax", "_softmax", "var_mean", "native_layer_norm",
                    "_native_batch_norm_legit_functional"}
DROPOUT_SEED = 1234


def _module(make, *shapes):
    def build():
        torch.manual_seed(0)
        fn, state = lift_module(make())
        return fn, [t.detach().clone().requires_grad_(t.requires_grad) for t in state] + \
            [torch.randn(*s, requires_grad=True) for s in shapes]
    return build


def _fn(fn, *shapes):
    def build():
        torch.manual_seed(0)
        return fn, [torch.randn(*s, requires_grad=True) for s in shapes]
    return build


def _gelu_chain(x, w):
    y = x @ w
    for _ in range(4):
        y = F.gelu(y)
    return y


def _attention(x, wq, wk, wv):
    q, k, v = x @ wq, x @ wk, x @ wv
    a = torch.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1)
    return torch.tanh(a @ v) + x


CASES = {
    "mlp": _module(lambda: nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)), (5, 6)),
    "gelu_chain": _fn(_gelu_chain, (4, 5), (5, 6)),
    "layer_norm": _module(lambda: nn.Sequential(nn.Linear(7, 7), nn.LayerNorm(7), nn.GELU()), (3, 5, 7)),
    "attention": _fn(_attention, (2, 5, 8), (8, 8), (8, 8), (8, 8)),
    "dropout": _module(lambda: nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.3), nn.Tanh()), (6, 4)),
    "conv_bn": _module(lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()), (2, 3, 8, 8)),
}


def _clone(args):
    return [a.detach().clone().requires_grad_(a.requires_grad) for a in args]


def _joint(fn, args):
    return functionalize(trace_aten(fn, _clone(args), training=True))


def _eager(fn, args):
    args = _clone(args)
    torch.manual_seed(DROPOUT_SEED)
    out = fn(*args)
    torch.manual_seed(7)
    tangent = torch.randn_like(out)
    wrt = [a for a in args if a.requires_grad]
    return out, tangent, torch.autograd.grad(out, wrt, tangent), args


def _run(res, traced, args, tangent, reseed_between=True):
    """Run fwd then bwd with the saved values; returns (fwd outputs, grads, inputs after write-back)."""
    args = _clone(args)
    torch.manual_seed(DROPOUT_SEED)
    with torch.no_grad():
        flat = res.fwd(*args)
        fwd_outs, saved = flat[:res.num_fwd_outputs], flat[res.num_fwd_outputs:]
        assert len(saved) == res.num_saved
        if reseed_between:   # a backward that re-ran an RNG op would now draw a different mask
            torch.manual_seed(99)
        grads = res.bwd(*saved, tangent)
        for i, j in traced.write_backs:
            args[i].copy_(fwd_outs[j - len(traced.grad_input_indices)])
    return fwd_outs, grads, args


def _tangent_free(gm):
    """Names of bwd call nodes that do not depend on a tangent (recomputed values), found independently."""
    dep = {n for n in gm.graph.nodes if n.op == "placeholder" and n.name.startswith("tangents")}
    for n in gm.graph.nodes:
        if n.op == "call_function" and any(a in dep for a in n.all_input_nodes):
            dep.add(n)
    return [n for n in gm.graph.nodes if n.op == "call_function" and n not in dep]


def _op(n):
    return getattr(getattr(n.target, "overloadpacket", None), "__name__", str(n.target))


def _saved_bytes(res, args):
    """Bytes of the saved values the forward graph actually returns on real inputs."""
    with torch.no_grad():
        saved = res.fwd(*_clone(args))[res.num_fwd_outputs:]
    return sum(v.numel() * v.element_size() for v in saved)


@pytest.mark.parametrize("recompute", [False, True], ids=["save_all", "mincut"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_fwd_bwd_match_eager(name, recompute):
    fn, args = CASES[name]()
    traced = _joint(fn, args)
    res = partition_traced(traced, recompute=recompute)
    want, tangent, want_grads, eager_args = _eager(fn, args)
    fwd_outs, grads, run_args = _run(res, traced, args, tangent)
    torch.testing.assert_close(fwd_outs[0], want.detach(), rtol=1e-5, atol=1e-5)
    assert len(grads) == len(args)
    wrt = [i for i, a in enumerate(args) if a.requires_grad]
    assert wrt == traced.grad_input_indices
    for i, g in zip(wrt, want_grads):
        torch.testing.assert_close(grads[i], g, rtol=1e-5, atol=1e-5)
    for a, b in zip(run_args, eager_args):   # BatchNorm running stats written back as in eager
        torch.testing.assert_close(a.detach(), b.detach())
    # the partitioned graphs also agree with the joint graph itself
    torch.manual_seed(DROPOUT_SEED)
    joint = traced.gm(*_clone(args), tangent)
    for i, g in zip(wrt, joint[traced.num_forward_outputs:]):
        torch.testing.assert_close(grads[i], g, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_mincut_saves_no_more_and_never_recomputes_expensive_ops(name):
    fn, args = CASES[name]()
    traced = _joint(fn, args)
    base = partition_traced(traced, recompute=False)
    cut = partition_traced(traced, recompute=True)
    assert _saved_bytes(cut, args) <= _saved_bytes(base, args)
    assert cut.saved_bytes == _saved_bytes(cut, args) and base.saved_bytes == _saved_bytes(base, args)
    assert base.recomputed == [] and _tangent_free(base.bwd) == []
    free = _tangent_free(cut.bwd)
    assert sorted(n.name for n in free) == sorted(cut.recomputed)
    assert [n.name for n in free if _op(n) in NEVER_RECOMPUTED] == []
    for res in (base, cut):
        placeholders = [p.name for p in res.bwd.graph.nodes if p.op == "placeholder"]
        assert placeholders[:res.num_saved] == res.saved_names
        joint_nodes = {n.name: n for n in traced.gm.graph.nodes}
        for gm in (res.fwd, res.bwd):   # dead code eliminated, meta kept
            for n in gm.graph.nodes:
                if n.op == "call_function":
                    assert n.users or _op(n) in NEVER_RECOMPUTED, n.name
                    assert n.meta.get("val") is joint_nodes[n.name].meta.get("val"), n.name
        assert not any(_op(n).endswith("_backward") for n in res.fwd.graph.nodes)
        assert "saved" in res.summary and "backward graph" in res.summary


def test_gelu_chain_recomputes_gelus_and_saves_strictly_less():
    fn, args = CASES["gelu_chain"]()
    traced = _joint(fn, args)
    base = partition_traced(traced, recompute=False)
    cut = partition_traced(traced, recompute=True)
    assert _saved_bytes(cut, args) < _saved_bytes(base, args)
    assert sum(_op(n) == "gelu" for n in _tangent_free(cut.bwd)) == 3
    assert any(_op(n) == "mm" for n in _tangent_free(base.fwd)) and "mm_default" in cut.saved_names


def test_dropout_mask_is_saved_not_redrawn():
    def fn(x):
        # p=0.5 hits a functionalize.py bug (bernoulli_.float's default p is dropped)
        return F.dropout(x * 1.5, 0.3, training=True)
    torch.manual_seed(0)
    args = [torch.randn(64, 32, requires_grad=True)]
    traced = _joint(fn, args)
    for recompute in (False, True):
        res = partition_traced(traced, recompute=recompute)
        assert not any(_op(n) in ("bernoulli", "native_dropout", "rand_like") for n in res.bwd.graph.nodes)
        tangent = torch.rand(64, 32) + 0.5   # nonzero everywhere
        out, grads, _ = _run(res, traced, args, tangent)
        kept = out[0] != 0
        assert 0 < kept.sum() < kept.numel()
        assert torch.equal(grads[0] != 0, kept)
        torch.testing.assert_close(grads[0], tangent * kept * (1.5 / 0.7))


def test_default_grad_layout_and_errors():
    fn, args = CASES["gelu_chain"]()
    traced = _joint(fn, args)
    res = partition_joint(traced.gm, 2, 1, 1)   # one gradient per primal: the default layout
    out = next(n for n in res.bwd.graph.nodes if n.op == "output")
    assert len(out.args[0]) == 2 and all(g is not None for g in out.args[0])
    raw = trace_aten(lambda x: x.add_(1.0).sin(), [torch.randn(3, requires_grad=False)], training=True)
    with pytest.raises(PartitionError):
        partition_joint(raw.gm, 1, 0, 1, grad_input_indices=[])
    with pytest.raises(PartitionError):
        partition_joint(traced.gm, 3, 1, 1)


def _brute_min_cut(n, edges, s, t):
    best = None
    inner = [v for v in range(n) if v not in (s, t)]
    for mask in range(1 << len(inner)):
        side = {s} | {v for i, v in enumerate(inner) if mask >> i & 1}
        c = sum(cap for u, v, cap in edges if u in side and v not in side)
        best = c if best is None else min(best, c)
    return best


def test_max_flow_equals_brute_force_min_cut():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(2, 8)
        pairs = itertools.permutations(range(n), 2)
        edges = [(u, v, rng.randint(0, 9)) for u, v in pairs if rng.random() < 0.4]
        net = FlowNetwork(n)
        for u, v, c in edges:
            net.add_edge(u, v, c)
        flow = net.max_flow(0, n - 1)
        assert flow == _brute_min_cut(n, edges, 0, n - 1)
        side = net.min_cut_source_side(0)
        assert n - 1 not in side
        assert sum(c for u, v, c in edges if u in side and v not in side) == flow


def _prim_partition(fn, args):
    from ember.autograd.aot import decompose_graph
    traced = _joint(fn, args)
    res = partition_joint(decompose_graph(traced.gm), traced.num_inputs, traced.num_tangents,
                          traced.num_forward_outputs, grad_input_indices=traced.grad_input_indices)
    return traced, res


def _check_grads(fn, args, traced, res):
    want, tangent, want_grads, _ = _eager(fn, args)
    fwd_outs, grads, _ = _run(res, traced, args, tangent)
    torch.testing.assert_close(fwd_outs[0], want.detach(), rtol=2e-2, atol=2e-2)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)


def _attention_bf16(q, k, v):
    s = q.bfloat16() @ k.bfloat16().transpose(-2, -1)
    p = torch.softmax(s.float(), -1)           # CUDA autocast's float32 softmax of bf16 scores
    return (p.bfloat16() @ v.bfloat16()).float()


def test_a_value_matmuls_read_in_both_passes_is_saved_not_recomputed():
    """The bf16 probabilities go to the forward's bmm and to the backward's value-gradient bmm: the forward
    stores them anyway, so they are saved; recomputing them would cost the backward a store and a load."""
    torch.manual_seed(0)
    args = [torch.randn(2, 3, 16, 8, requires_grad=True) for _ in range(3)]
    traced, res = _prim_partition(_attention_bf16, args)
    casts = [n for n in _tangent_free(res.bwd) if "convert_element_type" in str(n.target) and
             tuple(n.meta["val"].shape) == (2, 3, 16, 16) and n.meta["val"].dtype == torch.bfloat16]
    assert not casts, [n.name for n in casts]
    saved = [n for n in res.fwd.graph.nodes if n.name in res.saved_names]
    assert [n for n in saved if tuple(n.meta["val"].shape) == (2, 3, 16, 16) and n.meta["val"].dtype ==
            torch.bfloat16 and "convert_element_type" in str(n.target)], res.saved_names
    _check_grads(_attention_bf16, args, traced, res)


def _post_norm(x, w, g, b):
    h = (x.bfloat16() @ w.bfloat16()).float()
    return F.layer_norm(x + h, (x.shape[-1],), g, b)


def test_a_value_fused_away_in_the_forward_weighs_twice():
    """A post-norm residual sum is fused into its layer norm in the forward: saving it (4 bytes a point) would
    add a store there, so the cut saves the layer's input and the matmul's bf16 output (6 bytes a point, both in
    memory anyway) and the backward recomputes the sum."""
    torch.manual_seed(0)
    args = [torch.randn(4, 16, 32, requires_grad=True), torch.randn(32, 32, requires_grad=True),
            torch.randn(32, requires_grad=True), torch.randn(32, requires_grad=True)]
    traced, res = _prim_partition(_post_norm, args)
    saved = {n.name: n for n in res.fwd.graph.nodes if n.name in res.saved_names}
    added = [n for n, v in saved.items() if v.op == "call_function" and "add" in str(v.target) and
             tuple(v.meta["val"].shape) == (4, 16, 32)]
    assert not added and any(v.op == "placeholder" and tuple(v.meta["val"].shape) == (4, 16, 32)
                             for v in saved.values()), res.saved_names
    _check_grads(_post_norm, args, traced, res)


def _cat_into_matmul(a, b, w):
    return torch.cat([a * 2, b * 3], -1) @ w        # the matmul's operand is a copy of two computed parts


def test_a_copy_matmuls_read_in_both_passes_is_saved_not_its_parts():
    """A cat (a copy, not a view) that a matmul reads in both passes is saved itself: the backward does not
    recompute it from its parts (which would write the copy again)."""
    torch.manual_seed(0)
    args = [torch.randn(8, 16, requires_grad=True), torch.randn(8, 16, requires_grad=True),
            torch.randn(32, 24, requires_grad=True)]
    traced, res = _prim_partition(_cat_into_matmul, args)
    copies = [n.name for n in _tangent_free(res.bwd) if "cat" in str(n.target)]
    assert not copies, (copies, res.saved_names)
    _check_grads(_cat_into_matmul, args, traced, res)
