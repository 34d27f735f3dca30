"""Text generation with a KV cache (issue 33's acceptance): the zoo's GPT-2 and Llama-style ``transformers``
models (their "quick" configs, random weights), ``generate(max_new_tokens=64, do_sample=False,
use_cache=True)`` with the model's ``forward`` compiled: the tokens equal eager's, at most 3 graphs in total
(the prompt, the first decode step, then one symbolic graph for every later step) and no fallback to eager.
Needs ``transformers`` (skipped without it; ``PYTHONPATH=/tmp/hfpkgs`` on the development machine)."""
from __future__ import annotations

import pytest
import torch

import ember

transformers = pytest.importorskip("transformers")

_DROPOUT = {"gpt2": ("resid_pdrop", "embd_pdrop", "attn_pdrop"), "llama": ("attention_dropout",)}
_CLASSES = {"gpt2": ("GPT2Config", "GPT2LMHeadModel"), "llama": ("LlamaConfig", "LlamaForCausalLM")}


def _model(name: str):
    from ember.bench.zoo_hf import HF_ENTRIES
    entry = next(e for e in HF_ENTRIES if e.name == name)
    c = {k: v for k, v in entry.configs["quick"].items() if k not in ("batch", "seq")}
    cfg_cls, model_cls = (getattr(transformers, n) for n in _CLASSES[name])
    torch.manual_seed(0)
    model = model_cls(cfg_cls(**c, **{k: 0.0 for k in _DROPOUT[name]})).eval()
    return model, c["vocab_size"]


@pytest.mark.parametrize("prompt_len", [7, 12])
@pytest.mark.parametrize("name", sorted(_CLASSES))
def test_greedy_generation_with_kv_cache(name, prompt_len):
    model, vocab = _model(name)
    ids = torch.randint(1, vocab, (1, prompt_len), generator=torch.Generator().manual_seed(prompt_len))
    kw = dict(max_new_tokens=64, do_sample=False, use_cache=True, pad_token_id=0)
    ember.reset()
    eager_forward = model.forward
    with torch.no_grad():
        want = model.generate(ids, **kw)
        model.forward = ember.compile(eager_forward)
        try:
            got = model.generate(ids, **kw)
        finally:
            model.forward = eager_forward
    assert got.shape == (1, prompt_len + 64)
    assert torch.equal(got, want)
    stats = ember.stats()
    assert stats["graphs_compiled"] <= 3 and stats["fallbacks_to_eager"] == 0, stats
    assert stats["symbolic_graphs"] >= 1, stats
