#!/usr/bin/env python3
"""Tiny random checkpoints in the Hugging Face layout (config.json as transformers writes it,
tensor names and shapes of the transformers model, a real tokenizer), for the tests that need what
an HF checkpoint is before anyone converts it: llama.cpp's converter reads these, and so does
mlx_lm.convert, so the two conversions can be compared (tests/convert/test_gguf_llama_cpp.py).

The tensor shapes come from the pinned mlx-lm model of the family (its parameters after sanitize),
mapped back to transformers' names and layouts: per-expert or fused expert tensors, Conv1d weights
[channels, 1, kernel], and Qwen3-Next's zero-centred RMSNorm weights (transformers scales by
1 + weight; mlx-lm's sanitize adds the one).

Usage: hf_fixtures.py --out DIR [--only NAME ...]"""
import argparse
import json
import shutil
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm import utils as lm_utils

ROOT = Path(__file__).resolve().parent.parent
QWEN_TOKENIZER = ROOT.parent / "shared" / "data" / "tokenizers" / "qwen3"

# The Qwen tokenizer's 151,669 tokens need Qwen's padded vocabulary; a narrow model keeps the
# embedding and head small. Gated delta nets: 2 key heads, 4 value heads (llama.cpp reorders the
# value heads when they outnumber the key heads), conv kernel 4, full attention every 2nd layer.
QWEN_LINEAR = {"hidden_size": 64, "num_hidden_layers": 4, "intermediate_size": 128, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 32, "rms_norm_eps": 1e-6, "vocab_size": 151936,
               "max_position_embeddings": 4096, "linear_num_value_heads": 4, "linear_num_key_heads": 2,
               "linear_key_head_dim": 32, "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4,
               "full_attention_interval": 2, "tie_word_embeddings": False, "bos_token_id": 151643,
               "eos_token_id": 151645, "hidden_act": "silu", "attention_bias": False}
QWEN3_NEXT = {**QWEN_LINEAR, "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
              "rope_theta": 10000000.0, "partial_rotary_factor": 0.25, "num_experts": 4, "num_experts_per_tok": 2,
              "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48, "decoder_sparse_step": 1,
              "mlp_only_layers": [], "norm_topk_prob": True, "layer_types": [
                  "linear_attention", "full_attention", "linear_attention", "full_attention"]}
