"""Patterns of model libraries (transformers and the like) that must stay in one graph, written out here
without the libraries: a ModelOutput (a dataclass over an OrderedDict) made and returned by ``forward``,
logging inside ``forward`` (``logger.warning``, an ``lru_cache``d ``warning_once``), ``inspect.signature``
of a bound method (``apply_chunking_to_forward``), and iterating a ``collections.abc.Sequence`` with an early
``break``. Each: compiled == eager (values, gradients, attributes, logged records) and no graph break.
"""
from __future__ import annotations

import collections
import collections.abc
import dataclasses
import functools
import inspect
import logging

import pytest
import torch
import torch.nn as nn

import ember


class OutputDict(collections.OrderedDict):
    """transformers' ModelOutput: set fields are items and attributes; ``out[0]`` goes through to_tuple()."""

    def __post_init__(self):
        fields = dataclasses.fields(self)
        first = getattr(self, fields[0].name)
        if all(self.__dict__.get(f.name) is None for f in fields[1:]) and not isinstance(first, torch.Tensor):
            raise ValueError("the first field must be a tensor")
        for f in fields:
            v = self.__dict__.get(f.name)
            if v is not None:
                self[f.name] = v

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def __setattr__(self, name, value):
        if name in {f.name for f in dataclasses.fields(self)} and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class BlockOut(OutputDict):
    hidden: torch.Tensor | None = None
    attn: torch.Tensor | None = None


@dataclasses.dataclass
class LMOut(OutputDict):
    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    hidden: torch.Tensor | None = None


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.seen: list[tuple[str, str]] = []

    def emit(self, record):
        self.seen.append((record.levelname, record.getMessage()))


class OnceLogger(logging.Logger):
    @functools.lru_cache(None)
    def warning_once(self, *args):
        self.warning(*args)


def _logger(name: str, cls=logging.Logger):
    log = cls(name)
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(_Records())
    return log


LOG = _logger("ember.tests.library")
ONCE = _logger("ember.tests.once", OnceLogger)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.ff = nn.Linear(d, d)

    def chunk_ff(self, x):
        return torch.tanh(self.ff(x))

    def forward(self, x):
        # transformers' apply_chunking_to_forward counts the chunk function's parameters
        n = len(inspect.signature(self.chunk_ff).parameters)
        y = self.chunk_ff(x) if n == 1 else x
        return BlockOut(hidden=self.fc(x).relu() + y)


class Steps(collections.abc.Sequence):
    def __init__(self, blocks):
        self.blocks = blocks

    def __getitem__(self, i):
        return self.blocks[i]

    def __len__(self):
        return len(self.blocks)


class TinyLM(nn.Module):
    def __init__(self, d=8, v=11):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(3))
        self.head = nn.Linear(d, v)

    def forward(self, x, labels=None, return_dict=True):
        LOG.info("forward with %d blocks", len(self.blocks))
        h = x
        for i, b in enumerate(Steps(self.blocks)):
            out = b(h)
            h = out[0] if i % 2 else out.hidden
            if i == 1:
                break           # leaves Sequence.__iter__ suspended in its try/except IndexError
        logits = self.head(h)
        loss = None
        if labels is not None:
            ONCE.warning_once("no loss_type set; using cross entropy")
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
        if not return_dict:
            return (loss, logits) if loss is not None else (logits,)
        return LMOut(loss=loss, logits=logits, hidden=h)


def _records():
    return [h.seen for h in LOG.handlers + ONCE.handlers]


def _clear_records():
    for h in LOG.handlers + ONCE.handlers:
        h.seen.clear()
    OnceLogger.warning_once.cache_clear()


@pytest.mark.parametrize("labels", [False, True])
def test_model_output_logging_signature_in_one_graph(labels):
    torch.manual_seed(0)
    m = TinyLM()
    x = torch.randn(2, 5, 8)
    y = torch.randint(0, 11, (2, 5)) if labels else None
    _clear_records()
    ref = m(x, labels=y)
    ref_logs = _records()
    loss_e = ref.loss if labels else ref.logits.square().mean()
    loss_e.backward()
    ref_grads = [None if p.grad is None else p.grad.clone() for p in m.parameters()]
    m.zero_grad()

    cm = ember.compile(m)
    for _ in range(2):          # the second call runs the cached graph
        _clear_records()
        out = cm(x, labels=y)
        assert type(out) is LMOut
        assert list(out.keys()) == list(ref.keys())
        assert vars(out).keys() == vars(ref).keys()
        for k in ref:
            torch.testing.assert_close(out[k], ref[k])
            assert getattr(out, k) is out[k]
        torch.testing.assert_close(out[0], ref[0])
        assert _records() == ref_logs
        loss = out.loss if labels else out.logits.square().mean()
        loss.backward()
        for p, g in zip(m.parameters(), ref_grads):
            assert (p.grad is None) == (g is None)
            if g is not None:
                torch.testing.assert_close(p.grad, g)
        m.zero_grad()

    ex = ember.explain(m)(x, labels=y)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), str(ex)


def test_cached_warning_once_runs_once_per_message():
    def f(x):
        ONCE.warning_once("once")
        return x + 1
    _clear_records()
    cf = ember.compile(f)
    for _ in range(3):
        cf(torch.ones(2))
    assert _records()[1] == [("WARNING", "once")]
    assert ember.explain(f)(torch.ones(2)).graph_break_count == 0


def test_logging_a_tensor_value_breaks_with_a_reason():
    def f(x):
        y = x.sum()
        LOG.info("sum is %s", y)
        return y * 2
    _clear_records()
    x = torch.arange(3.0)
    assert ember.compile(f)(x).item() == 6.0
    assert _records()[0] == [("INFO", "sum is tensor(3.)")]
    ex = ember.explain(f)(x)
    assert ex.graph_break_count == 1 and "logging call" in str(ex.break_reasons[0])


def test_dict_subclass_output_returned_from_function():
    class AttrDict(dict):
        def __getattr__(self, k):
            try:
                return self[k]
            except KeyError:
                raise AttributeError(k) from None

    def f(x):
        d = AttrDict(a=x.sin())
        d["b"] = d.a * 2
        return d, d.b + 1, len(d), "a" in d

    x = torch.randn(4)
    out, ref = ember.compile(f)(x), f(x)
    assert type(out[0]) is AttrDict and list(out[0]) == ["a", "b"]
    for a, b in zip((out[0]["a"], out[0]["b"], out[1]), (ref[0]["a"], ref[0]["b"], ref[1])):
        torch.testing.assert_close(a, b)
    assert out[2:] == ref[2:]
    assert ember.explain(f)(x).graph_break_count == 0
