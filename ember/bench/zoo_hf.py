"""``transformers`` models of the zoo (GPT-2, BERT, Llama, T5, ViT), built from configs with random weights.

Nothing is downloaded: each model class is instantiated from a config written here. ``transformers`` is
imported only when a model is built, so listing the zoo works without it.
"""
from __future__ import annotations

from .models_handwritten import classify_loss, token_loss
from .workload import Inputs, Workload, ZooEntry, randint, randn

_NO_DROPOUT = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "hidden_dropout_prob": 0.0,
                   "attention_probs_dropout_prob": 0.0, "dropout_rate": 0.0, "attention_dropout": 0.0}


def _config(cls_name: str, c: dict, keys: tuple[str, ...]):
    import transformers
    cfg_cls = getattr(transformers, cls_name)
    extra = {k: v for k, v in _NO_DROPOUT.items() if k in keys}
    return cfg_cls(**{k: v for k, v in c.items() if k not in ("batch", "seq", "tgt")}, **extra)


def _logits_token_loss(out, target):
    return token_loss(out.logits, target)


def _logits_classify_loss(out, target):
    return classify_loss(out.logits, target)


def _lm_workload(model, c: dict) -> Workload:
    def make_inputs(seed, device):
        return Inputs((randint(seed, device, c["vocab_size"], c["batch"], c["seq"]),),
                      target=randint(seed + 1, device, c["vocab_size"], c["batch"], c["seq"]))
    return Workload(model, make_inputs, _logits_token_loss)


def build_gpt2(c: dict) -> Workload:
    import transformers
    cfg = _config("GPT2Config", c, ("resid_pdrop", "embd_pdrop", "attn_pdrop"))
    cfg.use_cache = False
    return _lm_workload(transformers.GPT2LMHeadModel(cfg), c)


def build_bert(c: dict) -> Workload:
    import transformers
    cfg = _config("BertConfig", c, ("hidden_dropout_prob", "attention_probs_dropout_prob"))
    return _lm_workload(transformers.BertForMaskedLM(cfg), c)


def build_llama(c: dict) -> Workload:
    import transformers
    cfg = _config("LlamaConfig", c, ("attention_dropout",))
    cfg.use_cache = False
    return _lm_workload(transformers.LlamaForCausalLM(cfg), c)


def build_t5(c: dict) -> Workload:
    import transformers
    cfg = _config("T5Config", c, ("dropout_rate",))
    cfg.use_cache = False
    model = transformers.T5ForConditionalGeneration(cfg)

    def make_inputs(seed, device):
        v, b = c["vocab_size"], c["batch"]
        return Inputs((), {"input_ids": randint(seed, device, v, b, c["seq"]),
                           "decoder_input_ids": randint(seed + 2, device, v, b, c["tgt"])},
                      target=randint(seed + 1, device, v, b, c["tgt"]))
    return Workload(model, make_inputs, _logits_token_loss)


def build_vit(c: dict) -> Workload:
    import transformers
    cfg = _config("ViTConfig", c, ("hidden_dropout_prob", "attention_probs_dropout_prob"))
    model = transformers.ViTForImageClassification(cfg)

    def make_inputs(seed, device):
        r = c["image_size"]
        return Inputs((randn(seed, device, c["batch"], 3, r, r),),
                      target=randint(seed + 1, device, c["num_labels"], c["batch"]))
    return Workload(model, make_inputs, _logits_classify_loss)


_TINY_LM = {"batch": 2, "seq": 32, "vocab_size": 512}
HF_ENTRIES = [
    ZooEntry("gpt2", "transformers", build_gpt2, {
        "quick": dict(_TINY_LM, n_layer=2, n_embd=64, n_head=4, n_positions=128, bos_token_id=0,
                      eos_token_id=0),
        "full": {"batch": 8, "seq": 512, "vocab_size": 50257, "n_layer": 6, "n_embd": 768, "n_head": 12,
                 "n_positions": 1024}},
        requires=("transformers",)),
    ZooEntry("bert", "transformers", build_bert, {
        "quick": dict(_TINY_LM, num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                      intermediate_size=128, max_position_embeddings=128),
        "full": {"batch": 8, "seq": 512, "vocab_size": 30522, "num_hidden_layers": 6, "hidden_size": 768,
                     "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 512}},
        requires=("transformers",)),
    ZooEntry("llama", "transformers", build_llama, {
        "quick": dict(_TINY_LM, num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=128, max_position_embeddings=128),
        "full": {"batch": 4, "seq": 512, "vocab_size": 32000, "num_hidden_layers": 8, "hidden_size": 1024,
                     "num_attention_heads": 16, "num_key_value_heads": 8, "intermediate_size": 2816,
                     "max_position_embeddings": 1024}},
        requires=("transformers",)),
    ZooEntry("t5", "transformers", build_t5, {
        "quick": dict(_TINY_LM, tgt=16, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4),
        "full": {"batch": 8, "seq": 512, "tgt": 128, "vocab_size": 32128, "d_model": 512, "d_kv": 64,
                 "d_ff": 2048, "num_layers": 6, "num_heads": 8}},
        requires=("transformers",)),
    ZooEntry("vit", "transformers", build_vit, {
        "quick": {"batch": 2, "image_size": 32, "patch_size": 8, "num_labels": 10, "num_hidden_layers": 2,
                  "hidden_size": 64,
                      "num_attention_heads": 4, "intermediate_size": 128},
        "full": {"batch": 32, "image_size": 224, "patch_size": 16, "num_labels": 1000,
                 "num_hidden_layers": 12,
                     "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072}},
        requires=("transformers",)),
]
