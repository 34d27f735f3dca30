"""The dynamic-shapes program table (issue 33): programs called with several sizes.

Each ``Program`` has a ``make()`` returning the callable to compile (a function or an nn.Module) and
``inputs(size)`` returning the arguments of one call; ``sizes`` is the sequence of calls. Other stages reuse
the table with their own backends (``backend="aot_eager"``/``"ember"``).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class Program:
    name: str
    make: Callable[[], Any]
    inputs: Callable[[Any], tuple]
    sizes: tuple


PROGRAMS: list[Program] = []


def program(sizes, inputs):
    def deco(fn):
        PROGRAMS.append(Program(fn.__name__, fn, inputs, tuple(sizes)))
        return fn
    return deco


def _r(*s):
    return torch.randn(*s)


B = (3, 5, 8, 6)          # sizes seen by most programs: first, changed (automatic dynamic), then hits


# -- functions ---------------------------------------------------------------------------------------------
@program(B, lambda n: (_r(n, 8),))
def elementwise():
    return lambda x: x.sin() * 2 + 1


@program(B, lambda n: (_r(n, 8),))
def row_sum():
    return lambda x: x.sum(1) + x.mean(0).sum()


@program(B, lambda n: (_r(n, 8),))
def half_slice():
    return lambda x: x[: x.shape[0] // 2] * 2


@program((4, 6, 10, 8), lambda n: (_r(n, 8),))
def neg_slice():
    return lambda x: x[-(x.size(0) // 2):] + 1


@program(B, lambda n: (_r(n, 8),))
def view_by_size():
    return lambda x: x.view(x.size(0), 2, -1).sum(-1)


@program(B, lambda n: (_r(n, 8),))
def reshape_flat():
    return lambda x: x.reshape(-1).cumsum(0)


@program(B, lambda n: (_r(n, 4),))
def arange_of_size():
    return lambda x: x + torch.arange(x.shape[0]).unsqueeze(1)


@program(B, lambda n: (_r(n, 4),))
def new_zeros_of_size():
    return lambda x: x.sum(1) + x.new_zeros(x.size(0))


@program(B, lambda n: (_r(n, 4),))
def full_of_size():
    return lambda x: x * torch.full((x.size(0), 4), 2.0)


@program(B, lambda n: (_r(n, 4),))
def cat_pieces():
    return lambda x: torch.cat([x, x[: x.size(0) // 2] * 3], 0)


@program(B, lambda n: (_r(n, 4), _r(n + 1, 4)))
def cat_two_dynamic():
    return lambda x, y: torch.cat([x, y]).sum(0)


@program((3, 5, 8, 6, 2), lambda n: (_r(n, 4),))
def branch_on_size():
    def f(x):
        if x.shape[0] > 4:
            return x * 2
        return x - 1
    return f


@program((4, 6, 8, 5, 7), lambda n: (_r(n, 4),))
def branch_on_parity():
    def f(x):
        if x.size(0) % 2 == 0:
            return x.view(2, -1)
        return x + 1
    return f


@program(B, lambda n: (_r(n, n),))
def square_matmul():
    return lambda x: x @ x + 1


@program(B, lambda n: (_r(n, 4), _r(4, n)))
def matmul_chain():
    return lambda a, b: (a @ b).softmax(-1)


@program(B, lambda n: (_r(n, 4), _r(n, 1)))
def broadcasting():
    return lambda x, y: x * y + y


@program(B, lambda n: (_r(n, 4), _r(4)))
def broadcast_row():
    return lambda x, y: (x - y).abs().amax(1)


@program(B, lambda n: (_r(8, 4), n))
def int_argument_slice():
    return lambda x, k: x[:k] * k


@program(B, lambda n: (_r(4), n))
def int_argument_scale():
    return lambda x, k: x * (k + 1) - k // 2


@program(B, lambda n: (_r(n, 4),))
def len_and_numel():
    return lambda x: (x.sum() / x.numel(), len(x) * 2)


@program(B, lambda n: (_r(n, 4),))
def returns_size():
    return lambda x: (x + 1, x.shape[0], x.size())


@program(B, lambda n: (_r(n, 3),))
def unpack_size():
    def f(x):
        b, c = x.size()
        return x.reshape(b * c) * b
    return f


@program((3, 5, 8, 12), lambda n: (_r(n, 4),))
def min_max_sizes():
    return lambda x: x[: min(x.shape[0], 4)].sum() + x[: max(x.shape[0] // 2, 1)].sum()


@program(B, lambda n: (_r(n, 4),))
def transpose_contiguous():
    return lambda x: x.t().contiguous().view(-1)


@program(B, lambda n: (_r(n, 4),))
def expand_by_size():
    return lambda x: x[:1].expand(x.size(0), 4) + x


@program(B, lambda n: (_r(n, 4),))
def stack_and_sum():
    return lambda x: torch.stack([x, x * 2]).sum(0)


@program(B, lambda n: (_r(n, 6),))
def softmax_dynamic_dim():
    return lambda x: F.softmax(x, dim=0)


@program(B, lambda n: (_r(2, n, n),))
def causal_tril_mask():
    def f(x):
        t = x.size(-1)
        mask = torch.ones(t, t).tril().bool()
        return x.masked_fill(~mask, float("-inf")).softmax(-1)
    return f


@program(B, lambda n: (_r(2, n),))
def arange_mask_where():
    def f(x):
        keep = torch.arange(x.size(1)) < x.size(1) // 2
        return torch.where(keep, x, torch.zeros_like(x))
    return f


@program(B, lambda n: (_r(n, 3, 4),))
def bmm_batch():
    return lambda x: torch.bmm(x, x.transpose(1, 2))


@program(B, lambda n: (_r(n, 4),))
def unsqueeze_expand():
    return lambda x: x.unsqueeze(0).expand(2, -1, -1).sum(0)


@program(B, lambda n: (_r(n, 4),))
def flatten_dims():
    return lambda x: x.flatten() * 2


# -- modules -----------------------------------------------------------------------------------------------
def _seeded(mod_fn):
    torch.manual_seed(0)
    return mod_fn().eval()


@program((2, 3, 4, 5, 7, 9, 12, 16), lambda n: (_r(n, 16),))
def mlp_two_layers():
    return _seeded(lambda: nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))


@program(B, lambda n: (_r(n, 10),))
def layernorm_module():
    return _seeded(lambda: nn.Sequential(nn.LayerNorm(10), nn.GELU()))


@program(B, lambda n: (torch.randint(0, 20, (2, n)),))
def embedding_seq():
    return _seeded(lambda: nn.Embedding(20, 6))


@program(B, lambda n: (_r(n, 3, 8, 8),))
def conv_dynamic_batch():
    return _seeded(lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(1)))


@program((6, 8, 10, 12), lambda n: (_r(2, 3, n, n),))
def conv_dynamic_spatial():
    return _seeded(lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()))


@program((6, 8, 10, 12), lambda n: (_r(2, 3, n, n),))
def conv_adaptive_pool():
    return _seeded(lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(1)))


class _Attention(nn.Module):
    def __init__(self, d=16, h=2):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.h, c // self.h).transpose(1, 2)
        k = k.view(b, t, self.h, c // self.h).transpose(1, 2)
        v = v.view(b, t, self.h, c // self.h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // self.h) ** 0.5)
        mask = torch.ones(t, t).tril().view(1, 1, t, t)
        att = att.masked_fill(mask == 0, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.out(y)


@program(B, lambda n: (_r(2, n, 16),))
def causal_attention():
    return _seeded(_Attention)


class _SdpaAttention(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        q = self.proj(x)
        return F.scaled_dot_product_attention(q, x, x, is_causal=True)


@program(B, lambda n: (_r(2, n, 16),))
def sdpa_causal():
    return _seeded(_SdpaAttention)


class _KVCache(nn.Module):
    """A decode step: the cache grows by one token per call."""

    def __init__(self, d=8):
        super().__init__()
        self.k = nn.Linear(d, d)

    def forward(self, cache, x):
        cache = torch.cat([cache, self.k(x)], dim=1)
        att = (x @ cache.transpose(1, 2)).softmax(-1)
        return att @ cache, cache.size(1)


@program(tuple(range(2, 12)), lambda n: (_r(1, n, 8), _r(1, 1, 8)))
def kv_cache_grows():
    return _seeded(_KVCache)


# -- ops whose meta kernels take only concrete sizes (capture's shape rules), result sizes read ------------
def _read(y):
    """Read every size of ``y`` in Python (a view by them): the sizes must be known symbolically."""
    return y.reshape(*y.shape) * 2 + y.size(-1)


@program(B, lambda n: (_r(n, 8),))
def split_pieces_loop():
    return lambda x: torch.stack([_read(a).sum() for a in x.split(2)])


@program(B, lambda n: (_r(n, 8),))
def chunk_static_dim():
    def f(x):
        a, b = x.chunk(2, dim=1)
        return _read(a) - _read(b)
    return f


@program(B, lambda n: (_r(n, 8),))
def flatten_unflatten_movedim():
    return lambda x: _read(x.unflatten(1, (2, 4)).movedim(0, 2).flatten(0, 1))


@program(B, lambda n: (_r(n, 8),))
def permute_select_softmax():
    return lambda x: _read(x.view(x.size(0), 2, 4).permute(2, 0, 1).select(0, 1).softmax(0))


@program(B, lambda n: (_r(n, 8),))
def pad_where_relu():
    return lambda x: _read(torch.where(x > 0, F.pad(x, (1, 2)).relu()[:, 1:9], x))


@program(B, lambda n: (_r(n, 4),))
def stack_reads():
    return lambda x: _read(torch.stack([x, x * 2], dim=1)).sum()


@program(B, lambda n: (_r(n, 4), _r(4, 5)))
def einsum_reads():
    return lambda x, w: _read(torch.einsum("ij,jk->ik", x, w))


@program(B, lambda n: (_r(n, 6),))
def tensor_index_reads():
    return lambda x: _read(x[torch.tensor([0, 1])]).sum() + _read(x[:, torch.tensor([[0], [2]])]).sum()


@program(B, lambda n: (_r(n, 4),))
def int_of_size():
    return lambda x: x * int(x.size(0)) + int(x.shape[0] // 2)


class _SplitAttention(nn.Module):
    """Attention as real models write it: split by the channel size, view(B, T, H, D) by the read sizes."""

    def __init__(self, d=16, h=2):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        q, k, v = self.qkv(x).split(x.size(-1), dim=2)
        b, t, c = q.shape
        q, k, v = (y.view(b, t, self.h, c // self.h).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, c)
        return y.chunk(2, dim=-1)[0].flatten(1)


@program(B, lambda n: (_r(2, n, 16),))
def split_attention_reads():
    return _seeded(_SplitAttention)


# -- batched operands through ATen's composite ops (matmul, linear, sdpa): some PyTorch releases (2.11) read
# their sizes as plain ints there; ember traces its own compositions (ember/autograd/symcompose.py) ----------
@program(B, lambda n: (_r(2, n, 16),))
def linear_no_bias_seq():
    return _seeded(lambda: nn.Sequential(nn.Linear(16, 8, bias=False), nn.Tanh(), nn.Linear(8, 4, bias=False)))


@program(B, lambda n: (_r(n, 3, 8), _r(8, 5)))
def matmul_3d_by_2d():
    return lambda x, w: (x @ w).relu() + torch.matmul(x, w[:, 0])[..., None]


@program(B, lambda n: (_r(2, n, 4), _r(2, 4, n * 3 % 7 + 2)))
def bmm_two_symbolic_dims():
    return lambda a, b: torch.bmm(a, b).softmax(-1) @ b.transpose(1, 2)


class _MaskedSdpa(nn.Module):
    """BERT's self-attention: heads by view/transpose, an additive mask from a (batch, seq) attention mask."""

    def __init__(self, d=16, h=4):
        super().__init__()
        self.h = h
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x, keep):
        b, t, c = x.shape
        heads = [p(x).view(b, t, self.h, c // self.h).transpose(1, 2) for p in (self.q, self.k, self.v)]
        mask = (1.0 - keep[:, None, None, :].to(x.dtype)) * -10000.0
        y = F.scaled_dot_product_attention(*heads, attn_mask=mask, scale=0.5)
        return y.transpose(1, 2).reshape(b, t, c)


@program(B, lambda n: (_r(n, 6, 16), (torch.rand(n, 6) > 0.2).long()))
def sdpa_additive_mask():
    return _seeded(_MaskedSdpa)


@program(B, lambda n: (_r(2, 2, n, 8), _r(2, 2, n, 8), _r(2, 2, n, 8)))
def sdpa_bool_size_mask():
    def f(q, k, v):
        t = q.shape[-2]
        band = (torch.arange(t)[:, None] - torch.arange(t)[None, :]).abs() <= t // 2
        return F.scaled_dot_product_attention(q, k, v, attn_mask=band)
    return f


class _GPTBlock(nn.Module):
    """nanoGPT's block: a causal mask buffer sliced to the length, tanh GELU, a bias-free head."""

    def __init__(self, d=16, h=2, block=32):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.head = nn.Linear(d, 10, bias=False)
        self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.attn(self.ln1(x)).split(c, dim=2)
        q, k, v = (y.view(b, t, self.h, c // self.h).transpose(1, 2) for y in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))
        x = x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return self.head(x)


@program(B, lambda n: (_r(2, n, 16),))
def nanogpt_block():
    return _seeded(_GPTBlock)


# -- more of the categories -------------------------------------------------------------------------
@program((6, 8, 10, 12), lambda n: (_r(2, 3, n, n),))
def conv_maxpool_spatial():
    return _seeded(lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                         nn.Conv2d(4, 4, 1), nn.AdaptiveAvgPool2d((2, 2)), nn.Flatten(1)))


class _SdpaCache(nn.Module):
    """A decode step attending over a KV cache that grows by one token per call."""

    def __init__(self, d=8):
        super().__init__()
        self.k, self.v = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, kc, vc, x):
        kc = torch.cat([kc, self.k(x)], dim=2)
        vc = torch.cat([vc, self.v(x)], dim=2)
        return F.scaled_dot_product_attention(x, kc, vc), kc, vc


@program(tuple(range(2, 10)), lambda n: (_r(1, 2, n, 8), _r(1, 2, n, 8), _r(1, 2, 1, 8)))
def sdpa_kv_cache_grows():
    return _seeded(_SdpaCache)


@program(B, lambda n: (_r(12, 4), n))
def int_arg_slice_arange():
    return lambda x, n: x[:n] * torch.arange(n).unsqueeze(1) + x[n:].sum()


@program(B, lambda n: (_r(3, n), _r(n), _r(n)))
def layer_norm_dynamic_dim():
    return lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b)


class _PosEmbedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(20, 8), nn.Embedding(32, 8)

    def forward(self, idx):
        return self.tok(idx) + self.pos(torch.arange(idx.shape[1]))


@program(B, lambda n: (torch.randint(0, 20, (2, n)),))
def embedding_positions():
    return _seeded(_PosEmbedding)


@program(B, lambda n: (_r(n, 3),))
def masked_fill_size_mask():
    return lambda x: x.masked_fill(torch.arange(x.shape[0])[:, None] >= x.shape[0] - 1, 0.0) * 2


@program(B, lambda n: (_r(n, 2),))
def repeat_tile_by_size():
    return lambda x: x.repeat(2, x.shape[1]).sum(1) + x.tile((1, 3)).mean(0).sum()


@program(B, lambda n: (_r(7, 4), torch.randint(0, 7, (n,))))
def index_select_gather():
    return lambda x, i: x.index_select(0, i) * 2 + torch.gather(x, 0, i[:, None].expand(i.shape[0], 4))


class _BranchBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if x.shape[0] > 1:
            return self.lin(x) - self.lin(x).mean(0)
        return self.lin(x)


@program((1, 3, 5, 8, 6), lambda n: (_r(n, 4),))
def branch_batch_gt_one():
    return _seeded(_BranchBatch)


@program(B, lambda n: (_r(n, 5), torch.randint(0, 5, (n,))))
def mean_loss_dynamic_batch():
    return lambda x, y: F.cross_entropy(x * 2, y) + (x ** 2).mean()


# -- sizes with floor divisions: a view's -1 over ``B // 2`` is whole only for even B (ember.shapes' divisibility
# facts make ``2*(B // 2)`` and ``B`` the same size; the kernels compiled one graph per size before) --------
@program((4, 6, 10, 8), lambda n: (_r(n, 4),))
def view_batch_halves():
    def f(x):
        h = torch.tanh(x * 2)
        return h.view(h.shape[0] // 2, 2, -1).sum(1)
    return f


@program((5, 8, 13, 6), lambda n: (_r(2, n),))
def pad_to_multiple_of_4():
    return lambda x: F.pad(x, (0, (-x.shape[1]) % 4)).view(x.shape[0], -1, 4).sum(-1)


# -- floats computed from sizes (a SymFloat in torch.compile: no specialization) -------------------------
@program(B, lambda n: (_r(n, 4),))
def float_times_size():
    return lambda x: x * (100.0 * x.shape[0]) - 0.5 * x.shape[0]


@program(B, lambda n: (_r(n, 4),))
def size_truediv():
    return lambda x: x * (x.shape[0] / 3) + x.shape[0] / 2


@program(B, lambda n: (_r(4, n),))
def size_pow_neg_half():
    return lambda x: x * (x.shape[-1] ** -0.5)


@program(B, lambda n: (_r(4, n),))
def math_sqrt_of_size():
    return lambda x: x / math.sqrt(x.shape[-1]) + 1


@program(B, lambda n: (_r(n, 3),))
def float_of_size():
    return lambda x: x * float(x.shape[0]) + float(len(x)) / 4


@program(B, lambda n: (_r(2, 3, n), _r(2, 5, n), _r(2, 5, n)))
def attention_scale_by_head_dim():
    def f(q, k, v):
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        return att.softmax(-1) @ v * q.shape[-1] ** -0.5
    return f


@program(B, lambda n: (_r(n, 2),))
def returns_float_of_size():
    return lambda x: (x * 2, x.shape[0] / 4, float(x.shape[0]))


@program(B, lambda n: (_r(n, 2),))
def branch_on_float_of_size():
    def f(x):
        scale = x.shape[0] / 4
        return x * scale if scale > 1.0 else x - scale
    return f


@program(B, lambda n: (_r(n, 2),))
def branch_on_size_against_float():
    return lambda x: x * 2 if x.shape[0] > 4.5 else x - 1


@program(B, lambda n: (_r(4), n))
def int_argument_truediv():
    return lambda x, k: x * (k / 2) + k ** 0.5


@program(B, lambda n: (_r(n, 3),))
def full_of_float_size():
    return lambda x: x + torch.full((x.shape[0], 1), x.shape[1] / x.shape[0])


# -- helpers the tests of every stage share -----------------------------------------------------------------
def same(a, b, **tol) -> None:
    """``a`` equals ``b``: tensors within ``tol`` (torch's defaults otherwise), containers item by item, other
    values exactly (type included)."""
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, equal_nan=True, **tol)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y, **tol)
    else:
        assert a == b and type(a) is type(b), (a, b)


@functools.lru_cache(maxsize=None)
def torch_graph_count(name: str) -> int:
    """How many graphs torch.compile (dynamic=None) compiles for program ``name``'s calls."""
    import torch._dynamo
    prog = next(p for p in PROGRAMS if p.name == name)
    torch._dynamo.reset()
    n = [0]

    def counting(gm, example_inputs):
        n[0] += 1
        return gm.forward
    c = torch.compile(prog.make(), backend=counting)
    for s in prog.sizes:
        torch.manual_seed(s)
        c(*prog.inputs(s))
    torch._dynamo.reset()
    return n[0]
