#!/usr/bin/env python3
"""Makes the tiny random-initialised models the tests use, with the pinned mlx-lm itself, saved
the way mlx_lm.convert saves them (config.json + model*.safetensors, quantized with
mlx_lm.utils.quantize_model). Nothing here is committed: the test run generates it.

Usage: make_fixtures.py --out DIR [--only NAME ...] [--list]
Each fixture is a directory DIR/NAME; a fixture whose directory already holds the same
recipe (fixture.json) is kept.
"""
import argparse
import copy
import json
import shutil
import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_map, tree_map_with_path
from mlx_lm import utils as lm_utils

BASE = {
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-6,
    "vocab_size": 512,
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "eos_token_id": 2,
    "bos_token_id": 1,
}

QWEN3 = {**BASE, "model_type": "qwen3", "head_dim": 32, "tie_word_embeddings": True}
QWEN2 = {**BASE, "model_type": "qwen2", "tie_word_embeddings": True}
LLAMA = {**BASE, "model_type": "llama", "tie_word_embeddings": False}
# no tie_word_embeddings: phi3.py's default is an untied head
PHI3 = {**BASE, "model_type": "phi3"}
# layers 0 and 2 slide over 6 positions (RotatingKVCache), 1 and 3 are global; query_pre_attn_scalar
# differs from head_dim and the global layers' RoPE is linearly scaled, as in the larger Gemma 3s
GEMMA3 = {**BASE, "model_type": "gemma3_text", "num_hidden_layers": 4, "head_dim": 32, "query_pre_attn_scalar": 48,
          "sliding_window": 6, "sliding_window_pattern": 2, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
          "rope_scaling": {"rope_type": "linear", "factor": 8.0}}

# mistral3 / ministral3 / smollm3 (dense families on the decoder skeleton)
_TEXT = {k: v for k, v in BASE.items() if k not in ("eos_token_id", "bos_token_id")}
MISTRAL3 = {"model_type": "mistral3", "vocab_size": 512, "eos_token_id": 2, "bos_token_id": 1,
            "text_config": {**_TEXT, "model_type": "mistral", "head_dim": 48}}
