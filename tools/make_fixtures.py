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
from mlx.utils import tree_flatten, tree_map
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
    randomize (parameter names, the last part of the key, to randomise around one)."""
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
    # gemma4: layers 0 1 3 slide over 6 positions, 2 and 5 are global with their own head size (64) and
    # proportional RoPE on a quarter of it; layers 4 and 5 are KV-shared (they attend over layer 3's and
    # layer 2's keys and values) with double-wide MLPs; per-layer input embeddings of 64 per layer
    "gemma4_bf16": fx(GEMMA4, seed=70, randomize=["layer_scalar"]),
    "gemma4_q4_g64": fx(GEMMA4, quant={"bits": 4, "group_size": 64}, seed=71, randomize=["layer_scalar"]),
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
    model.load_weights(updates, strict=False)
    if recipe.get("randomize"):
        # Parameters that start at ones without "norm" in their name (Gemma 4's layer_scalar).
        model.load_weights([(k, 1.0 + 0.1 * mx.random.normal(v.shape)) for k, v in flat.items()
                            if k.split(".")[-1] in recipe["randomize"]], strict=False)
    if recipe.get("drop_lm_head"):
        model.sanitize({k: v for k, v in tree_flatten(model.parameters()) if not k.endswith("lm_head.weight")})
    model.set_dtype(getattr(mx, recipe["dtype"]))
    mx.eval(model.parameters())

    quant = recipe["quant"]
    if quant:
        predicate = mixed_predicate if quant.get("predicate") == "mixed" else None
        model, config = lm_utils.quantize_model(
            model, config, quant.get("group_size"), quant.get("bits"),
            mode=quant.get("mode", "affine"), quant_predicate=predicate)
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
    (tmp / "fixture.json").write_text(json.dumps(recipe, sort_keys=True))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        print("\n".join(FIXTURES))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, recipe in FIXTURES.items():
        if args.only and name not in args.only:
            continue
        target = out / name
        stamp = target / "fixture.json"
        if stamp.exists() and stamp.read_text() == json.dumps(recipe, sort_keys=True):
            continue
        build(name, recipe, target)
        print(f"made {name}", file=sys.stderr)


if __name__ == "__main__":
    main()
