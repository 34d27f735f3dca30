"""ember.export with dynamic dims on every trace path a deployment meets (issue 35):

- the size-generic compositions of ATen's composite ops (ember/autograd/symcompose.py), which keep PyTorch 2.11
  (the H100 machine's) from reading symbolic sizes as plain ints, apply in the export trace as in ember.compile's,
  and batch norm among them (on CUDA, ATen's C++ picks ``cudnn_batch_norm``, whose 2.11 meta kernel takes only
  plain sizes): each composition equals eager, and a trace on fake CUDA tensors keeps the batch symbolic;
- the export trace runs the model with ``torch.compiler.is_compiling()`` True, as ember's capture (the strict
  check) sees it, so libraries' data-dependent checks skipped under compile (transformers' packed-sequence
  check) are skipped in the trace too;
- sizes with floor divisions (``x.view(B // 2, 2, -1)``, a pad to a multiple of 4) compile into packages.

Each program: ``ep.module()``, ``load(save(ep))`` and ``load_package(aot_compile(ep))`` equal eager at three sizes.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten_with_path, tree_map

import ember
from ember.autograd.symcompose import COMPOSITIONS

from .test_export import _close


def _r(*shape):
    return torch.randn(*shape)


def _stats(c=3):
    return torch.randn(c), torch.rand(c) + 0.5


# -- each composition equals eager (values, and the running statistics batch norm updates in place) --------
COMPOSED = [
    ("F.batch_norm eval 4d", F.batch_norm, lambda: (_r(4, 3, 5, 5), *_stats(), _r(3), _r(3), False, 0.1, 1e-5)),
    ("F.batch_norm train 4d", F.batch_norm, lambda: (_r(4, 3, 5, 5), *_stats(), _r(3), _r(3), True, 0.1, 1e-5)),
    ("F.batch_norm train 2d no affine", F.batch_norm, lambda: (_r(6, 3), *_stats(), None, None, True, 0.3, 1e-3)),
    ("F.batch_norm eval 3d no stats", F.batch_norm, lambda: (_r(4, 3, 7), None, None, _r(3), None, True)),
    ("torch.batch_norm eval 3d", torch.batch_norm,
     lambda: (_r(4, 3, 7), _r(3), _r(3), *_stats(), False, 0.1, 1e-5, True)),
    ("torch.batch_norm train 5d", torch.batch_norm,
     lambda: (_r(2, 3, 2, 3, 4), _r(3), None, *_stats(), True, 0.1, 1e-5, False)),
    ("F.linear 3d no bias", F.linear, lambda: (_r(2, 5, 4), _r(6, 4))),
    ("F.linear 3d bias", F.linear, lambda: (_r(2, 5, 4), _r(6, 4), _r(6))),
    ("matmul 4d @ 4d", torch.matmul, lambda: (_r(2, 3, 5, 4), _r(2, 3, 4, 6))),
    ("matmul 3d @ 1d", torch.matmul, lambda: (_r(2, 5, 4), _r(4))),
]


@pytest.mark.parametrize("name,op,make", COMPOSED, ids=[c[0] for c in COMPOSED])
def test_symbolic_compositions_equal_eager(name, op, make):
    assert op in COMPOSITIONS, f"{name}: no size-generic composition"
    args = make()
    ref_args = copy.deepcopy(args)
    got = COMPOSITIONS[op](*args)
    assert got is not None, f"{name}: the composition does not cover this case"
    _close(got, op(*ref_args))
    for a, b in zip(args, ref_args):     # running statistics, updated in place as eager updates them
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a, b)


# -- the export trace on fake CUDA tensors (the H100's path, traced without a GPU) ---------------------------
class ConvBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.head = torch.nn.Linear(4, 5)

    def forward(self, x):
        return self.head(self.bn(self.conv(x)).relu().mean((2, 3)))


class MlpBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.bn = torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8, affine=False)

    def forward(self, x):
        return self.bn(self.lin(x)).tanh()


class Attention(torch.nn.Module):
    """Bias-free projections over (batch, seq, channels), q @ k^T and attention: the encoder's/nanoGPT's ops."""

    def __init__(self, sdpa):
        super().__init__()
        self.sdpa = sdpa
        self.qkv, self.out = torch.nn.Linear(8, 24, bias=False), torch.nn.Linear(8, 8, bias=False)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = (q @ k.transpose(-2, -1) * 8 ** -0.5).softmax(-1) @ v
        return self.out(y)


FAKE_CUDA = [
    ("conv_bn_eval", lambda: ConvBN().eval(), lambda b: (_r(b, 3, 6, 6),)),
    ("conv_bn_train", lambda: ConvBN().train(), lambda b: (_r(b, 3, 6, 6),)),
    ("mlp_bn1d_train", lambda: MlpBN().train(), lambda b: (_r(b, 6),)),
    ("mlp_bn1d_eval", lambda: MlpBN().eval(), lambda b: (_r(b, 6),)),
    ("attention_matmul", lambda: Attention(False), lambda b: (_r(b, 5, 8),)),
    ("attention_sdpa", lambda: Attention(True), lambda b: (_r(b, 5, 8),)),
]


def _trace_on_fake_cuda(model, args):
    """``ember.export``'s trace with the state and the inputs as fake CUDA tensors, batch dims symbolic: the ops
    ATen dispatches to for CUDA (``cudnn_batch_norm`` where the build has cuDNN) reach ember's fake tensors."""
    from ember.deploy import trace as T
    from ember.deploy.dims import dims_per_leaf
    from ember.deploy.symbolic import relations_of, symbolic_leaves
    cuda = torch.device("cuda")
    with_paths, in_spec = tree_flatten_with_path((args, {}))
    leaves = [v for _, v in with_paths]
    names = [T._leaf_name(p) for p, _ in with_paths]
    dims = dims_per_leaf(model.forward, args, {}, ({0: ember.Dim("batch")},) * len(args), leaves, names)
    state_names, state, _ = T._state_of(model)
    sym = symbolic_leaves(leaves, dims, names)
    sym.fakes = [sym.mode.fake_empty(tuple(f.shape), tuple(f.stride()), f.dtype, cuda) for f in sym.fakes]
    fake_state = [sym.mode.to_fake(t.detach(), device=cuda) for t in state]
    traced, _ = T._trace(model, state_names, fake_state, in_spec, leaves, sym)
    return traced.gm, relations_of(sym)       # relations_of raises if the trace pinned the batch


