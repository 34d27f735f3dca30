"""Sweep real models outside the zoo through ``ember.compile`` and compare with eager.

For each model of the table (transformers models built from tiny configs, torchvision models with
``weights=None``, timm models with ``pretrained=False``; random weights, nothing downloaded) a child process

* runs the eval forward twice, the second time with another batch size (a dynamic-shape recompile);
* runs one training step (``loss.backward()``) and compares the loss, every parameter's gradient and every
  buffer after the step (BatchNorm statistics); a step with mismatches is rerun through ember in float64, and
  one right there is a float32 near tie at a ReLU's kink, not a wrong result (``_recheck_float64``);
* counts graphs, graph breaks and recompiles (``ember.stats()``), and the break reasons (``ember.explain``);
* times a cached eval call against eager.

Values are compared against a float64 eager reference: the compiled result may be off from it by at most
``ERR_FACTOR`` times what eager float32 is off (plus a tiny relative floor), as issue 31 measures ShuffleNetV2.

Usage (transformers and torchvision are not dependencies of ember; put them on the path)::

    PYTHONPATH=/tmp/timmpkgs:/tmp/tvpkgs:/tmp/hfpkgs python tools/models_sweep.py [NAME_OR_PREFIX ...] [--timeout S]

Prints one row per model: status (ok / wrong / crash / breaks / nograph / fallback / skip), graphs (compiled or
read from the whole-graph cache), breaks, recompiles, eager and compiled cached-call times, and the first reason.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ERR_FACTOR = 10.0
REL_FLOOR = 1e-5
CANCEL_RATIO = 1e-6     # a tensor this small against its family is zero by cancellation (see _mismatch)
FP32_EPS = 2.0 ** -23

# ---------------------------------------------------------------------------------------------- the table


def _hf(model_type: str, head: str, kind: str, **cfg):
    return {"src": "hf", "type": model_type, "head": head, "kind": kind, "cfg": cfg}


def _tv(fn: str, res: int = 64, train: bool = True, **kw):
    return {"src": "tv", "fn": fn, "res": res, "train": train, "kw": kw}


def _tm(fn: str, res: int = 64, train: bool = True, **kw):
    """A timm model by its registry name, random weights (``pretrained=False``), 10 classes."""
    return {"src": "timm", "fn": fn, "res": res, "train": train, "kw": kw}


_BERTISH = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0, num_labels=3)
_DEC = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64)
_BART = dict(vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
             decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
             dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
_VIT = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=3)

MODELS: dict[str, dict] = {
    "hf_t5": _hf("t5", "AutoModelForSeq2SeqLM", "seq2seq", vocab_size=99, d_model=32, d_kv=8, d_ff=64,
                 num_layers=2, num_heads=4, dropout_rate=0.0),
    "hf_bart": _hf("bart", "AutoModelForSeq2SeqLM", "seq2seq", **_BART),
    "hf_whisper": _hf("whisper", "AutoModelForSpeechSeq2Seq", "whisper",
                      **{**_BART, "num_mel_bins": 16, "max_source_positions": 16, "max_target_positions": 32}),
    "hf_vit": _hf("vit", "AutoModelForImageClassification", "image", **_VIT),
    "hf_clip": _hf("clip", "AutoModel", "clip",
                   text_config=dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                    intermediate_size=64, max_position_embeddings=64),
                   vision_config=dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=64), projection_dim=16),
    "hf_distilbert": _hf("distilbert", "AutoModelForSequenceClassification", "text", vocab_size=99, dim=32,
                         n_layers=2, n_heads=2, hidden_dim=64, dropout=0.0, attention_dropout=0.0,
                         seq_classif_dropout=0.0, num_labels=3),
    "hf_roberta": _hf("roberta", "AutoModelForSequenceClassification", "text", **_BERTISH),
    "hf_electra": _hf("electra", "AutoModelForSequenceClassification", "text", **_BERTISH, embedding_size=16),
    "hf_albert": _hf("albert", "AutoModelForSequenceClassification", "text", **_BERTISH, embedding_size=16,
                     classifier_dropout_prob=0.0),
    "hf_deberta_v2": _hf("deberta-v2", "AutoModelForSequenceClassification", "text", **_BERTISH),
    "hf_mobilebert": _hf("mobilebert", "AutoModelForSequenceClassification", "text", **_BERTISH,
                         embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16,
                         num_feedforward_networks=2),
    "hf_mistral": _hf("mistral", "AutoModelForCausalLM", "causal", **_DEC, num_key_value_heads=2),
    "hf_qwen2": _hf("qwen2", "AutoModelForCausalLM", "causal", **_DEC, num_key_value_heads=2),
    "hf_phi": _hf("phi", "AutoModelForCausalLM", "causal", **_DEC, resid_pdrop=0.0, embd_pdrop=0.0),
    "hf_gpt_neo": _hf("gpt_neo", "AutoModelForCausalLM", "causal", vocab_size=99, hidden_size=32, num_layers=2,
                      num_heads=4, attention_types=[[["global", "local"], 1]], max_position_embeddings=64,
                      window_size=4, embed_dropout=0.0, attention_dropout=0.0, resid_dropout=0.0),
    "hf_opt": _hf("opt", "AutoModelForCausalLM", "causal", vocab_size=99, hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=4, ffn_dim=64, word_embed_proj_dim=32, max_position_embeddings=64,
                  dropout=0.0, attention_dropout=0.0),
    "hf_falcon": _hf("falcon", "AutoModelForCausalLM", "causal", vocab_size=99, hidden_size=32,
                     num_hidden_layers=2, num_attention_heads=4, hidden_dropout=0.0, attention_dropout=0.0),
    "hf_bloom": _hf("bloom", "AutoModelForCausalLM", "causal", vocab_size=99, hidden_size=32, n_layer=2,
                    n_head=4, hidden_dropout=0.0, attention_dropout=0.0),
    "hf_segformer": _hf("segformer", "AutoModelForImageClassification", "image", num_channels=3,
                        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
                        patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0,
                        classifier_dropout_prob=0.0, num_labels=3, image_size=32),
    "hf_swin": _hf("swin", "AutoModelForImageClassification", "image", image_size=32, patch_size=4,
                   embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=2, hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0, drop_path_rate=0.0, num_labels=3),
    "hf_convnext": _hf("convnext", "AutoModelForImageClassification", "image", hidden_sizes=[8, 16],
                       depths=[1, 1], num_stages=2, image_size=32, drop_path_rate=0.0, num_labels=3),
    # beyond the list: more families of transformers 5
    "hf_gptj": _hf("gptj", "AutoModelForCausalLM", "causal", vocab_size=99, n_embd=32, n_layer=2, n_head=4,
                   rotary_dim=4, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    "hf_gpt_neox": _hf("gpt_neox", "AutoModelForCausalLM", "causal", **_DEC, hidden_dropout=0.0,
                       attention_dropout=0.0),
    "hf_gpt_bigcode": _hf("gpt_bigcode", "AutoModelForCausalLM", "causal", vocab_size=99, n_embd=32, n_layer=2,
                          n_head=4, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    "hf_codegen": _hf("codegen", "AutoModelForCausalLM", "causal", vocab_size=99, n_embd=32, n_layer=2, n_head=4,
                      rotary_dim=4, n_positions=64, n_ctx=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    "hf_gemma": _hf("gemma", "AutoModelForCausalLM", "causal", **_DEC, num_key_value_heads=2, head_dim=8),
    "hf_gemma2": _hf("gemma2", "AutoModelForCausalLM", "causal", **_DEC, num_key_value_heads=2, head_dim=8,
                     sliding_window=4),
    "hf_mixtral": _hf("mixtral", "AutoModelForCausalLM", "causal", **_DEC, num_key_value_heads=2,
                      num_local_experts=4, num_experts_per_tok=2),
    "hf_qwen2_moe": _hf("qwen2_moe", "AutoModelForCausalLM", "causal", **_DEC, num_key_value_heads=2,
                        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                        shared_expert_intermediate_size=32),
    "hf_stablelm": _hf("stablelm", "AutoModelForCausalLM", "causal", **_DEC, num_key_value_heads=2),
    "hf_starcoder2": _hf("starcoder2", "AutoModelForCausalLM", "causal", **_DEC, num_key_value_heads=2,
                         residual_dropout=0.0, embedding_dropout=0.0),
    "hf_xlm_roberta": _hf("xlm-roberta", "AutoModelForSequenceClassification", "text", **_BERTISH),
    "hf_mpnet": _hf("mpnet", "AutoModelForSequenceClassification", "text", **_BERTISH),
    "hf_convbert": _hf("convbert", "AutoModelForSequenceClassification", "text", **_BERTISH, embedding_size=32),
    "hf_funnel": _hf("funnel", "AutoModelForSequenceClassification", "text", vocab_size=99, d_model=32, n_head=2,
                     d_head=16, d_inner=64, block_sizes=[1, 1], num_decoder_layers=1, hidden_dropout=0.0,
                     attention_dropout=0.0, activation_dropout=0.0, num_labels=3),
    "hf_xlnet": _hf("xlnet", "AutoModelForSequenceClassification", "text", vocab_size=99, d_model=32, n_layer=2,
                    n_head=2, d_inner=64, dropout=0.0, num_labels=3),
    "hf_squeezebert": _hf("squeezebert", "AutoModelForSequenceClassification", "text", **_BERTISH,
                          embedding_size=32),
    "hf_pegasus": _hf("pegasus", "AutoModelForSeq2SeqLM", "seq2seq", **_BART),
    "hf_marian": _hf("marian", "AutoModelForSeq2SeqLM", "seq2seq", **_BART, decoder_vocab_size=99),
    "hf_mbart": _hf("mbart", "AutoModelForSeq2SeqLM", "seq2seq", **_BART),
    "hf_beit": _hf("beit", "AutoModelForImageClassification", "image", **_VIT, use_relative_position_bias=True),
    "hf_deit": _hf("deit", "AutoModelForImageClassification", "image", **_VIT, architectures=[]),
    "hf_dinov2": _hf("dinov2", "AutoModelForImageClassification", "image", **_VIT),
    "hf_mobilevit": _hf("mobilevit", "AutoModelForImageClassification", "image", image_size=32, patch_size=2,
                        hidden_sizes=[16, 16, 16], neck_hidden_sizes=[8, 8, 8, 8, 8, 8, 16],
                        num_attention_heads=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        classifier_dropout_prob=0.0, num_labels=3),
    "hf_levit": _hf("levit", "AutoModelForImageClassification", "image", image_size=32, hidden_sizes=[16, 24, 32],
                    num_attention_heads=[1, 2, 2], depths=[1, 1, 1], key_dim=[8, 8, 8], num_labels=3),
    "hf_poolformer": _hf("poolformer", "AutoModelForImageClassification", "image", hidden_sizes=[8, 16, 16, 16],
                         depths=[1, 1, 1, 1], num_labels=3),
    "hf_resnet": _hf("resnet", "AutoModelForImageClassification", "image", embedding_size=8,
                     hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1], num_labels=3),
    "hf_regnet": _hf("regnet", "AutoModelForImageClassification", "image", embedding_size=8,
                     hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1], groups_width=8, num_labels=3),
    "hf_wav2vec2": _hf("wav2vec2", "AutoModelForAudioClassification", "audio", vocab_size=99,
                       hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                       conv_dim=(16, 16), conv_stride=(4, 4), conv_kernel=(8, 8), num_conv_pos_embeddings=8,
                       num_conv_pos_embedding_groups=2, hidden_dropout=0.0, attention_dropout=0.0,
                       activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0,
                       classifier_proj_size=16, num_labels=3),
    "hf_hubert": _hf("hubert", "AutoModelForAudioClassification", "audio", vocab_size=99, hidden_size=32,
                     num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, conv_dim=(16, 16),
                     conv_stride=(4, 4), conv_kernel=(8, 8), num_conv_pos_embeddings=8,
                     num_conv_pos_embedding_groups=2, hidden_dropout=0.0, attention_dropout=0.0,
                     activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0,
                     classifier_proj_size=16, num_labels=3),
    "hf_mamba": _hf("mamba", "AutoModelForCausalLM", "causal", vocab_size=99, hidden_size=32, num_hidden_layers=2,
                    state_size=4, expand=2, conv_kernel=4, time_step_rank=4),
}
# the same models asked for their hidden states and attentions (transformers 5 collects them with hooks it
# installs on the first call that asks): "<row>+hs"
_OUTPUTS_OF = ("hf_t5", "hf_bart", "hf_whisper", "hf_vit", "hf_clip", "hf_distilbert", "hf_mistral", "hf_gpt_neo",
               "hf_opt", "hf_deit", "hf_mobilevit", "hf_funnel", "hf_wav2vec2", "hf_roberta", "hf_segformer",
               "hf_swin", "hf_gpt_neox", "hf_llama")
MODELS: dict[str, dict] = {**MODELS, **{
    "hf_llama": _hf("llama", "AutoModelForCausalLM", "causal", **_DEC, num_key_value_heads=2),
    "hf_vit_mae": _hf("vit_mae", "ViTMAEForPreTraining", "mae", **_VIT, mask_ratio=0.5),
    "hf_layoutlm": _hf("layoutlm", "AutoModelForSequenceClassification", "text", **_BERTISH),
    "hf_encoder_decoder": _hf("bert", "EncoderDecoderModel", "encdec", **_BERTISH),
    "hf_reformer": _hf("reformer", "AutoModelForCausalLM", "causal", vocab_size=99, hidden_size=32,
                       num_attention_heads=2, attention_head_size=16, feed_forward_size=64,
                       attn_layers=["local", "local"], axial_pos_embds=False, local_attn_chunk_length=4,
                       max_position_embeddings=64, hidden_dropout_prob=0.0,
                       local_attention_probs_dropout_prob=0.0, is_decoder=True),
}}
MODELS.update({f"{n}+hs": {**MODELS[n], "call_kw": {"output_hidden_states": True, "output_attentions": True}}
               for n in _OUTPUTS_OF})
MODELS.update({
    "tv_mobilenet_v2": _tv("mobilenet_v2", dropout=0.0, num_classes=10),
    "tv_mobilenet_v3_small": _tv("mobilenet_v3_small", dropout=0.0, num_classes=10),
    "tv_efficientnet_b0": _tv("efficientnet_b0", dropout=0.0, stochastic_depth_prob=0.0, num_classes=10),
    "tv_regnet_y_400mf": _tv("regnet_y_400mf", num_classes=10),
    "tv_densenet121": _tv("densenet121", res=32, num_classes=10),
    "tv_shufflenet_v2": _tv("shufflenet_v2_x0_5", num_classes=10),
    "tv_squeezenet": _tv("squeezenet1_1", dropout=0.0, num_classes=10),
    "tv_vit_b_16": _tv("vit_b_16", res=32, image_size=32, num_classes=10),
    "tv_swin_t": _tv("swin_t", res=64, num_classes=10),
    "tv_convnext_tiny": _tv("convnext_tiny", res=32, stochastic_depth_prob=0.0, num_classes=10),
    "tv_resnext50": _tv("resnext50_32x4d", res=32, num_classes=10),
    "tv_googlenet": _tv("googlenet", train=False, aux_logits=False, init_weights=True, dropout=0.0,
                        num_classes=10),
    "tv_inception_v3": _tv("inception_v3", res=80, train=False, aux_logits=False, init_weights=True,
                           dropout=0.0, num_classes=10),
    "tv_fasterrcnn_mnv3": _tv("detection.fasterrcnn_mobilenet_v3_large_fpn", res=96, train=False,
                              weights_backbone=None, num_classes=5, min_size=96, max_size=96),
    "tv_maskrcnn": _tv("detection.maskrcnn_resnet50_fpn", res=96, train=False, weights_backbone=None,
                       num_classes=5, min_size=96, max_size=96),
    # timm (``pip install --no-deps --target DIR timm``; it imports torchvision): skipped where missing
    "tm_resnet18": _tm("resnet18"),
    "tm_resnet50d": _tm("resnet50d"),
    "tm_efficientnet_b0": _tm("efficientnet_b0"),
    "tm_mobilenetv3_small": _tm("mobilenetv3_small_100"),
    "tm_convnext_atto": _tm("convnext_atto"),
    "tm_convnext_nano": _tm("convnext_nano"),
    "tm_vit_tiny": _tm("vit_tiny_patch16_224", img_size=64),
    "tm_deit_tiny": _tm("deit_tiny_patch16_224", img_size=64),
    "tm_swin_tiny": _tm("swin_tiny_patch4_window7_224", img_size=64, window_size=2),
    "tm_regnety_002": _tm("regnety_002"),
    "tm_rexnet_100": _tm("rexnet_100"),
    "tm_ghostnet_100": _tm("ghostnet_100"),
    "tm_mixer_s16": _tm("mixer_s16_224", img_size=64),
    "tm_levit_128s": _tm("levit_128s", img_size=64),
    "tm_coatnet_0": _tm("coatnet_0_rw_224", img_size=64),
    "tm_maxvit_tiny": _tm("maxvit_tiny_rw_224", img_size=64),
    "tm_poolformer_s12": _tm("poolformer_s12"),
    "tm_cait_xxs24": _tm("cait_xxs24_224", img_size=64),
    "tm_xcit_nano": _tm("xcit_nano_12_p16_224", img_size=64),
    "tm_edgenext_xx_small": _tm("edgenext_xx_small"),
    "tm_mobilevit_xxs": _tm("mobilevit_xxs"),
    "tm_tinynet_a": _tm("tinynet_a"),
    "tm_hrnet_w18_small": _tm("hrnet_w18_small"),
    "tm_dla34": _tm("dla34"),
    "tm_dpn68": _tm("dpn68"),
    "tm_res2net50_14w_8s": _tm("res2net50_14w_8s"),
    "tm_skresnet18": _tm("skresnet18"),
})
# the thirty-second session's rows: families of unusual code not swept before
MODELS.update({
    "hf_siglip": _hf("siglip", "AutoModel", "clip",
                     text_config=dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=64),
                     vision_config=dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, intermediate_size=64)),
    "hf_swinv2": _hf("swinv2", "AutoModelForImageClassification", "image", image_size=32, patch_size=4,
                     embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=2, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, drop_path_rate=0.0, num_labels=3),
    "hf_convnextv2": _hf("convnextv2", "AutoModelForImageClassification", "image", hidden_sizes=[8, 16],
                         depths=[1, 1], num_stages=2, image_size=32, drop_path_rate=0.0, num_labels=3),
    "hf_longformer": _hf("longformer", "AutoModelForSequenceClassification", "text", **_BERTISH,
                         attention_window=[4, 4]),
    "hf_big_bird": _hf("big_bird", "AutoModelForSequenceClassification", "text", **_BERTISH,
                       attention_type="original_full"),
    "hf_blenderbot": _hf("blenderbot", "AutoModelForSeq2SeqLM", "seq2seq", **_BART),
    "hf_led": _hf("led", "AutoModelForSeq2SeqLM", "seq2seq", **{k: v for k, v in _BART.items()
                                                                 if k != "max_position_embeddings"},
                  attention_window=[4, 4], max_encoder_position_embeddings=64,
                  max_decoder_position_embeddings=64),
    "hf_biogpt": _hf("biogpt", "AutoModelForCausalLM", "causal", **_DEC, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0),
    "hf_xglm": _hf("xglm", "AutoModelForCausalLM", "causal", vocab_size=99, d_model=32, num_layers=2,
                   attention_heads=4, ffn_dim=64, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
                   activation_dropout=0.0),
    "hf_phi3": _hf("phi3", "AutoModelForCausalLM", "causal", **_DEC, num_key_value_heads=2, pad_token_id=0),
    "hf_olmo": _hf("olmo", "AutoModelForCausalLM", "causal", **_DEC, num_key_value_heads=2),
    "hf_rwkv": _hf("rwkv", "AutoModelForCausalLM", "causal", vocab_size=99, hidden_size=32, num_hidden_layers=2,
                   attention_hidden_size=32, intermediate_size=64, context_length=64),
    "hf_nystromformer": _hf("nystromformer", "AutoModelForSequenceClassification", "text", **_BERTISH,
                            num_landmarks=4, segment_means_seq_len=8),
    "tv_mnasnet": _tv("mnasnet0_5", dropout=0.0, num_classes=10),
    "tv_efficientnet_v2_s": _tv("efficientnet_v2_s", res=32, dropout=0.0, stochastic_depth_prob=0.0,
                                num_classes=10),
    "tv_lraspp": _tv("segmentation.lraspp_mobilenet_v3_large", train=False, weights_backbone=None,
                     num_classes=5),
    "tv_r3d_18": _tv("video.r3d_18", res=32, frames=4, num_classes=10),
    "tv_retinanet": _tv("detection.retinanet_resnet50_fpn", res=96, train=False, weights_backbone=None,
                        num_classes=5, min_size=96, max_size=96),
    "tm_coat_lite_tiny": _tm("coat_lite_tiny", img_size=64),
    "tm_pit_ti": _tm("pit_ti_224", img_size=64),
    "tm_gernet_s": _tm("gernet_s"),
    "tm_nf_resnet26": _tm("nf_resnet26"),
    "tm_pvt_v2_b0": _tm("pvt_v2_b0"),
    "tm_mobileone_s0": _tm("mobileone_s0"),
    "tm_fastvit_t8": _tm("fastvit_t8"),
    "tm_sequencer2d_s": _tm("sequencer2d_s", img_size=64),
    "tm_volo_d1": _tm("volo_d1_224", img_size=64),
    "tm_twins_pcpvt": _tm("twins_pcpvt_small"),
    "tm_eva02_tiny": _tm("eva02_tiny_patch14_224", res=56, img_size=56),
    "tm_cspresnet50": _tm("cspresnet50"),
})

# ------------------------------------------------------------------------------------- building a model


def _zero_dropout(model) -> None:
    """Dropout draws from the RNG in an order a compiler may change: switch it off everywhere."""
    import torch.nn as nn
    for m in model.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd):
            m.p = 0.0
        for k, v in list(vars(m).items()):
            if "drop" in k and isinstance(v, float):
                setattr(m, k, 0.0)


def _hf_inputs(spec: dict, cfg, batch: int, seed: int, labels: bool) -> dict:
    import torch
    g = torch.Generator().manual_seed(seed)
    seq = 8
    ids = lambda n=seq: torch.randint(3, 99, (batch, n), generator=g)  # noqa: E731
    kind = spec["kind"]
    if kind in ("text", "causal"):
        kw = {"input_ids": ids(), "attention_mask": torch.ones(batch, seq, dtype=torch.long)}
    elif kind == "seq2seq":
        kw = {"input_ids": ids(), "decoder_input_ids": ids(6)}
    elif kind == "whisper":
        kw = {"input_features": torch.randn(batch, cfg.num_mel_bins, 32, generator=g),
              "decoder_input_ids": ids(6)}
    elif kind == "image":
        kw = {"pixel_values": torch.randn(batch, 3, 32, 32, generator=g)}
    elif kind == "audio":
        kw = {"input_values": torch.randn(batch, 400, generator=g)}
    else:  # clip
        kw = {"input_ids": ids(), "pixel_values": torch.randn(batch, 3, 32, 32, generator=g)}
    if kind == "encdec":
        kw = {"input_ids": ids(), "decoder_input_ids": ids(6)}
    elif kind == "mae":     # the patch shuffle's noise as an input: no RNG draw inside the model
        kw = {"pixel_values": torch.randn(batch, 3, 32, 32, generator=g),
              "noise": torch.rand(batch, (32 // 8) ** 2, generator=g)}
    kw.update(spec.get("call_kw", {}))
    if labels:
        if kind in ("text", "image", "audio"):
            kw["labels"] = torch.randint(0, 3, (batch,), generator=g)
        elif kind == "causal":
            kw["labels"] = kw["input_ids"].clone()
        elif kind in ("seq2seq", "whisper", "encdec"):
            kw["labels"] = torch.randint(3, 99, (batch, 6), generator=g)
        elif kind == "clip":
            kw["return_loss"] = True
    return kw


def _build_hf(spec: dict):
    import torch
    import transformers
    cfg = transformers.AutoConfig.for_model(spec["type"], **spec["cfg"])
    for key, tok in (("pad_token_id", 0), ("bos_token_id", 1), ("eos_token_id", 2),
                     ("decoder_start_token_id", 1)):
        if isinstance(getattr(cfg, key, None), int) and getattr(cfg, key) >= 99 or \
                (key == "pad_token_id" and getattr(cfg, key, 0) is None):
            setattr(cfg, key, tok)          # tiny vocabularies: the default ids of the big models are out of range
    torch.manual_seed(0)
    if spec["kind"] == "encdec":        # a BERT encoder and a BERT decoder with cross-attention
        dec = transformers.AutoConfig.for_model(spec["type"], **spec["cfg"], is_decoder=True,
                                                add_cross_attention=True)
        cfg = transformers.EncoderDecoderConfig.from_encoder_decoder_configs(cfg, dec)
        cfg.decoder_start_token_id, cfg.pad_token_id = 1, 0
        model = transformers.EncoderDecoderModel(config=cfg)
        return model, lambda b, s, labels: ((), _hf_inputs(spec, cfg, b, s, labels), None), True
    cls = getattr(transformers, spec["head"])
    model = cls.from_config(cfg) if hasattr(cls, "from_config") else cls(cfg)      # an Auto class, or a model
    return model, lambda b, s, labels: ((), _hf_inputs(spec, cfg, b, s, labels), None), True


def _build_tv(spec: dict):
    import torch
    import torchvision.models as tvm
    fn = tvm
    for part in spec["fn"].split("."):
        fn = getattr(fn, part)
    torch.manual_seed(0)
    kw = dict(spec["kw"])
    frames = kw.pop("frames", None)     # a video model: (batch, 3, frames, res, res)
    model = fn(weights=None, **kw)
    res = spec["res"]

    def inputs(b, s, labels):
        g = torch.Generator().manual_seed(s)
        x = torch.randn(b, 3, *((frames,) if frames else ()), res, res, generator=g)
        if spec["fn"].startswith("detection."):
            return ([t for t in x],), {}, None
        return (x,), {}, torch.randint(0, 10, (b,), generator=g)
    return model, inputs, spec["train"]


def _build_timm(spec: dict):
    import torch
    import timm
    torch.manual_seed(0)
    model = timm.create_model(spec["fn"], pretrained=False, num_classes=10, **spec["kw"])
    res = spec["res"]

    def inputs(b, s, labels):
        g = torch.Generator().manual_seed(s)
        return (torch.randn(b, 3, res, res, generator=g),), {}, torch.randint(0, 10, (b,), generator=g)
    return model, inputs, spec["train"]


_BUILDERS = {"hf": _build_hf, "tv": _build_tv, "timm": _build_timm}


# ------------------------------------------------------------------------------------------ comparing


def _flat(out) -> list:
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in _flat(v)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in _flat(v)]
    if hasattr(out, "to_tuple"):
        return _flat(out.to_tuple())
    return []


def _to64(x):
    import torch
    if isinstance(x, torch.Tensor):
        return x.double() if x.is_floating_point() else x
    if isinstance(x, dict):
        return {k: _to64(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_to64(v) for v in x)
    return x


def _mismatch(what: str, got, ref32, ref64, family_scale: float = 0.0) -> str | None:
    """None when ``got`` is within ERR_FACTOR of eager float32's error against the float64 reference (without
    one, as for ops with no float64 kernel: within 1e-4 relative of eager float32).

    ``family_scale``: the largest float64 value among the tensor's family (all gradients, all buffers). A tensor
    that is zero in exact arithmetic through cancellation (the bias gradient of a conv followed by BatchNorm,
    the running mean of a BatchNorm fed by another one's zero-mean output) is float32 noise in eager and in ember
    alike; its own scale is ~0, so it may be off by one float32 epsilon of the family's scale."""
    import torch
    if ref64 is None and ref32 is not None:
        ref64 = ref32
        if got is not None and got.is_floating_point() and got.shape == ref32.shape:
            err = (got.double() - ref32.double()).abs().max().item() if got.numel() else 0.0
            scale = ref32.double().abs().max().item() if got.numel() else 0.0
            return None if err <= 1e-4 * scale + 1e-6 else f"{what}: err {err:.3g} vs eager fp32 (no fp64 run)"
    if got is None or ref32 is None:
        return None if got is None and ref32 is None else f"{what}: None vs tensor"
    if got.shape != ref32.shape:
        return f"{what}: shape {tuple(got.shape)} vs eager {tuple(ref32.shape)}"
    if not got.is_floating_point():
        return None if torch.equal(got, ref32) else f"{what}: integer values differ"
    g, e, r = got.double(), ref32.double(), ref64.double()
    if g.isnan().any() != e.isnan().any():
        return f"{what}: NaN pattern differs"
    fin = torch.isfinite(r)
    err_e = (e - r)[fin].abs().max().item() if fin.any() else 0.0
    err_c = (g - r)[fin].abs().max().item() if fin.any() else 0.0
    scale = r[fin].abs().max().item() if fin.any() else 0.0
    if err_c <= ERR_FACTOR * err_e + REL_FLOOR * scale + 1e-7:
        return None
    if scale <= CANCEL_RATIO * family_scale and err_c <= FP32_EPS * family_scale:
        return None     # zero by cancellation: noise on both sides (see the docstring)
    return f"{what}: err {err_c:.3g} vs eager fp32 err {err_e:.3g} (scale {scale:.3g})"


def _family_scale(tensors) -> float:
    return max((t.abs().max().item() for t in tensors
                if t is not None and t.is_floating_point() and t.numel() and t.isfinite().all()), default=0.0)


def _compare_outputs(what, got, ref32, ref64) -> list[str]:
    a, b = _flat(got), _flat(ref32)
    c = _flat(ref64) if ref64 is not None else [None] * len(b)
    if len(a) != len(b):
        return [f"{what}: {len(a)} output tensors vs eager {len(b)}"]
    return [m for i, (x, y, z) in enumerate(zip(a, b, c)) if (m := _mismatch(f"{what}[{i}]", x, y, z))]


def _loss(out, target) -> "object":
    import torch
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if loss is not None:
        return loss
    logits = out if isinstance(out, torch.Tensor) else _flat(out)[0]
    return torch.nn.functional.cross_entropy(logits, target)


# ----------------------------------------------------------------------------------------- child steps


def _run64(m64, args, kw):
    """The float64 reference's output, or None where the model has an op without a float64 kernel."""
    try:
        return m64(*_to64(args), **_to64(kw))
    except RuntimeError:
        return None


def _stats_delta(before: dict) -> dict:
    import ember
    now = ember.stats()
    return {k: now.get(k, 0) - before.get(k, 0) for k in ("graphs_compiled", "graph_breaks", "recompiles",
                                                             "fallbacks_to_eager", "frames_compiled", "graph_cache_hits",
                                                             "cache_hits", "eager_autograd_graphs")}


def _eval_phase(model, m64, compiled, inputs, res: dict) -> None:
    import torch
    for call, batch in enumerate((2, 3)):
        args, kw, _ = inputs(batch, 100 + call, False)
        with torch.no_grad():
            ref32 = model(*args, **kw)
            ref64 = _run64(m64, args, kw)
            got = compiled(*args, **kw)
        res["problems"] += _compare_outputs(f"eval call {call + 1}", got, ref32, ref64)


def _timing(model, compiled, inputs, res: dict, reps: int = 5) -> None:
    import torch
    args, kw, _ = inputs(3, 7, False)

    def med(f):
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            with torch.no_grad():
                f(*args, **kw)
            ts.append(time.perf_counter() - t0)
        return sorted(ts)[reps // 2] * 1000
    res["eager_ms"], res["ember_ms"] = round(med(model), 2), round(med(compiled), 2)


def _train_phase(model, m64, cmodel, compiled, inputs, res: dict) -> None:
    args, kw, target = inputs(2, 200, True)
    for m in (model, m64, cmodel):
        m.train()
    l32 = _loss(model(*args, **kw), target)
    out64 = _run64(m64, args, kw)
    l64 = _loss(out64, target) if out64 is not None else None
    lc = _loss(compiled(*args, **kw), target)
    for loss in (l32, l64, lc):
        if loss is not None:
            loss.backward()
    res["problems"] += [m for m in [_mismatch("loss", lc.detach(), l32.detach(),
                                              None if l64 is None else l64.detach())] if m]
    p32, p64 = dict(model.named_parameters()), dict(m64.named_parameters())
    fam = _family_scale([p.grad for p in p64.values()]) if l64 is not None else 0.0
    for name, p in cmodel.named_parameters():
        if (m := _mismatch(f"grad {name}", p.grad, p32[name].grad, None if l64 is None else p64[name].grad, fam)):
            res["problems"].append(m)
    b32, b64 = dict(model.named_buffers()), dict(m64.named_buffers())
    fam = _family_scale(list(b64.values())) if l64 is not None else 0.0
    for name, b in cmodel.named_buffers():
        if name in b32 and (m := _mismatch(f"buffer {name}", b, b32[name], None if l64 is None else b64[name],
                                           fam)):
            res["problems"].append(m)


def _recheck_float64(pristine64, m64, inputs, res: dict, first: int) -> None:
    """Rerun a float32 training step that mismatched through ember in float64, with the same calls before it
    (eval at batches 2 and 3, then the step: the same recompiles and symbolic sizes), against eager float64.

    A ReLU (or max, or threshold) whose exact input lies within float32 rounding noise of its kink takes the other
    branch in any float32 computation that rounds differently from eager, and every gradient upstream then
    differs from float64 by that point's whole gradient: timm dla34 at seed 200 has a BatchNorm output of -4.4e-7
    (float64), -3.9e-7 (eager) and +6.3e-7 (ember, whose forward errors there are 1.6x eager's). Such near ties
    are common at batch 2 (one in two seeds for dla34) and vanish in float64, where a fault of the compiler stays.
    So a step that is right in float64 is right: the float32 mismatches move to ``res["near_tie"]``. (A fault
    only in float32 kernels of the backward would hide here; the eval outputs are compared without this.)"""
    import torch
    import ember
    c64 = copy.deepcopy(pristine64)
    compiled = ember.compile(c64)
    wide = lambda b, s, labels: tuple(_to64(v) for v in inputs(b, s, labels))  # noqa: E731
    with torch.no_grad():
        for call, batch in enumerate((2, 3)):
            args, kw, _ = wide(batch, 100 + call, False)
            compiled(*args, **kw)
    args, kw, target = wide(2, 200, True)
    c64.train()
    _loss(compiled(*args, **kw), target).backward()
    ref = dict(m64.named_parameters())
    wrong = [m for name, p in c64.named_parameters()
             if (m := _mismatch(f"float64 grad {name}", p.grad, ref[name].grad, ref[name].grad))]
    if not wrong:
        res["near_tie"] = res["problems"][first:]
        del res["problems"][first:]
    else:
        res["problems"] += wrong


def _break_reasons(model, inputs, train: bool) -> list[str]:
    import torch
    import ember
    args, kw, _ = inputs(2, 100, train)
    model.train(train)
    with torch.set_grad_enabled(train):
        ex = ember.explain(copy.deepcopy(model))(*args, **kw)
    return [("train: " if train else "") + str(r) for r in ex.break_reasons]


def run_one(name: str) -> dict:
    import torch
    import ember
    torch.set_num_threads(1)
    spec = MODELS[name]
    res: dict = {"name": name, "problems": [], "phase": "build"}
    model, inputs, train = _BUILDERS[spec["src"]](spec)
    _zero_dropout(model)
    model.eval()
    m64 = copy.deepcopy(model).double()
    pristine64 = copy.deepcopy(m64)
    cmodel = copy.deepcopy(model)
    compiled = ember.compile(cmodel)
    before = ember.stats()
    res["phase"] = "eval"
    _eval_phase(model, m64, compiled, inputs, res)
    res["eval"] = _stats_delta(before)
    res["phase"] = "timing"
    _timing(model, compiled, inputs, res)
    if train:
        res["phase"] = "train"
        before = ember.stats()
        n_eval = len(res["problems"])
        _train_phase(model, m64, cmodel, compiled, inputs, res)
        res["train"] = _stats_delta(before)
        if len(res["problems"]) > n_eval:
            res["phase"] = "train float64"
            try:
                _recheck_float64(pristine64, m64, inputs, res, n_eval)
            except Exception as e:  # noqa: BLE001 - no float64 run: the float32 mismatches stand
                res["problems"].append(f"float64 recheck failed: {type(e).__name__}: {str(e)[:100]}")
    res["phase"] = "explain"
    res["breaks"] = _break_reasons(model, inputs, False) if res["eval"]["graph_breaks"] else []
    if res.get("train", {}).get("graph_breaks"):
        res["breaks"] += _break_reasons(model, inputs, True)
    if os.environ.get("EMBER_SWEEP_DYNAMO"):
        res["phase"] = "dynamo"
        try:
            res["dynamo"] = _dynamo_counts(model, inputs, train)
        except Exception as e:  # noqa: BLE001 - torch.compile's own failure is no result of ember's
            res["dynamo"] = {"error": f"{type(e).__name__}: {str(e)[:80]}"}
    res["phase"] = "done"
    return res


def _dynamo_counts(model, inputs, train: bool) -> dict:
    """torch.compile's capture of the same calls (``torch._dynamo.explain``), for comparison: graphs, breaks."""
    import torch
    out = {}
    for mode in (("eval", "train") if train else ("eval",)):
        torch._dynamo.reset()
        args, kw, _ = inputs(2, 100, mode == "train")
        model.train(mode == "train")
        with torch.set_grad_enabled(mode == "train"):
            ex = torch._dynamo.explain(copy.deepcopy(model))(*args, **kw)
        out[mode] = [ex.graph_count, ex.graph_break_count]
    return out


# --------------------------------------------------------------------------------------------- parent


def _child(name: str) -> None:
    sys.path.insert(0, ROOT)
    try:
        res = run_one(name)
    except ImportError as e:
        res = {"name": name, "skip": str(e)}
    except BaseException as e:  # noqa: BLE001 - a crash is a result of the sweep
        tb = traceback.extract_tb(e.__traceback__)
        if not any("/ember/" in f.filename or "<ember" in f.filename for f in tb):
            what = "model not built" if any(f.name.startswith("_build_") for f in tb) else "eager fails"
            print("RESULT " + json.dumps({"name": name, "skip": f"{what}: {type(e).__name__}: "
                                          f"{str(e)[:200]}"}), flush=True)
            return
        where = next((f"{os.path.basename(f.filename)}:{f.lineno}" for f in reversed(tb)
                      if "/ember/" in f.filename), "?")
        res = {"name": name, "crash": f"{type(e).__name__}: {str(e)[:300]} [{where}]"}
        traceback.print_exc()
    print("RESULT " + json.dumps(res), flush=True)


def _status(res: dict) -> tuple[str, str]:
    if "skip" in res:
        return "skip", res["skip"]
    if "crash" in res:
        return "crash", res["crash"]
    if res.get("phase") != "done" and "crash" not in res:
        return "crash", f"stopped in {res.get('phase')}"
    if res["problems"]:
        return "wrong", f"{len(res['problems'])} mismatches; first: {res['problems'][0]}"
    if res.get("breaks") or res["eval"]["graph_breaks"] or res.get("train", {}).get("graph_breaks"):
        return "breaks", (res.get("breaks") or ["?"])[0]
    if not res["eval"]["graphs_compiled"] and not res["eval"].get("graph_cache_hits"):
        return "nograph", "no graph compiled: ember ran it eagerly"
    slow = [f"{ph}: {st[k]} {k}" for ph in ("eval", "train") if (st := res.get(ph))
            for k in ("eager_autograd_graphs", "fallbacks_to_eager") if st.get(k)]
    if slow:        # right, but a graph skipped the kernel compiler (EMBER_LOGS=perf_hints says why)
        return "fallback", "; ".join(slow)
    if res.get("near_tie"):     # float32 mismatches of a step right in float64 (see _recheck_float64)
        return "ok", f"float32 near tie, right in float64: {len(res['near_tie'])} mismatches, {res['near_tie'][0]}"
    return "ok", ""


def _row(name: str, res: dict) -> str:
    status, why = _status(res)
    ev, tr = res.get("eval", {}), res.get("train", {})
    graphs = lambda st: str(st["graphs_compiled"] + st.get("graph_cache_hits", 0)) if st else ""  # noqa: E731
    cells = [name, status, graphs(ev), str(ev.get("graph_breaks", "")),
             str(ev.get("recompiles", "")), graphs(tr), str(tr.get("graph_breaks", "")),
             str(res.get("eager_ms", "")), str(res.get("ember_ms", "")), why.replace("|", "/")[:160]]
    if "dynamo" in res:     # --dynamo: torch.compile's graphs/breaks, eval and train
        cells.insert(-1, res["dynamo"]["error"][:40] if "error" in res["dynamo"] else
                     " ".join(f"{k} {g}/{b}" for k, (g, b) in res["dynamo"].items()))
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="model names or prefixes (default: all)")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="also write the raw results to this file")
    ap.add_argument("--dynamo", action="store_true", help="also count torch.compile's graphs and breaks")
    a = ap.parse_args()
    if a.dynamo:
        os.environ["EMBER_SWEEP_DYNAMO"] = "1"
    if a.one:
        return _child(a.one)
    names = [n for n in MODELS if not a.names or any(n.startswith(p) for p in a.names)]
    print("| model | status | eval graphs | eval breaks | recompiles | train graphs | train breaks | eager ms "
          "| ember ms |" + (" torch.compile graphs/breaks |" if a.dynamo else "") + " reason |\n|"
          + "---|" * (10 + a.dynamo), flush=True)
    results = []
    for name in names:
        t0 = time.time()
        try:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", name], cwd=ROOT,
                               capture_output=True, text=True, timeout=a.timeout)
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            res = json.loads(line[-1][7:]) if line else {"name": name, "crash": f"rc {p.returncode}: "
                                                         + p.stderr.strip()[-300:]}
        except subprocess.TimeoutExpired:
            res = {"name": name, "crash": f"timeout after {a.timeout:.0f}s"}
        res["seconds"] = round(time.time() - t0, 1)
        results.append(res)
        print(_row(name, res), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