# three layers, the middle one sliding over 6 positions; yarn RoPE from rope_parameters
MINISTRAL3_TEXT = {**_TEXT, "model_type": "ministral3", "num_hidden_layers": 3, "sliding_window": 6,
                   "layer_types": ["full_attention", "sliding_attention", "full_attention"],
                   "rope_parameters": {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4,
                                       "llama_4_scaling_beta": 0.1, "rope_theta": 1000000.0, "beta_fast": 32.0,
                                       "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}}
SMOLLM3 = {**BASE, "model_type": "smollm3", "num_hidden_layers": 4, "tie_word_embeddings": True}

OLMO2 = {**BASE, "model_type": "olmo2", "tie_word_embeddings": False}
# phixtral: its own config names; RoPE over 16 of each head's 32 dimensions
PHIXTRAL = {"model_type": "phixtral", "num_vocab": 512, "model_dim": 128, "num_heads": 4, "num_layers": 2,
            "rotary_dim": 16, "num_local_experts": 8, "num_experts_per_tok": 6, "eos_token_id": 2, "bos_token_id": 1}

OLMO3 = {**BASE, "model_type": "olmo3", "num_hidden_layers": 4, "sliding_window": 6}

GRANITE = {**BASE, "model_type": "granite", "logits_scaling": 8.0, "attention_multiplier": 0.015625,
           "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_bias": False, "mlp_bias": False}

MINICPM = {**BASE, "model_type": "minicpm", "dim_model_base": 32, "scale_depth": 1.4, "scale_emb": 12.0}

EXAONE4 = {**BASE, "model_type": "exaone4", "num_hidden_layers": 4, "head_dim": 32, "tie_word_embeddings": False,
           "rope_scaling": None, "sliding_window": 6, "sliding_window_pattern": "LLLG"}

GLM4 = {**BASE, "model_type": "glm4", "attention_bias": True, "head_dim": 32, "partial_rotary_factor": 0.5}

ERNIE45 = {**BASE, "model_type": "ernie4_5", "head_dim": None, "use_bias": False, "tie_word_embeddings": True}

SEED_OSS = {**BASE, "model_type": "seed_oss", "head_dim": 32, "attention_bias": True, "tie_word_embeddings": False}

HUNYUAN = {**BASE, "model_type": "hunyuan_v1_dense", "use_qk_norm": True, "tie_word_embeddings": True,
           "rope_scaling": {"alpha": 1000.0, "factor": 1.0, "type": "dynamic"}}

INTERNLM3 = {**BASE, "model_type": "internlm3", "qkv_bias": True}

STARCODER2 = {**BASE, "model_type": "starcoder2", "norm_epsilon": 1e-5, "tie_word_embeddings": True}

STABLELM = {**BASE, "model_type": "stablelm", "use_qkv_bias": True, "partial_rotary_factor": 0.25,
            "layer_norm_eps": 1e-5}

PHI = {"model_type": "phi", "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
       "num_hidden_layers": 2, "intermediate_size": 256, "vocab_size": 512, "max_position_embeddings": 4096,
       "partial_rotary_factor": 0.4, "layer_norm_eps": 1e-5, "eos_token_id": 2, "bos_token_id": 1}

HELIUM = {**BASE, "model_type": "helium", "attention_bias": False, "head_dim": 32, "mlp_bias": False,
          "tie_word_embeddings": False}

COHERE2 = {"model_type": "cohere2", "hidden_size": 128, "head_dim": 32, "num_hidden_layers": 4,
           "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "rope_theta": 10000.0,
           "vocab_size": 512, "layer_norm_eps": 1e-5, "logit_scale": 0.0625, "sliding_window": 6,
           "sliding_window_pattern": 4, "eos_token_id": 2, "bos_token_id": 1}


# Qwen3.5's text model: 4 layers with full attention every 2nd (layers 1 and 3), gated delta nets on
# layers 0 and 2 (2 key heads, 4 value heads, conv kernel 4). rope_parameters overrides the top-level
# rope_theta, as TextModelArgs.__post_init__ does, and rotates a quarter of each head.
QWEN3_5_TEXT = {**BASE, "model_type": "qwen3_5_text", "num_hidden_layers": 4, "head_dim": 32,
                "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 32,
                "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "full_attention_interval": 2,
                "tie_word_embeddings": False,
                "rope_parameters": {"rope_type": "default", "mrope_section": [2, 1, 1], "mrope_interleaved": True,
                                    "rope_theta": 10000000, "partial_rotary_factor": 0.25}}
# Qwen3-Next: every ModelArgs field up to head_dim is required; num_experts 0 is the dense variant.
QWEN3_NEXT = {**BASE, "model_type": "qwen3_next", "num_hidden_layers": 4, "head_dim": 32,
              "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 32,
              "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "full_attention_interval": 2,
              "partial_rotary_factor": 0.25, "num_experts": 0, "num_experts_per_tok": 0, "decoder_sparse_step": 1,
              "shared_expert_intermediate_size": 0, "mlp_only_layers": [], "moe_intermediate_size": 0}
# Gemma 4: six layers, pattern 3 (two sliding, one global), the last two KV-shared; defaults for the rest
# (proportional RoPE on the global layers, final softcap 30, double-wide MLPs on the shared layers)
GEMMA4 = {**{k: v for k, v in BASE.items() if k != "rope_theta"}, "model_type": "gemma4_text",
          "num_hidden_layers": 6, "head_dim": 32, "global_head_dim": 64, "sliding_window": 6,
          "sliding_window_pattern": 3, "num_kv_shared_layers": 2, "hidden_size_per_layer_input": 64,
          "vocab_size_per_layer_input": 512}

# Gemma 2 / Gemma: head_dim 32 with query_pre_attn_scalar 48 (Gemma 2's scale is not head_dim's)
GEMMA2 = {**BASE, "model_type": "gemma2", "head_dim": 32, "query_pre_attn_scalar": 48,
          "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}
GEMMA = {**BASE, "model_type": "gemma", "head_dim": 32}


def fx(config, dtype="bfloat16", quant=None, shards=False, seed=0, **extra):
    """`extra` (only when given, so other recipes keep their stamps): drop_lm_head (save the model
    as mlx_lm.convert saves a checkpoint without one, through the model's sanitize),
    extra_tensors ({name: shape}, saved beside the model, e.g. a vision tower sanitize drops) and
    randomize (parameter names, the last part of the key, to randomise around one) and mtp (a
    multi-token-prediction head, tools/mtp_reference.py's add_head)."""
    return {"config": config, "dtype": dtype, "quant": quant, "shards": shards, "seed": seed, **extra}


def mixed_predicate(path, module):
    """A per-layer recipe like mlx_lm's mixed presets: 8-bit g32 for the down projections of
    layer 0, unquantized v_proj in layer 1, the global setting elsewhere."""
    if path.endswith("layers.0.mlp.down_proj"):
        return {"group_size": 32, "bits": 8}
    if path.endswith("layers.1.self_attn.v_proj"):
        return False
    return True


FIXTURES = {
    # dtypes, tied and untied heads
    "qwen3_bf16": fx(QWEN3),
    "qwen3_fp16_untied": fx({**QWEN3, "tie_word_embeddings": False}, dtype="float16", seed=1),
    "qwen3_fp32": fx(QWEN3, dtype="float32", seed=2),
    # affine quantization: bits and group sizes
    "qwen3_q4_g64": fx(QWEN3, quant={"bits": 4, "group_size": 64}, seed=3),
    "qwen3_q8_g32": fx(QWEN3, quant={"bits": 8, "group_size": 32}, seed=4),
    "qwen3_q2_g64": fx(QWEN3, quant={"bits": 2, "group_size": 64}, seed=5),
    "qwen3_q3_g32": fx(QWEN3, quant={"bits": 3, "group_size": 32}, seed=6),
    "qwen3_q5_g64": fx({**QWEN3, "tie_word_embeddings": False}, quant={"bits": 5, "group_size": 64}, seed=7),
    "qwen3_q6_g128": fx(QWEN3, quant={"bits": 6, "group_size": 128}, seed=8),
    "qwen3_mixed": fx(QWEN3, quant={"bits": 4, "group_size": 64, "predicate": "mixed"}, seed=9),
    "qwen3_mxfp4": fx(QWEN3, quant={"mode": "mxfp4"}, seed=10),
    "qwen3_mxfp8": fx(QWEN3, quant={"mode": "mxfp8"}, seed=11),
    "qwen3_nvfp4": fx(QWEN3, quant={"mode": "nvfp4"}, seed=12),
    # head_dim / GQA variants, rope scaling
    "qwen3_mha_hd64": fx({**QWEN3, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 64}, seed=13),
    # real models' head size: MLX's CUDA backend quantizes the KV cache only from head_dim 128 up
    "qwen3_hd128": fx({**QWEN3, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 128}, seed=34),
    "qwen3_yarn": fx({**QWEN3, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                "original_max_position_embeddings": 1024}}, seed=14),
    # qwen2: biases on q/k/v; tied and untied heads, Qwen2.5's yarn
    "qwen2_bf16": fx(QWEN2, seed=50),
    "qwen2_q4_g64": fx({**QWEN2, "tie_word_embeddings": False}, quant={"bits": 4, "group_size": 64}, seed=51),
    "qwen2_fp16_yarn": fx({**QWEN2, "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                     "original_max_position_embeddings": 1024}},
                          dtype="float16", seed=52),
    # qwen2.py's defaults (rope_theta 1e6, 32768 positions, tied head) with linear rope scaling; its
    # head_dim is hidden_size / num_attention_heads whatever the config's head_dim says
    "qwen2_defaults_linear": fx({**{k: v for k, v in QWEN2.items() if k not in (
        "rope_theta", "max_position_embeddings", "tie_word_embeddings")},
        "head_dim": 64, "rope_scaling": {"type": "linear", "factor": 2.0}}, seed=53),
    # a multimodal Qwen2's RoPE config: text positions rotate as the default RoPE
    "qwen2_mrope": fx({**QWEN2, "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]}}, seed=54),
    # phi3: fused qkv_proj and gate_up_proj. SuScaledRoPE always rotates with the long factors, scaled
    # by sqrt(1 + log(max / original) / log(original)) from the top-level position counts
    "phi3_bf16": fx(PHI3, seed=60),
    "phi3_q4_g64": fx({**PHI3, "tie_word_embeddings": True}, quant={"bits": 4, "group_size": 64}, seed=61),
    "phi3_longrope": fx({**PHI3, "max_position_embeddings": 8192, "original_max_position_embeddings": 32,
                         "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 16,
                                          "long_factor": [1.0 + i / 8 for i in range(16)]}}, seed=62),
    # Phi-4-mini's shape: a quarter of each head unrotated, "su" scaling, tied head
    "phi3_partial_su_fp16": fx({**PHI3, "partial_rotary_factor": 0.75, "tie_word_embeddings": True,
                                "max_position_embeddings": 8192, "original_max_position_embeddings": 1024,
                                "rope_scaling": {"type": "su", "short_factor": [1.0] * 12,
                                                 "long_factor": [1.0 + i / 4 for i in range(12)]}},
                               dtype="float16", seed=63),
    # linear scaling on half of each head (nn.RoPE with scale 1 / factor), traditional rotation
    "phi3_linear_partial": fx({**PHI3, "partial_rotary_factor": 0.5, "rope_traditional": True,
                               "rope_scaling": {"type": "linear", "factor": 2.0, "long_factor": [1.0] * 8}},
                              seed=64),
    "llama_bf16": fx(LLAMA, seed=20),
    "llama_tied_fp16": fx({**LLAMA, "tie_word_embeddings": True}, dtype="float16", seed=21),
    "llama_gqa4_hd48": fx({**LLAMA, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 48}, seed=22),
    "llama_bias": fx({**LLAMA, "attention_bias": True, "mlp_bias": True}, seed=23),
    "llama_rope_llama3": fx({**LLAMA, "rope_theta": 500000.0, "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}}, seed=24),
    "llama_rope_linear": fx({**LLAMA, "rope_scaling": {"type": "linear", "factor": 2.0}}, seed=25),
    "llama_rope_dynamic": fx({**LLAMA, "max_position_embeddings": 16,
                              "rope_scaling": {"type": "dynamic", "factor": 2.0}}, seed=26),
    "llama_rope_yarn_mscale": fx({**LLAMA, "rope_scaling": {
        "rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 512,
        "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.0}}, seed=27),
    "llama_rope_longrope": fx({**LLAMA, "max_position_embeddings": 8192, "rope_scaling": {
        "type": "longrope", "original_max_position_embeddings": 1024,
        "short_factor": [1.0] * 16, "long_factor": [1.0 + i / 8 for i in range(16)]}}, seed=28),
    "llama_traditional": fx({**LLAMA, "rope_traditional": True}, seed=29),
    "llama_q4_g64": fx(LLAMA, quant={"bits": 4, "group_size": 64}, seed=30),
    # hidden 256 so that every matrix has 256 inputs: MLX 0.32.4's CUDA 8-bit g128 matmul of several
    # rows is wrong when a row holds a single group (bench/gpu/qmm_probe.py shows it)
    "llama_q8_g128_sharded": fx({**LLAMA, "hidden_size": 256}, quant={"bits": 8, "group_size": 128},
                                shards=True, seed=31),
    "mistral_bf16": fx({**LLAMA, "model_type": "mistral"}, seed=32),
    # sliding-window layers (RotatingKVCache per sliding layer), GQA, window shorter than the tests' prompts
    "llama_swa": fx({**LLAMA, "num_hidden_layers": 3, "sliding_window": 6,
                     "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}, seed=33),
    # Gemma 3 checkpoints have no lm_head (the head is tied through sanitize)
    "gemma3_bf16": fx(GEMMA3, seed=40, drop_lm_head=True),
    "gemma3_q4_g64": fx(GEMMA3, quant={"bits": 4, "group_size": 64}, seed=41, drop_lm_head=True),
    # float16: the residual sums are clipped in float32; a saved lm_head unties the head;
    # pattern 3 over 3 layers (two sliding, one global)
    "gemma3_fp16_untied": fx({**GEMMA3, "num_hidden_layers": 3, "sliding_window_pattern": 3, "rope_scaling": None},
                             dtype="float16", seed=42),
    # the multimodal config: the text model under text_config and language_model., a vision tower
    # that sanitize drops
    "gemma3_multimodal": fx({"model_type": "gemma3", "vocab_size": 512, "eos_token_id": 2, "bos_token_id": 1,
                             "text_config": {k: v for k, v in GEMMA3.items() if k not in ("eos_token_id", "bos_token_id")}},
                            seed=43, drop_lm_head=True,
                            extra_tensors={"vision_tower.vision_model.embeddings.patch_embedding.weight": [16, 3, 4, 4],
                                           "multi_modal_projector.mm_input_projection_weight": [16, 128]}),
    # qwen3_5 (hybrid gated delta net): the multimodal layout (text_config, a vision tower and a
    # multi-token-prediction head that sanitize drops), a text-only 4-bit config, Qwen3.5's head size
    # and GQA ratio (head_dim 256, 4 query heads per KV head, key heads of 128), float16
    "qwen3_5_bf16": fx({"model_type": "qwen3_5", "text_config": QWEN3_5_TEXT, "vision_config": {"depth": 1}},
                       seed=70, cast_predicate=True,
                       extra_tensors={"vision_tower.blocks.0.attn.qkv.weight": [48, 16],
                                      "model.visual.patch_embed.proj.weight": [16, 3, 2, 2],
                                      "mtp.fc.weight": [128, 256]}),
    "qwen3_5_q4_g64": fx({**QWEN3_5_TEXT, "model_type": "qwen3_5"}, quant={"bits": 4, "group_size": 64}, seed=71,
                         cast_predicate=True),
    "qwen3_5_hd256_gqa": fx({"model_type": "qwen3_5", "text_config": {
        **QWEN3_5_TEXT, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
        "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 128,
        "linear_value_head_dim": 64, "full_attention_interval": 4, "tie_word_embeddings": True}},
        seed=72, cast_predicate=True),
    "qwen3_5_fp16": fx({"model_type": "qwen3_5", "text_config": QWEN3_5_TEXT}, dtype="float16", seed=73,
                       cast_predicate=True),
    # qwen3_next without experts: fused, head-interleaved qkvz and ba projections
    "qwen3_next_dense_bf16": fx(QWEN3_NEXT, seed=74, cast_predicate=True),
    # the same model with a multi-token-prediction head (tools/mtp_reference.py), bound with --mtp
    "qwen3_next_dense_mtp_bf16": fx(QWEN3_NEXT, seed=74, cast_predicate=True, mtp={"seed": 3, "mode": "random"}),
    # with experts: 4 experts, 2 per token, a sigmoid-gated shared expert; layer 3 dense (mlp_only_layers);
    # 4-bit with qwen3_next's quant_predicate (router and shared-expert gate at 8 bits g64)
    "qwen3_next_bf16": fx({**QWEN3_NEXT, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                           "shared_expert_intermediate_size": 96, "mlp_only_layers": [3], "norm_topk_prob": True},
                          seed=75, cast_predicate=True),
    # MLX's CPU gather_mm runs float32 only: the bf16 model above runs on a GPU, this twin everywhere
    "qwen3_next_fp32": fx({**QWEN3_NEXT, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                           "shared_expert_intermediate_size": 96, "mlp_only_layers": [3], "norm_topk_prob": True},
                          dtype="float32", seed=78),
    # the same model with a multi-token-prediction head, its layer sparse as layer 0 is
    "qwen3_next_mtp_fp32": fx({**QWEN3_NEXT, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                               "shared_expert_intermediate_size": 96, "mlp_only_layers": [3], "norm_topk_prob": True},
                              dtype="float32", seed=78, mtp={"seed": 4, "mode": "random"}),
    # (every quantized Linear has at least two groups per row: MLX 0.32.4's CUDA quantized matmul reads
    # garbage when a row is one group, bench/RESULTS.md)
    "qwen3_next_q4_g64": fx({**QWEN3_NEXT, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                             "shared_expert_intermediate_size": 128, "decoder_sparse_step": 2, "mlp_only_layers": []},
                            quant={"bits": 4, "group_size": 64}, seed=76, cast_predicate=True),
    # qwen3_5_moe: experts on every layer
    "qwen3_5_moe_q4_g64": fx({"model_type": "qwen3_5_moe", "text_config": {
        **QWEN3_5_TEXT, "model_type": "qwen3_5_moe_text", "num_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 64, "shared_expert_intermediate_size": 128}},
        quant={"bits": 4, "group_size": 64}, seed=77, cast_predicate=True),
    # float32 (MLX's CPU gather_mm), with a multi-token-prediction head whose layer has experts too
    "qwen3_5_moe_mtp_fp32": fx({"model_type": "qwen3_5_moe", "text_config": {
        **QWEN3_5_TEXT, "model_type": "qwen3_5_moe_text", "num_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 64, "shared_expert_intermediate_size": 128}},
        dtype="float32", seed=86, mtp={"seed": 5, "mode": "random"}),
    # tensor parallel over two ranks: every expert's hidden units (and the shared expert's) split into
    # whole quantization groups (64 of 128 per rank)
    "qwen3_5_moe_q4_g64_tp2": fx({"model_type": "qwen3_5_moe", "text_config": {
        **QWEN3_5_TEXT, "model_type": "qwen3_5_moe_text", "num_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128}},
        quant={"bits": 4, "group_size": 64}, seed=79, cast_predicate=True),
    # with a multi-token-prediction head (mtp.*, tools/mtp_reference.py): random (it seldom agrees
    # with the main model), and a "bigram" head that predicts from the token alone, beside a main
    # model whose layers add little to the residual stream (it agrees often, not always)
    "qwen3_5_mtp_bf16": fx({"model_type": "qwen3_5", "text_config": QWEN3_5_TEXT}, seed=83, cast_predicate=True,
                           mtp={"seed": 1, "mode": "random"}),
    "qwen3_5_mtp_bigram_bf16": fx({"model_type": "qwen3_5", "text_config": QWEN3_5_TEXT}, seed=84,
                                  cast_predicate=True, mtp={"seed": 2, "mode": "bigram", "layer_scale": 0.25}),
    # one key head in the gated delta nets: two ranks cannot split them
    "qwen3_5_one_key_head": fx({**QWEN3_5_TEXT, "model_type": "qwen3_5", "linear_num_key_heads": 1}, seed=82,
                               cast_predicate=True),
    # mistral3 / ministral3: the text model of text_config under language_model. (llama.py's for a
    # "mistral" text model, ministral3.py's otherwise); ministral3 scales the rotated queries by
    # 1 + beta * log(1 + floor(pos / original_max_position_embeddings)), here over 4 positions
    "mistral3_bf16": fx(MISTRAL3, seed=70),
    "mistral3_q4_g64": fx(MISTRAL3, quant={"bits": 4, "group_size": 64}, seed=71),
    "ministral3_bf16": fx({**MISTRAL3, "text_config": MINISTRAL3_TEXT}, seed=72),
    "ministral3_q4_g64": fx({**MINISTRAL3_TEXT, "tie_word_embeddings": True, "eos_token_id": 2, "bos_token_id": 1},
                            quant={"bits": 4, "group_size": 64}, seed=73),
    # smollm3: NoPE layers (by default every 4th: layer 3 here; explicitly 1 and 3 in the 4-bit one)
    "smollm3_bf16": fx(SMOLLM3, seed=80),
    "smollm3_q4_g64": fx({**SMOLLM3, "no_rope_layers": [1, 0, 1, 0], "tie_word_embeddings": False},
                         quant={"bits": 4, "group_size": 64}, seed=81),
    # gemma4: layers 0 1 3 slide over 6 positions, 2 and 5 are global with their own head size (64) and
    # proportional RoPE on a quarter of it; layers 4 and 5 are KV-shared (they attend over layer 3's and
    # layer 2's keys and values) with double-wide MLPs; per-layer input embeddings of 64 per layer
    "gemma4_bf16": fx(GEMMA4, seed=70, randomize=["layer_scalar"]),
    # per-layer inputs of 128: a quantized projection from 64 features is one group per row
    "gemma4_q4_g64": fx({**GEMMA4, "hidden_size_per_layer_input": 128}, quant={"bits": 4, "group_size": 64}, seed=71,
                        randomize=["layer_scalar"]),
    # the 26B/31B shape: keys are values on the global layers, one global KV head, no KV sharing and no
    # per-layer inputs; an untied head, no final softcap, proportional RoPE on half the head with a factor
    "gemma4_fp16_keqv": fx({**GEMMA4, "attention_k_eq_v": True, "num_global_key_value_heads": 1,
                            "num_kv_shared_layers": 0, "hidden_size_per_layer_input": 0,
                            "tie_word_embeddings": False, "final_logit_softcapping": None,
                            "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                                            "sliding_attention", "full_attention"], "num_hidden_layers": 5,
                            "rope_parameters": {
                                "full_attention": {"partial_rotary_factor": 0.5, "rope_theta": 1000000.0,
                                                   "rope_type": "proportional", "factor": 2.0},
                                "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}},
                           dtype="float16", seed=72, randomize=["layer_scalar"]),
    # the multimodal config: the text model under text_config and language_model., vision and audio
    # towers that sanitize drops (with and without the "model." prefix)
    "gemma4_multimodal": fx({"model_type": "gemma4", "vocab_size": 512, "eos_token_id": 2, "bos_token_id": 1,
                             "text_config": {k: v for k, v in GEMMA4.items() if k not in ("eos_token_id", "bos_token_id")}},
                            seed=73, randomize=["layer_scalar"],
                            extra_tensors={"vision_tower.encoder.patch_embedding.weight": [16, 3, 4, 4],
                                           "model.audio_tower.conv.weight": [16, 8],
                                           "model.embed_vision.embedding_projection.weight": [128, 16]}),
    # olmo2: q/k RMSNorms over the whole projections, post-norms on the sublayers' outputs
    "olmo2_bf16": fx(OLMO2, seed=90),
    "olmo2_q4_g64": fx({**OLMO2, "attention_bias": True, "tie_word_embeddings": True},
                       quant={"bits": 4, "group_size": 64}, seed=91),
    # olmo3: olmo2 with sliding layers (window 6; by default layers 0-2 slide, 3 is full)
    "olmo3_bf16": fx(OLMO3, seed=92),
    "olmo3_q4_g64": fx({**OLMO3, "tie_word_embeddings": True,
                        "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
                        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}},
                       quant={"bits": 4, "group_size": 64}, seed=93),
    # granite: the four multipliers; the 4-bit one through granite's quant_predicate (8-bit o_proj,
    # down_proj, lm_head)
    "granite_bf16": fx(GRANITE, seed=94),
    "granite_q4_g64": fx({**GRANITE, "tie_word_embeddings": False, "attention_bias": True, "mlp_bias": True},
                         quant={"bits": 4, "group_size": 64}, seed=95),
    # minicpm: scale_emb, scale_depth / sqrt(layers), the head's input over hidden / dim_model_base
    "minicpm_bf16": fx(MINICPM, seed=96),
    "minicpm_q4_g64": fx(MINICPM, quant={"bits": 4, "group_size": 64}, seed=97),
    # exaone4: "LLLG": layers 0-2 slide (window 6) with RoPE, layer 3 is global without RoPE
    "exaone4_bf16": fx(EXAONE4, seed=98),
    "exaone4_q4_g64": fx({**EXAONE4, "sliding_window_pattern": None, "sliding_window": None,
                          "tie_word_embeddings": True, "rope_scaling": {
                              "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 64}},
                         quant={"bits": 4, "group_size": 64}, seed=99),
    # glm4: sandwich norms, q/k/v biases, fused gate_up_proj, RoPE over half of each head
    "glm4_bf16": fx(GLM4, seed=100),
    "glm4_q4_g64": fx({**GLM4, "attention_bias": False, "rope_traditional": False},
                      quant={"bits": 4, "group_size": 64}, seed=101),
    # ernie4_5: traditional RoPE; use_bias on every projection in the 4-bit one
    "ernie4_5_bf16": fx(ERNIE45, seed=102),
    "ernie4_5_q4_g64": fx({**ERNIE45, "use_bias": True, "head_dim": 48, "tie_word_embeddings": False},
                          quant={"bits": 4, "group_size": 64}, seed=103),
    # seed_oss: q/k/v biases apart from o_proj's; the tied head multiplies by the embedding itself
    "seed_oss_bf16": fx(SEED_OSS, seed=104),
    "seed_oss_tied_fp16": fx({**SEED_OSS, "tie_word_embeddings": True}, dtype="float16", seed=105),
    "seed_oss_q4_g64": fx({**SEED_OSS, "attention_out_bias": True, "mlp_bias": True},
                          quant={"bits": 4, "group_size": 64}, seed=106),
    # hunyuan_v1_dense: DynamicNTKAlphaRoPE (alpha 1000), per-head q/k norms after RoPE
    "hunyuan_v1_dense_bf16": fx(HUNYUAN, seed=107),
    "hunyuan_v1_dense_q4_g64": fx({**HUNYUAN, "use_qk_norm": False, "attention_bias": True, "head_dim": 48,
                                   "tie_word_embeddings": False, "rope_scaling": None},
                                  quant={"bits": 4, "group_size": 64}, seed=108),
    # internlm3: qkv_bias on q/k/v/o; MLP bias and dynamic NTK scaling in the 4-bit one
    "internlm3_bf16": fx(INTERNLM3, seed=109),
    "internlm3_q4_g64": fx({**INTERNLM3, "bias": True, "tie_word_embeddings": True, "max_position_embeddings": 16,
                            "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
                           quant={"bits": 4, "group_size": 64}, seed=110),
    # starcoder2: LayerNorms with bias, biases everywhere, c_proj(gelu(c_fc(x)))
    "starcoder2_bf16": fx(STARCODER2, seed=111),
    "starcoder2_q4_g64": fx({**STARCODER2, "tie_word_embeddings": False}, quant={"bits": 4, "group_size": 64},
                            seed=112),
    # stablelm: LayerNorms, RoPE over a quarter of each head, float32 attention; the 4-bit one with
    # the parallel residual and per-head q/k LayerNorms
    "stablelm_bf16": fx(STABLELM, seed=113),
    "stablelm_q4_g64": fx({**STABLELM, "use_parallel_residual": True, "qk_layernorm": True, "use_qkv_bias": False},
                          quant={"bits": 4, "group_size": 64}, seed=114),
    # phi (Phi-2): one LayerNorm feeds attention and MLP, RoPE over int(0.4 * 32) = 12 dimensions
    "phi_bf16": fx(PHI, seed=115),
    "phi_q4_g64": fx({**PHI, "num_key_value_heads": 2}, quant={"bits": 4, "group_size": 64}, seed=116),
    # helium: traditional RoPE; the tied 4-bit one still holds the lm_head Helium always builds
    "helium_bf16": fx(HELIUM, seed=117),
    "helium_q4_g64": fx({**HELIUM, "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True},
                        quant={"bits": 4, "group_size": 64}, seed=118),
    # cohere2: parallel block, layers 0-2 slide (window 6) with RoPE, layer 3 global without;
    # float16 attends in float32
    "cohere2_bf16": fx(COHERE2, seed=119),
    "cohere2_fp16": fx({**COHERE2, "layer_norm_bias": True, "attention_bias": True, "sliding_window_pattern": 2},
                       dtype="float16", seed=120),
    "cohere2_q4_g64": fx(COHERE2, quant={"bits": 4, "group_size": 64}, seed=121),
    # gemma2: attention logits capped at 50 (tanh), final logits at 30, queries scaled by
    # query_pre_attn_scalar ** -0.5, grouped queries (2 per KV head); the head is always tied
    "gemma2_bf16": fx(GEMMA2, seed=80),
    "gemma2_q4_g64": fx(GEMMA2, quant={"bits": 4, "group_size": 64}, seed=81),
    # no grouping (4 KV heads), a tighter attention cap, traditional RoPE
    "gemma2_fp16_mha": fx({**GEMMA2, "num_key_value_heads": 4, "attn_logit_softcapping": 20.0,
                           "final_logit_softcapping": 15.0, "rope_traditional": True}, dtype="float16", seed=82),
    # gemma: exact-gelu MLP, (1 + weight) norms, head_dim ** -0.5 scale, tied head
    "gemma_bf16": fx(GEMMA, seed=85),
    "gemma_q4_g64": fx(GEMMA, quant={"bits": 4, "group_size": 64}, seed=86),
    "gemma_fp16_mqa": fx({**GEMMA, "num_key_value_heads": 1, "head_dim": 64}, dtype="float16", seed=87),
    # phixtral: Phi-2 parallel blocks with SwitchMLP experts (fc1, gelu_approx, fc2, biases); 8 experts,
    # 6 per token so 12 prompt tokens take the sorted path; the 4-bit ones with phixtral's 4 experts,
    # 2 per token, and 8/6 saved one by one (moe.mlp.N.fc1 / fc2, as the original checkpoints)
    "phixtral_fp32": fx(PHIXTRAL, dtype="float32", seed=130),
    "phixtral_q4_g64": fx({**PHIXTRAL, "num_local_experts": 4, "num_experts_per_tok": 2},
                          quant={"bits": 4, "group_size": 64}, seed=131),
    "phixtral_per_expert_q4": fx(PHIXTRAL, quant={"bits": 4, "group_size": 64}, seed=132,
                                 per_expert={"stacked": "switch_mlp", "experts": "mlp"}),
}


def build(name, recipe, out: Path):
    config = copy.deepcopy(recipe["config"])
    mx.random.seed(recipe["seed"])
    model_class, args_class = lm_utils._get_classes(config=config)
    model = model_class(args_class.from_dict(config))
    # Norm weights start at ones; randomise them so that a wrong binding shows in the logits.
    params = tree_map(lambda p: p, model.parameters())
    flat = dict(tree_flatten(params))
    updates = []
    for k, v in flat.items():
        if k.endswith("norm.weight") or k.endswith("layernorm.weight"):
            updates.append((k, 1.0 + 0.1 * mx.random.normal(v.shape)))
        elif k.endswith(".bias"):
            updates.append((k, 0.05 * mx.random.normal(v.shape)))
        elif k.endswith(".sinks"):  # attention sinks (gpt_oss) start at zeros
            updates.append((k, mx.random.normal(v.shape)))
    model.load_weights(updates, strict=False)
    if recipe.get("router_ties"):
        tie_routers(model, recipe["router_ties"])
    if recipe.get("randomize"):
        # Parameters that start at ones without "norm" in their name (Gemma 4's layer_scalar).
        model.load_weights([(k, 1.0 + 0.1 * mx.random.normal(v.shape)) for k, v in flat.items()
                            if k.split(".")[-1] in recipe["randomize"]], strict=False)
    if recipe.get("drop_lm_head"):
        model.sanitize({k: v for k, v in tree_flatten(model.parameters()) if not k.endswith("lm_head.weight")})
    if recipe.get("mtp", {}).get("layer_scale"):
        import mtp_reference

        mtp_reference.scale_layer_outputs(model, recipe["mtp"]["layer_scale"])
    if recipe.get("cast_predicate"):
        # mlx_lm.convert's dtype cast, which leaves what the model's cast_predicate excludes (e.g.
        # the gated delta nets' A_log) in float32.
        cast = getattr(model, "cast_predicate", lambda _: True)
        dtype = getattr(mx, recipe["dtype"])
        model.update(tree_map_with_path(
            lambda k, v: v.astype(dtype) if cast(k) and mx.issubdtype(v.dtype, mx.floating) else v,
            model.parameters()))
    else:
        model.set_dtype(getattr(mx, recipe["dtype"]))
    mx.eval(model.parameters())

    quant = recipe["quant"]
    if quant:
        predicate = mixed_predicate if quant.get("predicate") == "mixed" else None
        model, config = lm_utils.quantize_model(
            model, config, quant.get("group_size"), quant.get("bits"),
            mode=quant.get("mode", "affine"), global_scale=quant.get("global_scale", False),
            quant_predicate=predicate)
        if predicate is mixed_predicate:
            # OptiQ-style maps also name the layers they keep unquantized.
            for key in ("quantization", "quantization_config"):
                config[key]["model.layers.1.self_attn.v_proj"] = False

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if recipe["shards"]:
        original = lm_utils.make_shards
        lm_utils.make_shards = lambda weights, max_file_size_gb=0: original(weights, 0)
        try:
            lm_utils.save_model(tmp, model)
        finally:
            lm_utils.make_shards = original
    else:
        lm_utils.save_model(tmp, model)
    lm_utils.save_config(config, config_path=tmp / "config.json")
    if recipe.get("extra_tensors"):
        extra = {k: mx.random.normal(shape).astype(getattr(mx, recipe["dtype"]))
                 for k, shape in recipe["extra_tensors"].items()}
        mx.save_safetensors(str(tmp / "model-extra.safetensors"), extra, metadata={"format": "mlx"})
        index_path = tmp / "model.safetensors.index.json"
        index = json.loads(index_path.read_text())
        index["weight_map"].update({k: "model-extra.safetensors" for k in extra})
        index_path.write_text(json.dumps(index, indent=4))
    if recipe.get("mtp"):
        import mtp_reference

        mtp_reference.add_head(tmp, model, recipe["mtp"], getattr(mx, recipe["dtype"]))
    if recipe.get("per_expert"):
        split_experts(tmp, **recipe["per_expert"])
    if recipe.get("openai_experts"):
        fuse_openai_experts(tmp)
    if recipe.get("adapter"):
        train_adapter(model, config, tmp / "adapter", recipe["adapter"])
    (tmp / "fixture.json").write_text(json.dumps(recipe, sort_keys=True))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


# --- mixture of experts -----------------------------------------------------------------------------
# Routers pick k of n experts; with 12 prompt tokens and k >= 6 a full forward takes switch_layers'
# sorted path (>= 64 indices), decoding one token the unsorted one.
QWEN3_MOE = {**BASE, "model_type": "qwen3_moe", "num_hidden_layers": 3, "head_dim": 32, "tie_word_embeddings": False,
             "num_experts": 16, "num_experts_per_tok": 6, "moe_intermediate_size": 64, "decoder_sparse_step": 1,
             "mlp_only_layers": [1], "norm_topk_prob": True}


def tie_routers(model, suffix):
    """Router ties: the first router's weight zeros (every expert equally likely), the others with
    each odd row equal to the even row before it (experts in pairs with equal logits)."""
    params = dict(tree_flatten(model.parameters()))
    gates = sorted(k for k in params if k.endswith(suffix + ".weight"))
    updates = []
    for i, k in enumerate(gates):
        w = params[k]
        if i == 0:
            updates.append((k, mx.zeros_like(w)))
        else:
            rows = mx.arange(w.shape[0]) // 2 * 2
            updates.append((k, w[rows]))
    model.load_weights(updates, strict=False)


def split_experts(tmp, stacked, experts, names=None):
    """Saves the stacked expert tensors (`stacked`.<proj>.<k>) one per expert, as Hugging Face
    checkpoints hold them (`experts`.<e>.<name>.<k>), for the models' sanitize to stack again."""
    names = names or {}
    index_path = tmp / "model.safetensors.index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else None
    for f in sorted(tmp.glob("model*.safetensors")):
        arrays = mx.load(str(f))
        out = {}
        for k, v in arrays.items():
            if f".{stacked}." not in k:
                out[k] = v
                continue
            head, tail = k.split(f".{stacked}.")
            proj, kind = tail.split(".")
            for e in range(v.shape[0]):
                out[f"{head}.{experts}.{e}.{names.get(proj, proj)}.{kind}"] = v[e]
        mx.save_safetensors(str(f), out, metadata={"format": "mlx"})
        if index:
            for k in arrays:
                index["weight_map"].pop(k, None)
            index["weight_map"].update({k: f.name for k in out})
    if index:
        index_path.write_text(json.dumps(index, indent=4))


MIXTRAL = {**BASE, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 6, "intermediate_size": 64}
QWEN2_MOE = {**BASE, "model_type": "qwen2_moe", "num_experts": 8, "num_experts_per_tok": 6, "moe_intermediate_size": 64,
             "shared_expert_intermediate_size": 128}
OLMOE = {**BASE, "model_type": "olmoe", "num_experts": 16, "num_experts_per_tok": 8, "intermediate_size": 64}
# layers 0 and 2 slide over 6 positions (RotatingKVCache), 1 and 3 are full; yarn RoPE as gpt-oss ships it
GPT_OSS = {**BASE, "model_type": "gpt_oss", "num_hidden_layers": 4, "num_local_experts": 8, "num_experts_per_tok": 6,
           "intermediate_size": 64, "head_dim": 32, "sliding_window": 6, "rope_theta": 150000.0,
           "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                            "truncate": False, "original_max_position_embeddings": 4096}}

# MLX's CPU gather_mm runs float32 only: the bf16 models without quantized experts run on a GPU (on a
# CPU mlx-lm and mlxrt stop with the same MLX error), their float32 twins everywhere.
def fuse_openai_experts(tmp):
    """gpt-oss experts as OpenAI's checkpoints hold them: gate and up rows interleaved in one
    gate_up_proj, mxfp4 weights as uint8 blocks of 16 bytes (`_blocks`, `_scales`, `_bias`)."""
    files = sorted(tmp.glob("model*.safetensors"))
    for f in files:
        arrays = mx.load(str(f))
        out = {}
        for k, v in arrays.items():
            if ".mlp.experts." not in k:
                out[k] = v
                continue
            head, proj, kind = k.rsplit(".", 2)
            if proj == "up_proj":
                continue
            if kind == "weight":
                v = v.view(mx.uint8)
                v = v.reshape(*v.shape[:-1], v.shape[-1] // 16, 16)
            if proj == "gate_proj":
                up = arrays[f"{head}.up_proj.{kind}"]
                if kind == "weight":
                    up = up.view(mx.uint8)
                    up = up.reshape(*up.shape[:-1], up.shape[-1] // 16, 16)
                axis = v.ndim - 1 if kind == "bias" else v.ndim - 2 - (kind == "weight")
                v = mx.stack([v, up], axis=axis + 1).reshape(
                    *v.shape[:axis], 2 * v.shape[axis], *v.shape[axis + 1:])
                proj = "gate_up_proj"
            suffix = {"weight": "_blocks", "scales": "_scales", "bias": "_bias"}[kind]
            out[f"{head}.{proj}{suffix}"] = v
        mx.save_safetensors(str(f), out, metadata={"format": "mlx"})
    index_path = tmp / "model.safetensors.index.json"
    if index_path.exists():
        index = json.loads(index_path.read_text())
        index["weight_map"] = {k: f.name for f in files for k in mx.load(str(f))}
        index_path.write_text(json.dumps(index, indent=4))


MOE_FIXTURES = {
    # qwen3_moe: layers 0 and 2 sparse, layer 1 dense (mlp_only_layers); the router's gate 8-bit when
    # quantized (qwen3_moe.py's quant_predicate)
    "qwen3_moe_bf16": fx(QWEN3_MOE, seed=70),
    "qwen3_moe_fp32": fx(QWEN3_MOE, dtype="float32", seed=74),
    "qwen3_moe_q4_g64": fx({**QWEN3_MOE, "tie_word_embeddings": True}, quant={"bits": 4, "group_size": 64}, seed=71),
    # every second layer sparse, top-k probabilities not renormalised, routers with ties
    "qwen3_moe_step2_ties": fx({**QWEN3_MOE, "num_hidden_layers": 4, "decoder_sparse_step": 2, "mlp_only_layers": [],
                                "norm_topk_prob": False}, dtype="float32", seed=72, router_ties="mlp.gate"),
    # a Hugging Face layout: experts.N.{gate,up,down}_proj.weight, stacked by sanitize
    "qwen3_moe_per_expert": fx(QWEN3_MOE, dtype="float32", seed=73,
                               per_expert={"stacked": "switch_mlp", "experts": "experts"}),
    # mixtral: top-k logits, then a softmax over them; untied head by default
    "mixtral_bf16": fx(MIXTRAL, seed=80),
    "mixtral_fp32": fx({**MIXTRAL, "num_experts_per_tok": 2}, dtype="float32", seed=81),
    "mixtral_q4_g64": fx(MIXTRAL, quant={"bits": 4, "group_size": 64}, seed=82),
    # quantized experts saved one by one (experts.N.w1/w2/w3 with scales and biases), routers with ties
    "mixtral_per_expert_q4_ties": fx({**MIXTRAL, "tie_word_embeddings": True}, quant={"bits": 4, "group_size": 64},
                                     seed=83, router_ties="block_sparse_moe.gate",
                                     per_expert={"stacked": "switch_mlp", "experts": "experts",
                                                 "names": {"gate_proj": "w1", "down_proj": "w2", "up_proj": "w3"}}),
    # qwen2_moe: a shared expert behind a sigmoid gate, biases on q/k/v, lm_head always
    "qwen2_moe_bf16": fx(QWEN2_MOE, seed=90),
    "qwen2_moe_fp32_per_expert": fx(QWEN2_MOE, dtype="float32", seed=91,
                                    per_expert={"stacked": "switch_mlp", "experts": "experts"}),
    "qwen2_moe_q4_g64": fx(QWEN2_MOE, quant={"bits": 4, "group_size": 64}, seed=92),
    # olmoe: q/k norms over whole projections, routing over flattened tokens, tied head by default
    "olmoe_bf16": fx(OLMOE, seed=100),
    "olmoe_fp32_norm_bias": fx({**OLMOE, "norm_topk_prob": True, "attention_bias": True, "mlp_bias": True,
                                "tie_word_embeddings": False}, dtype="float32", seed=101),
    "olmoe_q4_g64": fx(OLMOE, quant={"bits": 4, "group_size": 64}, seed=102),
    # gpt_oss: sinks, sliding/full layers, clamped SwiGLU experts with biases, an 8-bit router when quantized
    "gpt_oss_bf16": fx(GPT_OSS, seed=110),
    "gpt_oss_fp32": fx(GPT_OSS, dtype="float32", seed=111),
    "gpt_oss_q4_g64": fx(GPT_OSS, quant={"bits": 4, "group_size": 64}, seed=112),
    "gpt_oss_mxfp4": fx(GPT_OSS, quant={"mode": "mxfp4"}, seed=113),
    # OpenAI's layout of gpt_oss_mxfp4's weights: gate_up_proj_blocks / _scales / _bias, gate and up rows
    # interleaved
    "gpt_oss_openai_mxfp4": fx(GPT_OSS, quant={"mode": "mxfp4"}, seed=113, openai_experts=True),
}
FIXTURES.update(MOE_FIXTURES)
FIXTURES.update({
    # nvfp4 switch layers with one tensor scale per expert (quantize_model's global_scale: the config
    # names each switch layer with "global_scale": true; .global_scale [experts] float32). MLX's CPU
    # gather_qmm refuses a global scale, so on a CPU both sides stop with MLX's message.
    "mixtral_nvfp4_global_scale": fx(MIXTRAL, quant={"mode": "nvfp4", "global_scale": True}, seed=133),
    "phixtral_nvfp4_global_scale": fx({**PHIXTRAL, "num_local_experts": 4, "num_experts_per_tok": 2},
                                      quant={"mode": "nvfp4", "global_scale": True}, seed=134),
})

# gemma4 mixture of experts (enable_moe_block): a router over the residual stream (its scale and
# per-expert scales randomised) and geglu experts beside each layer's dense MLP. The float32 one keeps
# GEMMA4's KV sharing, per-layer inputs and double-wide MLPs, 6 of 16 experts per token (12 tokens take
# switch_layers' sorted path); the 4-bit one is the 26B's shape (keys are values on the global layers,
# no KV sharing or per-layer inputs), 4 of 8 experts of 128 (two groups per row), an 8-bit router
# (gemma4_text's quant_predicate); the bf16 one stops on a CPU with MLX's gather_mm error on both sides.
GEMMA4_MOE = {**GEMMA4, "enable_moe_block": True, "num_experts": 16, "top_k_experts": 6, "moe_intermediate_size": 64}
GEMMA4_MOE_26B = {**GEMMA4, "attention_k_eq_v": True, "num_global_key_value_heads": 1, "num_kv_shared_layers": 0,
                  "hidden_size_per_layer_input": 0, "enable_moe_block": True, "num_experts": 8, "top_k_experts": 4,
                  "moe_intermediate_size": 128}
_GEMMA4_MOE_ONES = ["layer_scalar", "scale", "per_expert_scale"]
FIXTURES.update({
    "gemma4_moe_fp32": fx(GEMMA4_MOE, dtype="float32", seed=74, randomize=_GEMMA4_MOE_ONES),
    "gemma4_moe_q4_g64": fx(GEMMA4_MOE_26B, quant={"bits": 4, "group_size": 64}, seed=75, randomize=_GEMMA4_MOE_ONES),
    "gemma4_moe_bf16": fx(GEMMA4_MOE_26B, seed=76, randomize=_GEMMA4_MOE_ONES),
})

# gemma3n: six layers (0 1 3 4 slide over 6 positions, 2 and 5 are global), the last two KV-shared (4 reads
# layer 3's keys and values, 5 layer 2's); four AltUp inputs with clipped coefficients and the output scale
# (zeros at init, randomised), Laurel rank 16, per-layer inputs of 64 from a per-layer vocabulary of 256
# (ids past it read row 0), activation sparsity on layers 0 and 1, a final softcap
_S, _F = "sliding_attention", "full_attention"
GEMMA3N_TEXT = {"model_type": "gemma3n_text", "hidden_size": 128, "num_hidden_layers": 6, "intermediate_size": 256,
                "num_attention_heads": 4, "head_dim": 32, "rms_norm_eps": 1e-6, "vocab_size": 512,
                "num_key_value_heads": 2, "num_kv_shared_layers": 2, "vocab_size_per_layer_input": 256,
                "sliding_window": 6, "max_position_embeddings": 4096, "rope_local_base_freq": 10000.0,
                "rope_theta": 1000000.0, "final_logit_softcapping": 30.0, "layer_types": [_S, _S, _F, _S, _S, _F],
                "activation_sparsity_pattern": [0.95, 0.95, 0.0, 0.0, 0.0, 0.0], "hidden_size_per_layer_input": 64,
                "altup_num_inputs": 4, "altup_coef_clip": 0.3, "altup_correct_scale": True, "altup_active_idx": 0,
                "laurel_rank": 16}
GEMMA3N = {"model_type": "gemma3n", "text_config": GEMMA3N_TEXT, "eos_token_id": 2, "bos_token_id": 1}
FIXTURES.update({
    "gemma3n_bf16": fx(GEMMA3N, seed=130, randomize=["correct_output_scale"]),
    # per-layer inputs and Laurel rank of 128: two quantization groups per row everywhere
    "gemma3n_q4_g64": fx({**GEMMA3N, "text_config": {**GEMMA3N_TEXT, "hidden_size_per_layer_input": 128,
                                                     "laurel_rank": 128}},
                         quant={"bits": 4, "group_size": 64}, seed=131, randomize=["correct_output_scale"]),
    # the other branches: two AltUp inputs with the second active, no clip, no output scale, no sparsity and no
    # softcap; per-layer MLP widths; layers 3-5 KV-shared (4 reads the global layer 0); the whole vocabulary
    # has per-layer inputs; vision and audio towers that sanitize drops
    "gemma3n_fp32_variant": fx({**GEMMA3N, "text_config": {
        **GEMMA3N_TEXT, "altup_num_inputs": 2, "altup_active_idx": 1, "altup_coef_clip": None,
        "altup_correct_scale": False, "activation_sparsity_pattern": None, "final_logit_softcapping": None,
        "intermediate_size": [256, 128, 256, 128, 256, 192], "num_kv_shared_layers": 3,
        "layer_types": [_F, _S, _S, _S, _F, _S], "vocab_size_per_layer_input": 512}},
        dtype="float32", seed=132, randomize=["correct_output_scale"],
        extra_tensors={"model.vision_tower.timm_model.conv_stem.conv.weight": [16, 3, 3, 3],
                       "model.audio_tower.subsample_conv_projection.input_proj_linear.weight": [16, 32],
                       "model.embed_audio.embedding_projection.weight": [128, 16],
                       "model.embed_vision.embedding.weight": [16, 128]}),
})

# --- lfm2 (short gated conv layers beside attention layers) -------------------------------------------
# Four layers, attention on 1 and 3 (full_attn_idxs; the conv layer 0 comes first), conv_L_cache 3 as
# LFM2 ships it. The MLP width goes through block_auto_adjust_ff_dim: int(2 * 400 / 3) = 266, times
# 1.2 -> 319, rounded up to a multiple of 64 -> 320 (five groups of 64 per w2 row).
LFM2 = {"model_type": "lfm2", "vocab_size": 512, "hidden_size": 128, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096, "norm_eps": 1e-5,
        "conv_bias": False, "conv_L_cache": 3, "block_dim": 128, "block_ff_dim": 400, "block_multiple_of": 64,
        "block_ffn_dim_multiplier": 1.2, "block_auto_adjust_ff_dim": True, "full_attn_idxs": [1, 3],
        "rope_theta": 1000000.0, "eos_token_id": 2, "bos_token_id": 1}
LFM2_FIXTURES = {
    "lfm2_bf16": fx(LFM2, seed=130),
    "lfm2_q4_g64": fx(LFM2, quant={"bits": 4, "group_size": 64}, seed=131),
    # layer_types with attention first (layer 0) and last; biases on the conv layers' projections and
    # conv; intermediate_size without auto-adjusting; rope_theta from rope_parameters; conv_L_cache 4
    "lfm2_fp32_layer_types": fx({**{k: v for k, v in LFM2.items() if k not in ("full_attn_idxs", "block_ff_dim")},
                                 "layer_types": ["full_attention", "conv", "conv", "full_attention"],
                                 "conv_bias": True, "conv_L_cache": 4, "intermediate_size": 192,
                                 "block_auto_adjust_ff_dim": False,
                                 "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}},
                                dtype="float32", seed=132),
}
FIXTURES.update(LFM2_FIXTURES)


# --- minicpm3 (multi-head latent attention with minicpm's scalings) ---------------------------------
# q_lora_rank and kv_lora_rank 128 (q_b_proj / kv_b_proj rows of two groups of 64 when quantized); keys
# of 32 + 16 (RoPE'd, shared by the heads), values of 128 / 4 = 32; SuScaledRoPE with long factors and
# max 4096 over an original 32 (input scale sqrt(1 + ln 128 / ln 32)).
MINICPM3 = {**BASE, "model_type": "minicpm3", "num_key_value_heads": 4, "dim_model_base": 32, "scale_depth": 1.4,
            "scale_emb": 12.0, "q_lora_rank": 128, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16,
            "kv_lora_rank": 128,
            "rope_scaling": {"type": "longrope", "original_max_position_embeddings": 32,
                             "long_factor": [1.0 + 0.5 * i for i in range(8)], "short_factor": [1.0] * 8}}
MINICPM3_FIXTURES = {
    "minicpm3_bf16": fx(MINICPM3, seed=140),
    # tied head (no division of its input), biases on q_a_proj, kv_a_proj_with_mqa and o_proj
    "minicpm3_q4_g64": fx({**MINICPM3, "tie_word_embeddings": True, "attention_bias": True},
                          quant={"bits": 4, "group_size": 64}, seed=141),
    # rope_scaling's defaults (original 4096 = max: input scale 1.0, long factor 1.0)
    "minicpm3_fp16_defaults": fx({**MINICPM3, "rope_scaling": {"type": "longrope"}}, dtype="float16", seed=142),
}
FIXTURES.update(MINICPM3_FIXTURES)

# --- speculative decoding: draft models ---------------------------------------------------------------
# Quantized copies of qwen3_bf16 and llama_bf16 (the same recipe and seed, so the same weights before
# quantizing): drafts that agree with their main model often, but not always.
FIXTURES.update({
    "qwen3_bf16_q8_draft": fx(QWEN3, quant={"bits": 8, "group_size": 64}, seed=0),
    "llama_bf16_q4_draft": fx(LLAMA, quant={"bits": 4, "group_size": 64}, seed=20),
    # qwen3_bf16's shapes over another vocabulary size (refused as a draft for it)
    "qwen3_vocab640_draft": fx({**QWEN3, "vocab_size": 640}, seed=150),
})


# --- LoRA / DoRA adapters (mlx_lm.lora's training on the fixture model) ---------------------------------
class _TokenRows:
    """A tokenized dataset as mlx_lm.lora's datasets hand it to CacheDataset: rows of token ids."""

    def __init__(self, rows):
        self.rows = rows

    def __getitem__(self, i):
        return self.rows[i]

    def __len__(self):
        return len(self.rows)

    def process(self, row):
        return row, 0


def train_adapter(model, config, out: Path, spec):
    """Trains an adapter of the saved model (bf16 or quantized: QLoRA) for a few steps with mlx_lm.lora's
    train_model (linear_to_lora_layers, Adam, the default loss) on random token rows, and saves it
    as mlx_lm.lora does (adapter_config.json, adapters.safetensors). A large learning rate makes the
    few steps move lora_b well away from its zero start."""
    import contextlib
    import io
    import types

    import numpy as np
    from mlx_lm import lora as lm_lora

    args = dict(lm_lora.CONFIG_DEFAULTS)
    args.update({"model": "fixture", "train": True, "fine_tune_type": spec.get("type", "lora"),
                 "num_layers": spec.get("num_layers", 16), "batch_size": 2, "iters": spec.get("iters", 3),
                 "val_batches": 1, "learning_rate": spec.get("lr", 2e-2), "steps_per_report": 1000,
                 "steps_per_eval": 1000, "save_every": 1000, "adapter_path": str(out), "seed": spec.get("seed", 0),
                 "lora_parameters": {"rank": spec.get("rank", 8), "dropout": 0.0, "scale": spec.get("scale", 20.0),
                                     **({"keys": spec["keys"]} if "keys" in spec else {})}})
    rng = np.random.default_rng(spec.get("seed", 0))
    vocab = config.get("vocab_size") or config["text_config"]["vocab_size"]
    rows = _TokenRows([rng.integers(0, vocab, size=24).tolist() for _ in range(4)])
    # mlx_lm.lora's run() seeds numpy (its batches' order) before train_model, which seeds only MLX
    np.random.seed(args["seed"])
    with contextlib.redirect_stdout(io.StringIO()):
        lm_lora.train_model(types.SimpleNamespace(**args), model, rows, rows)


# --- adapters (LoRA / DoRA): qwen3 and llama with adapters trained by mlx_lm.lora (the adapter lies in
# <fixture>/adapter): LoRA on every layer (num_layers -1, default keys); DoRA on both layers of a 4-bit
# base (QLoRA); DoRA on the last 2 of 3 llama layers; LoRA on a 4-bit llama with chosen keys (lm_head
# among them), rank and scale; LoRA on qwen3's tied embedding.
LLAMA_FOR_ADAPTERS = {**BASE, "model_type": "llama", "num_hidden_layers": 3, "tie_word_embeddings": False}
FIXTURES.update({
    "qwen3_bf16_lora": fx(QWEN3, seed=150, adapter={"type": "lora", "num_layers": -1}),
    "qwen3_q4_g64_dora": fx(QWEN3, quant={"bits": 4, "group_size": 64}, seed=151,
                            adapter={"type": "dora", "num_layers": 2, "seed": 1}),
    "llama_bf16_dora": fx(LLAMA_FOR_ADAPTERS, seed=152, adapter={"type": "dora", "num_layers": 2, "seed": 2}),
    "llama_q4_g64_lora_keys": fx(LLAMA_FOR_ADAPTERS, quant={"bits": 4, "group_size": 64}, seed=153,
                                 adapter={"type": "lora", "num_layers": 3, "rank": 4, "scale": 10.0, "seed": 3,
                                          "keys": ["self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj",
                                                   "lm_head"]}),
    # the tied embedding adapted too (LoRAEmbedding: its rows and the head through as_linear)
    "qwen3_bf16_lora_embed": fx(QWEN3, seed=154, adapter={"type": "lora", "num_layers": 1, "seed": 4,
                                                          "keys": ["model.embed_tokens", "mlp.up_proj"]}),
    # LoRA on a mixture of experts (LoRASwitchLinear on the experts' switch layers, LoRALinear on
    # attention and the router; float32: MLX's CPU gather_mm takes no other dtype)
    "qwen3_moe_fp32_lora": fx(QWEN3_MOE, dtype="float32", seed=155, adapter={"type": "lora", "num_layers": 2,
                                                                             "seed": 5}),
})


def ensure(out, names=None):
    """Makes the fixtures named (all when None) that are missing or were made from another recipe.
    Parallel test processes call this: each waits for the others' lock on `out`, so a fixture is
    never written by two at once. Returns the names made."""
    import fcntl

    unknown = sorted(set(names or ()) - set(FIXTURES))
    if unknown:
        raise KeyError(f"no fixture named {', '.join(unknown)} in tools/make_fixtures.py")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    made = []
    with open(out / ".fixtures.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name, recipe in FIXTURES.items():
            if names is not None and name not in names:
                continue
            target = out / name
            stamp = target / "fixture.json"
            if stamp.exists() and stamp.read_text() == json.dumps(recipe, sort_keys=True):
                continue
            build(name, recipe, target)
            made.append(name)
            print(f"made {name}", file=sys.stderr)
    return made


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        print("\n".join(FIXTURES))
        return
    ensure(args.out, args.only)


if __name__ == "__main__":
    main()