@pytest.mark.parametrize("name,make,inputs", FAKE_CUDA, ids=[c[0] for c in FAKE_CUDA])
def test_export_trace_on_fake_cuda_keeps_the_batch_symbolic(name, make, inputs):
    torch.manual_seed(0)
    gm, _ = _trace_on_fake_cuda(make(), inputs(4))
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert not [t for t in targets if "cudnn" in t], targets
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0][0].meta["val"]
    assert out.device.type == "cuda" and isinstance(out.shape[0], torch.SymInt), out


# -- differential: ep.module(), load(save(ep)), load_package(aot_compile(ep)) at three sizes -----------------
class PackedCheck(torch.nn.Module):
    """transformers' packed-sequence check: a data-dependent early exit that is skipped under compile."""

    def forward(self, x, pos):
        packed = (torch.diff(pos, prepend=pos[:, :1] - 1, dim=-1) != 1).cumsum(-1)
        if not torch.compiler.is_compiling() and bool((packed[:, -1] == 0).all()):
            return x * 2
        return x * 2 + packed[..., None]


class ValidatesInputs(torch.nn.Module):
    """An input check that reads values, done in eager only (as torch_compilable_check-style helpers do)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)

    def forward(self, ids):
        if not torch.compiler.is_compiling() and int(ids.max()) >= 10:
            raise ValueError("token id out of range")
        return self.emb(ids).sum(1)


class Halves(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        h = self.lin(x).relu()
        return h.view(h.shape[0] // 2, 2, -1).sum(1)


class PadToFour(torch.nn.Module):
    def forward(self, x):
        n = x.shape[1]
        return F.pad(x, (0, (-n) % 4)).view(x.shape[0], -1, 4).sum(-1)


class PairRows(torch.nn.Module):
    def forward(self, x):
        b, t, c = x.shape
        return x.reshape(b // 2, 2 * t, c).softmax(1).reshape(b, -1)


class Chunked(torch.nn.Module):
    """``T // 4`` chunks of a sequence whose length is a multiple of 4."""

    def forward(self, x):
        b, t = x.shape
        return x.view(b, t // 4, -1).amax(-1) - x.view(b, -1, 4).mean(-1)


class EvenPrefix(torch.nn.Module):
    """Pairs of steps of the longest even prefix: traced at an odd length, the program serves odd lengths."""

    def forward(self, x):
        b, t, c = x.shape
        return x[:, : t // 2 * 2].reshape(b, t // 2, 2, c).mean(2)


def _ids(b):
    return (torch.randint(0, 10, (b, 3)),)


PROGRAMS = [    # (name, model, inputs(size), the dynamic dim, sizes)
    ("packed_sequence_check", PackedCheck, lambda b: (_r(b, 6, 3), torch.arange(6).repeat(b, 1)), 0, (4, 2, 7)),
    ("value_check_in_eager_only", ValidatesInputs, _ids, 0, (4, 2, 9)),
    ("view_batch_halves", Halves, lambda b: (_r(b, 4),), 0, (4, 6, 10)),
    ("pad_to_multiple_of_4", PadToFour, lambda t: (_r(2, t),), 1, (5, 8, 13)),
    ("reshape_batch_pairs", PairRows, lambda b: (_r(b, 3, 5),), 0, (4, 6, 12)),
    ("view_seq_quarters", Chunked, lambda t: (_r(3, t),), 1, (8, 12, 32)),
    ("even_prefix_odd_lengths", EvenPrefix, lambda t: (_r(3, t, 5),), 1, (7, 9, 11)),
]


@pytest.mark.parametrize("name,make,inputs,dim,sizes", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_dynamic_export_save_and_package_equal_eager(name, make, inputs, dim, sizes, tmp_path):
    torch.manual_seed(0)
    m = make()
    example = inputs(sizes[0])
    ep = ember.export(m, example, dynamic_shapes=({dim: ember.Dim("n", max=64)},) * len(example))
    ember.save(ep, tmp_path / "p.ember")
    ember.aot_compile(ep, tmp_path / "p.ember-pkg")
    runs = {"module": ep.module(), "load": ember.load(tmp_path / "p.ember").module(),
            "package": ember.load_package(tmp_path / "p.ember-pkg")}
    for s in sizes:
        args = inputs(s)
        with torch.no_grad():
            want = m(*args)
            for how, run in runs.items():
                got = run(*tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, args))
                _close(got, want)


# -- ep.run_decompositions() of a program with dynamic dims runs and saves (sizes the prims take are graph nodes) --
DECOMPOSED = [
    ("mean_over_batch", lambda x: x.mean(0) * 2),
    ("var_over_batch", lambda x: x.var(0, correction=1)),
    ("layer_norm_over_batch", lambda x: F.layer_norm(x.t(), (x.shape[0],)) + 1),
    ("softmax_view", lambda x: x.view(-1).softmax(0).view(x.shape[0], 2, 2)),
]


@pytest.mark.parametrize("name,fn", DECOMPOSED, ids=[c[0] for c in DECOMPOSED])
def test_dynamic_run_decompositions_runs_and_saves(name, fn, tmp_path):
    dec = ember.export(fn, (_r(6, 4),), dynamic_shapes=({0: ember.Dim("batch")},)).run_decompositions()
    ember.save(dec, tmp_path / "d.ember")
    runs = [dec.module(), ember.load(tmp_path / "d.ember").module()]
    for b in (6, 9, 2):
        x = _r(b, 4)
        for run in runs:
            _close(run(x), fn(x))


# -- batch norm in training with a dynamic batch: decomposed to prims (the running variance's n / (n - 1) with a
# symbolic n), no ATen call left in the graph -------------------------------------------------------------------
BN_TRAIN = [
    ("bn1d", lambda: torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)), lambda b: (_r(b, 4),)),
    ("bn1d_3d_input", lambda: torch.nn.BatchNorm1d(3, momentum=0.3), lambda b: (_r(b, 3, 5),)),
    ("bn2d_no_affine", lambda: torch.nn.BatchNorm2d(3, affine=False), lambda b: (_r(b, 3, 4, 4),)),
    ("conv_bn", ConvBN, lambda b: (_r(b, 3, 6, 6),)),
]


@pytest.mark.parametrize("name,make,inputs", BN_TRAIN, ids=[c[0] for c in BN_TRAIN])
def test_dynamic_batchnorm_training_decomposes_to_prims(name, make, inputs):
    torch.manual_seed(0)
    m = make().train()
    ref = copy.deepcopy(m)
    dec = ember.export(m, inputs(4), dynamic_shapes=({0: ember.Dim("batch")},)).run_decompositions()
    targets = {str(n.target) for n in dec.graph.nodes if n.op == "call_function"}
    assert not [t for t in targets if "aten" in t and t != "aten.sym_size.int"], targets     # nor aten_extern
    run = dec.module()
    for b in (4, 7, 2):
        args = inputs(b)
        with torch.no_grad():
            _close(run(*args), ref(*args))
        for (k, v), (_, w) in zip(run.named_buffers(), ref.named_buffers()):
            _close(v, w)