QWEN3_5_TEXT = {**QWEN_LINEAR, "model_type": "qwen3_5_text", "layer_types": QWEN3_NEXT["layer_types"],
                "rope_parameters": {"rope_type": "default", "mrope_section": [2, 1, 1], "mrope_interleaved": True,
                                    "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}}
QWEN3_5 = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
           "text_config": QWEN3_5_TEXT, "tie_word_embeddings": False}
QWEN3_5_MOE = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
               "tie_word_embeddings": False,
               "text_config": {**QWEN3_5_TEXT, "model_type": "qwen3_5_moe_text", "num_experts": 4,
                               "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                               "shared_expert_intermediate_size": 48}}

# MiniCPM: llama's layout and a SentencePiece tokenizer (Llama 2's), scale_depth that llama.cpp
# divides by sqrt(layers), a head scaled by hidden_size / dim_model_base.
MINICPM = {"architectures": ["MiniCPMForCausalLM"], "model_type": "minicpm", "hidden_size": 64,
           "num_hidden_layers": 2, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
           "rms_norm_eps": 1e-5, "vocab_size": 32000, "max_position_embeddings": 4096, "rope_theta": 10000.0,
           "scale_emb": 12.0, "scale_depth": 1.4, "dim_model_base": 32, "tie_word_embeddings": False,
           "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu"}
# Ministral 3 (text only): llama's layout with YaRN in rope_parameters and Llama 4's query scale;
# an original context of 4 positions puts the 12-token prompt across three temperature steps.
MINISTRAL3 = {"architectures": ["Ministral3ForCausalLM"], "model_type": "ministral3", "hidden_size": 64,
              "num_hidden_layers": 2, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 16, "rms_norm_eps": 1e-5, "vocab_size": 32000, "max_position_embeddings": 64,
              "rope_parameters": {"rope_type": "yarn", "type": "yarn", "rope_theta": 1000000.0, "factor": 16.0,
                                  "original_max_position_embeddings": 4, "beta_fast": 32.0, "beta_slow": 1.0,
                                  "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1},
              "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu"}
# MiniCPM 3: latent attention with LongRoPE factors. llama.cpp's file keeps neither the scales nor
# the RoPE base nor the original context: its runtime's constants (MiniCPM3-4B's) are used here,
# and the original context equals the context, as in MiniCPM3-4B.
MINICPM3 = {"architectures": ["MiniCPM3ForCausalLM"], "model_type": "minicpm3", "hidden_size": 64,
            "num_hidden_layers": 2, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
            "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
            "rms_norm_eps": 1e-5, "vocab_size": 32000, "max_position_embeddings": 64, "rope_theta": 10000.0,
            "rope_scaling": {"type": "longrope", "long_factor": [1.0, 1.5, 2.0, 3.0],
                             "short_factor": [1.0, 1.0, 1.25, 1.5], "original_max_position_embeddings": 64},
            "scale_emb": 12, "scale_depth": 1.4, "dim_model_base": 256, "tie_word_embeddings": False,
            "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu"}
# InternLM 3: llama.cpp writes it as llama (Q/K rows permuted, dynamic NTK scaling dropped); q/k/v/o
# and MLP biases on (transformers requires both or neither) so that the biases' rows come back too.
# Float32: llama.cpp's file does not say whether its float32 vectors were the checkpoint's or
# widened, and the converter keeps a llama file's as they are.
INTERNLM3 = {"architectures": ["InternLM3ForCausalLM"], "model_type": "internlm3", "hidden_size": 64,
             "num_hidden_layers": 2, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 16, "rms_norm_eps": 1e-5, "vocab_size": 32000, "max_position_embeddings": 64,
             "rope_theta": 50000000.0, "rope_scaling": {"rope_type": "dynamic", "factor": 6.0}, "qkv_bias": True,
             "bias": True, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu"}
# Gemma 4 (text, E2B's layout): sliding and full layers with their own head sizes and RoPE (the
# full layers' proportional RoPE rotates a quarter of each head), the last two layers reading the
# keys and values of the last earlier layer of their type, double-wide MLPs on those, per-layer
# token embeddings, a tied head with a soft cap. Window 4: the 12-token prompt crosses it. Gemma
# 3's tokenizer stands for Gemma 4's (a byte-fallback BPE of the same 262,144 tokens).
GEMMA4 = {"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "hidden_size": 32,
          "num_hidden_layers": 5, "intermediate_size": 64, "num_attention_heads": 2, "head_dim": 16,
          "global_head_dim": 32, "num_key_value_heads": 1, "num_kv_shared_layers": 2,
          "hidden_size_per_layer_input": 8, "vocab_size": 262144, "vocab_size_per_layer_input": 262144,
          "rms_norm_eps": 1e-6, "sliding_window": 4, "max_position_embeddings": 4096,
          "layer_types": ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
                          "full_attention"],
          "rope_parameters": {"full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0,
                                                 "rope_type": "proportional"},
                              "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}},
          "final_logit_softcapping": 30.0, "use_double_wide_mlp": True, "attention_k_eq_v": False,
          "enable_moe_block": False, "num_experts": None, "top_k_experts": None,
          "moe_intermediate_size": None, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
          "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0}
# Gemma 4 in 26B-A4B's layout: experts beside the dense MLP in every layer (router scales per
# dimension and per expert), full layers whose values are their keys (attention_k_eq_v) with
# their own key/value heads, no per-layer inputs and no KV sharing. Float32 for MLX's CPU gather_mm.
GEMMA4_MOE = {**GEMMA4, "num_kv_shared_layers": 0, "hidden_size_per_layer_input": 0, "use_double_wide_mlp": False,
              "attention_k_eq_v": True, "num_key_value_heads": 1, "num_global_key_value_heads": 2,
              "enable_moe_block": True, "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 16}
# Gemma 3n (text, E2B's layout in small): four AltUp inputs (llama.cpp converts no other count),
# LAuReL, per-layer inputs from their own vocabulary of the published 262,144 tokens beside the
# published 262,400-token one (llama.cpp pads the per-layer table to it with zeros; Llama 2's
# SentencePiece model stands for Gemma's, as the published checkpoints' tokenizer.model), activation
# sparsity on the first two layers, the last two layers reading the keys and values of the last
# earlier layer of their type, the published AltUp clip and output scale (which llama.cpp's file
# leaves out), a width per layer as the published configs list it. Window 4: the 12-token prompt
# crosses it.
GEMMA3N_TEXT = {"model_type": "gemma3n_text", "hidden_size": 32, "num_hidden_layers": 5,
                "intermediate_size": [64] * 5, "num_attention_heads": 2, "head_dim": 16, "num_key_value_heads": 1,
                "num_kv_shared_layers": 2,
                "hidden_size_per_layer_input": 8, "vocab_size": 262400, "vocab_size_per_layer_input": 262144,
                "rms_norm_eps": 1e-6, "sliding_window": 4, "max_position_embeddings": 4096,
                "rope_local_base_freq": 10000.0, "rope_theta": 1000000.0, "final_logit_softcapping": 30.0,
                "layer_types": ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
                                "full_attention"],
                "activation_sparsity_pattern": [0.95, 0.95, 0.0, 0.0, 0.0], "altup_num_inputs": 4,
                "altup_coef_clip": 120.0, "altup_correct_scale": True, "altup_active_idx": 0, "laurel_rank": 8,
                "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True, "bos_token_id": 2,
                "eos_token_id": 1, "pad_token_id": 0}
GEMMA3N = {"architectures": ["Gemma3nForConditionalGeneration"], "model_type": "gemma3n", "text_config": GEMMA3N_TEXT}
TOKENIZERS = {"minicpm": "llama2", "ministral3": "llama2", "minicpm3": "llama2", "internlm3": "llama2",
              "gemma4_text": "gemma3", "gemma3n": "llama2"}

# name: (config, dtype, seed). MLX's CPU gather_mm runs float32 only: the MoE ones are float32.
FIXTURES = {
    "hf_qwen3_next_fp32": (QWEN3_NEXT, "float32", 1),
    "hf_qwen3_5_bf16": (QWEN3_5, "bfloat16", 2),
    "hf_qwen3_5_moe_fp32": (QWEN3_5_MOE, "float32", 3),
    "hf_minicpm_bf16": (MINICPM, "bfloat16", 4),
    "hf_ministral3_bf16": (MINISTRAL3, "bfloat16", 5),
    "hf_minicpm3_bf16": (MINICPM3, "bfloat16", 6),
    "hf_internlm3_fp32": (INTERNLM3, "float32", 7),
    "hf_gemma4_bf16": (GEMMA4, "bfloat16", 8),
    "hf_gemma4_moe_fp32": (GEMMA4_MOE, "float32", 9),
    "hf_gemma3n_bf16": (GEMMA3N, "bfloat16", 10),
}

# transformers' Qwen3-Next / Qwen3.5 RMSNorm: weight stored zero-centred (scale 1 + weight).
ZERO_CENTRED = (".input_layernorm.weight", ".post_attention_layernorm.weight", "model.norm.weight",
                ".q_norm.weight", ".k_norm.weight")


def mlx_parameters(config):
    model_class, args_class = lm_utils._get_classes(config=config)
    return dict(tree_flatten(model_class(args_class.from_dict(config)).parameters()))


def hf_tensors(config, dtype, seed):
    """Random tensors under transformers' names, shaped as transformers holds them."""
    mx.random.seed(seed)
    text = config.get("text_config", config)
    out = {}

    def put(name, shape, kind):
        if kind == "zero_norm":
            v = 0.1 * mx.random.normal(shape)
        elif kind == "norm":
            v = 1.0 + 0.1 * mx.random.normal(shape)
        elif kind == "A_log":
            v = mx.log(mx.random.uniform(1.0, 16.0, shape))
        elif kind == "dt_bias":
            v = 1.0 + 0.5 * mx.random.normal(shape)
        else:
            v = mx.random.normal(shape) * (shape[-1] ** -0.5 if len(shape) > 1 else 0.1)
        # A_log stays float32 (as Qwen's checkpoints keep it and mlx-lm's cast_predicate leaves it).
        out[name] = v.astype(mx.float32 if kind == "A_log" else getattr(mx, dtype))

    for name, p in mlx_parameters(config).items():
        name = name.removeprefix("language_model.")
        if "text_config" in config and not name.startswith("model.language_model."):  # Gemma 3n's are already
            name = name.replace("model.", "model.language_model.", 1)
        shape = list(p.shape)
        if ".experts.switch_glu." in name:  # Gemma 4: gate and up fused, no ".weight"
            if name.endswith("gate_proj.weight"):
                put(name.replace(".switch_glu.gate_proj.weight", ".gate_up_proj"), [shape[0], 2 * shape[1], shape[2]],
                    "matrix")
            elif name.endswith("down_proj.weight"):
                put(name.replace(".switch_glu.down_proj.weight", ".down_proj"), shape, "matrix")
            continue
        if ".switch_mlp." in name:
            experts = text["num_experts"]
            if "qwen3_next" == config["model_type"]:  # one tensor per expert
                for e in range(experts):
                    put(name.replace(".switch_mlp.", f".experts.{e}."), shape[1:], "matrix")
            elif name.endswith("gate_proj.weight"):  # Qwen3.5-MoE: gate and up fused, no ".weight"
                put(name.replace(".switch_mlp.gate_proj.weight", ".experts.gate_up_proj"),
                    [experts, 2 * shape[1], shape[2]], "matrix")
            elif name.endswith("down_proj.weight"):
                put(name.replace(".switch_mlp.down_proj.weight", ".experts.down_proj"), shape, "matrix")
            continue
        if name.endswith("conv1d.weight"):  # MLX [channels, kernel, 1], torch [channels, 1, kernel]
            put(name, [shape[0], 1, shape[1]], "matrix")
        elif name.endswith(ZERO_CENTRED):
            put(name, shape, "zero_norm")
        elif name.endswith("norm.weight"):
            put(name, shape, "norm")
        elif name.endswith(("A_log", "dt_bias")):
            put(name, shape, name.rsplit(".", 1)[-1])
        else:
            put(name, shape, "matrix")
    return out


def build(name, out: Path):
    config, dtype, seed = FIXTURES[name]
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    mx.save_safetensors(str(tmp / "model.safetensors"), hf_tensors(config, dtype, seed), metadata={"format": "pt"})
    torch_dtype = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}[dtype]
    full = {**config, "torch_dtype": torch_dtype}
    if "text_config" in full:
        full["text_config"] = {**full["text_config"], "torch_dtype": torch_dtype}
    (tmp / "config.json").write_text(json.dumps(full, indent=2))
    for f in (QWEN_TOKENIZER.parent / TOKENIZERS.get(config["model_type"], "qwen3")).iterdir():
        # Llama 2's tokenizer.json holds its merges in a form transformers 5 no longer reads: the
        # SentencePiece model stands for it (llama.cpp's converter reads that one too).
        if not (f.name == "tokenizer.json" and (f.parent / "tokenizer.model").exists()):
            shutil.copyfile(f, tmp / f.name)
    (tmp / "fixture.json").write_text(json.dumps([config, dtype, seed], sort_keys=True))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def ensure(out: Path, names=None):
    for name in names or FIXTURES:
        config, dtype, seed = FIXTURES[name]
        stamp = out / name / "fixture.json"
        if stamp.is_file() and stamp.read_text() == json.dumps([config, dtype, seed], sort_keys=True):
            continue
        build(name, out / name)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    ensure(args.out, args.only)


if __name__ == "__main__":
    main()
