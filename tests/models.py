"""A small model zoo for capture/backend tests, built from scratch (no downloads), sized for fast CPU tests.

Every entry is a ``ModelSpec``: ``spec.factory(seed)`` returns ``(model, make_batch)`` where
``make_batch(seed)`` returns a fresh random ``Batch(args, target)`` (never zeros); ``model(*batch.args)`` is
inference and ``spec.loss(model, batch.args, batch.target)`` is a scalar training loss.

    for spec in ZOO:
        model, make_batch = spec.factory(0)
        batch = make_batch(1)
        out = model(*batch.args)
        loss = spec.loss(model, batch.args, batch.target)
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F


class Batch(NamedTuple):
    args: tuple
    target: torch.Tensor


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _build(cls, seed: int, *args, **kwargs) -> nn.Module:
    torch.manual_seed(seed)
    return cls(*args, **kwargs)


# --------------------------------------------------------------------------------------------------- MLP
class MLP(nn.Module):
    def __init__(self, d_in: int = 16, d_hidden: int = 32, d_out: int = 4, depth: int = 3):
        super().__init__()
        dims = [d_in] + [d_hidden] * (depth - 1)
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))
        self.act = nn.ReLU()
        self.head = nn.Linear(dims[-1], d_out)

    def forward(self, x):
        for layer in self.hidden:
            x = self.act(layer(x))
        return self.head(x)


def mlp_factory(seed: int):
    model = _build(MLP, seed)

    def make_batch(s: int) -> Batch:
        g = _gen(s)
        return Batch((torch.randn(8, 16, generator=g),), torch.randint(0, 4, (8,), generator=g))

    return model, make_batch


def classify_loss(model, args, target):
    return F.cross_entropy(model(*args), target)


# ------------------------------------------------------------------------------------------- ResNet-style CNN
class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    def __init__(self, num_classes: int = 5, width: int = 8):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(inplace=True))
        self.layer1 = BasicBlock(width, width)
        self.layer2 = BasicBlock(width, 2 * width, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x):
        x = self.stem(x)
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def resnet_factory(seed: int):
    model = _build(SmallResNet, seed)

    def make_batch(s: int) -> Batch:
        g = _gen(s)
        return Batch((torch.randn(4, 3, 12, 12, generator=g),), torch.randint(0, 5, (4,), generator=g))

    return model, make_batch


# ----------------------------------------------------------------- transformer encoder layer (hand-written)
class SelfAttention(nn.Module):
    """Multi-head attention written out: q/k/v projections, scaled matmul, masking, softmax, dropout."""

    def __init__(self, d_model: int, n_head: int, dropout: float = 0.0):
        super().__init__()
        assert d_model % n_head == 0
        self.n_head = n_head
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)
        self.attn_drop = nn.Dropout(dropout)

    def split_heads(self, t):
        b, s, d = t.shape
        return t.view(b, s, self.n_head, d // self.n_head).transpose(1, 2)

    def forward(self, x, key_padding_mask=None):
        b, s, d = x.shape
        q, k, v = self.split_heads(self.q(x)), self.split_heads(self.k(x)), self.split_heads(self.v(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        attn = self.attn_drop(torch.softmax(scores, dim=-1))
        y = torch.matmul(attn, v).transpose(1, 2).contiguous().view(b, s, d)
        return self.out(y)


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int = 32, n_head: int = 4, d_ff: int = 64, dropout: float = 0.0):
        super().__init__()
        self.attn = SelfAttention(d_model, n_head, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, key_padding_mask=None):
        x = self.norm1(x + self.drop(self.attn(x, key_padding_mask)))
        return self.norm2(x + self.drop(self.ff(x)))


def encoder_factory(seed: int):
    model = _build(EncoderLayer, seed)

    def make_batch(s: int) -> Batch:
        g = _gen(s)
        x = torch.randn(2, 6, 32, generator=g)
        # pad the last position of the second sequence; no row is fully masked
        mask = torch.zeros(2, 6, dtype=torch.bool)
        mask[1, -1] = True
        return Batch((x, mask), torch.randn(2, 6, 32, generator=g))

    return model, make_batch


def regression_loss(model, args, target):
    return F.mse_loss(model(*args), target)


# ------------------------------------------------------------------------------------------- nanoGPT-style
@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 64
    block_size: int = 16
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32
    dropout: float = 0.0
    bias: bool = True


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        n = config.block_size
        self.register_buffer("bias", torch.tril(torch.ones(n, n)).view(1, 1, n, n))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class GPTMLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = GPTMLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig = GPTConfig()):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.config.block_size, f"sequence of {t} is longer than {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :])
            loss = None
        return logits, loss


def gpt_factory(seed: int, config: GPTConfig = GPTConfig()):
    model = _build(GPT, seed, config)

    def make_batch(s: int) -> Batch:
        g = _gen(s)
        idx = torch.randint(0, config.vocab_size, (2, config.block_size), generator=g)
        targets = torch.randint(0, config.vocab_size, (2, config.block_size), generator=g)
        return Batch((idx,), targets)

    return model, make_batch


def gpt_loss(model, args, target):
    _, loss = model(*args, targets=target)
    return loss


# --------------------------------------------------------------------------------------------------- table
@dataclass(frozen=True)
class ModelSpec:
    name: str
    factory: Callable[[int], tuple[nn.Module, Callable[[int], Batch]]]
    loss: Callable[[nn.Module, tuple, torch.Tensor], torch.Tensor]
    has_batchnorm: bool = False

    def __repr__(self) -> str:
        return self.name


ZOO: list[ModelSpec] = [
    ModelSpec("mlp", mlp_factory, classify_loss),
    ModelSpec("resnet", resnet_factory, classify_loss, has_batchnorm=True),
    ModelSpec("encoder", encoder_factory, regression_loss),
    ModelSpec("nanogpt", gpt_factory, gpt_loss),
]
ZOO_BY_NAME = {spec.name: spec for spec in ZOO}
