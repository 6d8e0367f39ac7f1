"""The GGUF architectures beyond the llama-like ones, on tiny files written here with the gguf
package: granite and smollm3 (Q/K permuted by llama.cpp), olmo2, olmo3 (llama.cpp's olmo2 with
sliding windows) and exaone4 (norms after the sublayers only), starcoder2 and stablelm (LayerNorms with biases; stablelm's partial rotary, and
StableLM 2 12B's per-head q/k norms split back into one tensor per head), glm4 (fused gate/up,
interleaved partial rotary), cohere2 (tied head, logit scale, sliding windows), gpt-oss (sinks,
biased router and experts, MXFP4 experts kept as MLX's mxfp4, YaRN RoPE), olmoe (experts in every
layer, q/k norms over all heads), ernie4_5 (dense, tied head), seed_oss (q/k/v biases), lfm2
(short-convolution and attention layers), phi2 (LayerNorms, partial rotary, biases; q/k/v apart or
fused in attn_qkv and split back by rows), hunyuan-dense (per-head q/k norms, NTK base as written). Each tensor converts exactly (against the gguf package's dequantisation), config.json
carries the family's fields, and mlxrt's logits on the result are byte-equal to mlx-lm's."""

import json

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter

from gguf_support import convert
from test_gguf_dequant import GLOBAL_NAMES, LAYER_NAMES, check_every_tensor
from test_gguf_synthetic import (EXPERTS, FFN, HEAD_DIM, HEADS, HIDDEN, KV_HEADS, MERGES, TOKENS, TYPES,
                                 add_random_tensor, assert_logits_equal_mlx_lm)

Q_ROWS, KV_ROWS = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
ATTN = [("attn_q", Q_ROWS, HIDDEN), ("attn_k", KV_ROWS, HIDDEN), ("attn_v", KV_ROWS, HIDDEN),
        ("attn_output", HIDDEN, Q_ROWS)]
GATED_MLP = [("ffn_gate", FFN, HIDDEN), ("ffn_up", FFN, HIDDEN), ("ffn_down", HIDDEN, FFN)]
# Block types cycled over each layer's matrices: legacy and K quants kept as MLX affine, the
# 16-element and grid kinds stored as float32, and float tensors.
MATRIX_TYPES = [Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.Q4_0, Q.F16, Q.Q5_K, Q.IQ4_XS, Q.Q3_K, Q.Q5_1, Q.Q2_K, Q.Q4_1]

PHI2_VECTORS = [("attn_norm", HIDDEN), ("attn_norm.bias", HIDDEN), ("attn_output.bias", HIDDEN),
                ("ffn_up.bias", FFN), ("ffn_down.bias", HIDDEN)]
PHI2_GLOBALS = {"output_norm": "model.final_layernorm"}
PHI2_NAMES = {"attn_qkv": "self_attn.qkv", "attn_output": "self_attn.dense", "ffn_up": "mlp.fc1", "ffn_down": "mlp.fc2"}

# Per architecture: layer matrices, 1-D vectors per layer (name, length), global vectors, the
# number of layers, extra metadata, whether the head is its own tensor, the HF names.
FAMILIES = {
    "granite": dict(matrices=ATTN + GATED_MLP, vectors=[("attn_norm", HIDDEN), ("ffn_norm", HIDDEN)],
                    meta={"attention.scale": 0.125, "embedding_scale": 12.0, "residual_scale": 0.22,
                          "logit_scale": 8.0}),
    "smollm3": dict(matrices=ATTN + GATED_MLP, vectors=[("attn_norm", HIDDEN), ("ffn_norm", HIDDEN)], layers=4),
    "olmo2": dict(matrices=ATTN + GATED_MLP,
                  vectors=[("attn_q_norm", Q_ROWS), ("attn_k_norm", KV_ROWS), ("post_attention_norm", HIDDEN),
                           ("post_ffw_norm", HIDDEN)],
                  names={"post_attention_norm": "post_attention_layernorm", "post_ffw_norm": "post_feedforward_layernorm"}),
    # OLMo 3: llama.cpp's "olmo2" with sliding windows (three sliding layers, then a full one).
    "olmo3": dict(arch="olmo2", matrices=ATTN + GATED_MLP, layers=4,
                  vectors=[("attn_q_norm", Q_ROWS), ("attn_k_norm", KV_ROWS), ("post_attention_norm", HIDDEN),
                           ("post_ffw_norm", HIDDEN)],
                  meta={"attention.sliding_window": 6, "attention.sliding_window_pattern": [True, True, True, False]},
                  names={"post_attention_norm": "post_attention_layernorm", "post_ffw_norm": "post_feedforward_layernorm"}),
    "exaone4": dict(matrices=ATTN + GATED_MLP, layers=4,
                    vectors=[("attn_q_norm", HEAD_DIM), ("attn_k_norm", HEAD_DIM), ("post_attention_norm", HIDDEN),
                             ("post_ffw_norm", HIDDEN)],
                    meta={"attention.sliding_window": 6, "attention.sliding_window_pattern": [True, True, True, False]},
                    names={"post_attention_norm": "post_attention_layernorm", "post_ffw_norm": "post_feedforward_layernorm"}),
    "starcoder2": dict(matrices=ATTN + [("ffn_up", FFN, HIDDEN), ("ffn_down", HIDDEN, FFN)], layer_norm=True,
                       vectors=[("attn_norm", HIDDEN), ("attn_norm.bias", HIDDEN), ("ffn_norm", HIDDEN),
                                ("ffn_norm.bias", HIDDEN), ("attn_q.bias", Q_ROWS), ("attn_k.bias", KV_ROWS),
                                ("attn_v.bias", KV_ROWS), ("attn_output.bias", HIDDEN), ("ffn_up.bias", FFN),
                                ("ffn_down.bias", HIDDEN)],
                       names={"ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}),
    "stablelm": dict(matrices=ATTN + GATED_MLP, layer_norm=True, rotary=16,
                     vectors=[("attn_norm", HIDDEN), ("attn_norm.bias", HIDDEN), ("ffn_norm", HIDDEN),
                              ("ffn_norm.bias", HIDDEN), ("attn_q.bias", Q_ROWS), ("attn_k.bias", KV_ROWS),
                              ("attn_v.bias", KV_ROWS)],
                     meta={"use_parallel_residual": False}),
    # StableLM 2 12B's layout: per-head q/k LayerNorms (stacked by llama.cpp), parallel residuals.
    "stablelm-qk-norms": dict(arch="stablelm", matrices=ATTN + GATED_MLP, layer_norm=True, rotary=16,
                              vectors=[("attn_norm", HIDDEN), ("attn_norm.bias", HIDDEN),
                                       ("attn_q_norm", (HEADS, HEAD_DIM)), ("attn_k_norm", (KV_HEADS, HEAD_DIM))],
                              meta={"use_parallel_residual": True},
                              names={"attn_q_norm": "self_attn.q_layernorm", "attn_k_norm": "self_attn.k_layernorm"},
                              split_rows=("attn_q_norm", "attn_k_norm")),
    "glm4": dict(matrices=ATTN + [("ffn_up", 2 * FFN, HIDDEN), ("ffn_down", HIDDEN, FFN)], rotary=HEAD_DIM // 2,
                 vectors=[("attn_norm", HIDDEN), ("attn_q.bias", Q_ROWS), ("attn_k.bias", KV_ROWS),
                          ("attn_v.bias", KV_ROWS), ("post_attention_norm", HIDDEN), ("ffn_norm", HIDDEN),
                          ("post_ffw_norm", HIDDEN)],
                 names={"post_attention_norm": "post_self_attn_layernorm", "ffn_up": "mlp.gate_up_proj",
                        "post_ffw_norm": "post_mlp_layernorm"}),
    # gpt-oss: sinks, biased router and experts (MXFP4 as llama.cpp writes them, one layer Q8_0 / Q4_1
    # to mix packings), YaRN RoPE, alternating sliding and full layers.
    "gpt-oss": dict(matrices=ATTN, layers=2,
                    vectors=[("attn_norm", HIDDEN), ("post_attention_norm", HIDDEN), ("attn_q.bias", Q_ROWS),
                             ("attn_k.bias", KV_ROWS), ("attn_v.bias", KV_ROWS), ("attn_output.bias", HIDDEN),
                             ("attn_sinks", HEADS), ("ffn_gate_inp.bias", EXPERTS),
                             ("ffn_gate_exps.bias", (EXPERTS, FFN)), ("ffn_up_exps.bias", (EXPERTS, FFN)),
                             ("ffn_down_exps.bias", (EXPERTS, HIDDEN))],
                    experts=[("ffn_gate_inp", (EXPERTS, HIDDEN), (Q.F32, Q.Q8_0)),
                             ("ffn_gate_exps", (EXPERTS, FFN, HIDDEN), (Q.MXFP4, Q.Q8_0)),
                             ("ffn_up_exps", (EXPERTS, FFN, HIDDEN), (Q.MXFP4, Q.Q4_1)),
                             ("ffn_down_exps", (EXPERTS, HIDDEN, FFN), (Q.MXFP4, Q.MXFP4))],
                    meta={"expert_count": EXPERTS, "expert_used_count": 2, "expert_feed_forward_length": FFN,
                          "attention.sliding_window": 6, "rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                          "rope.scaling.original_context_length": 64},
                    names={"attn_sinks": "self_attn.sinks", "post_attention_norm": "post_attention_layernorm",
                           "ffn_gate_inp": "mlp.router", "ffn_gate_exps": "mlp.experts.gate_proj",
                           "ffn_up_exps": "mlp.experts.up_proj", "ffn_down_exps": "mlp.experts.down_proj"}),
    # OLMoE: q/k norms over all heads, every layer's MLP experts.
    "olmoe": dict(matrices=ATTN, layers=2,
                  vectors=[("attn_norm", HIDDEN), ("ffn_norm", HIDDEN), ("attn_q_norm", Q_ROWS), ("attn_k_norm", KV_ROWS)],
                  experts=[("ffn_gate_inp", (EXPERTS, HIDDEN), (Q.F32, Q.F16)),
                           ("ffn_gate_exps", (EXPERTS, FFN, HIDDEN), (Q.Q4_K, Q.IQ2_XS)),
                           ("ffn_up_exps", (EXPERTS, FFN, HIDDEN), (Q.Q8_0, Q.Q6_K)),
                           ("ffn_down_exps", (EXPERTS, HIDDEN, FFN), (Q.IQ3_S, Q.Q4_0))],
                  meta={"expert_count": EXPERTS, "expert_used_count": 2}),
    # ERNIE 4.5 (dense): interleaved RoPE in HF already, tied head.
    "ernie4_5": dict(matrices=ATTN + GATED_MLP, vectors=[("attn_norm", HIDDEN), ("ffn_norm", HIDDEN)], tied=True),
    # Seed-OSS: biases on q/k/v only, the pre-MLP norm named attn_post_norm by llama.cpp.
    "seed_oss": dict(matrices=ATTN + GATED_MLP,
                     vectors=[("attn_norm", HIDDEN), ("post_attention_norm", HIDDEN), ("attn_q.bias", Q_ROWS),
                              ("attn_k.bias", KV_ROWS), ("attn_v.bias", KV_ROWS)],
                     names={"post_attention_norm": "post_attention_layernorm"}),
    # LFM2: short-convolution layers (0, 2) around an attention layer (1), marked as llama.cpp marks
    # them by the per-layer key/value head counts; the final norm is token_embd_norm; tied head.
    "lfm2": dict(matrices=ATTN + GATED_MLP, layers=3, tied=True, no_output_norm=True,
                 vectors=[("attn_norm", HIDDEN), ("ffn_norm", HIDDEN), ("attn_q_norm", HEAD_DIM),
                          ("attn_k_norm", HEAD_DIM)],
                 conv_layers={0, 2},
                 conv_matrices=[("shortconv.in_proj", 3 * HIDDEN, HIDDEN), ("shortconv.out_proj", HIDDEN, HIDDEN)]
                 + GATED_MLP,
                 conv_vectors=[("attn_norm", HIDDEN), ("ffn_norm", HIDDEN), ("shortconv.conv", (HIDDEN, 3))],
                 globals=[("token_embd_norm", HIDDEN)],
                 meta={"attention.head_count_kv": [0, KV_HEADS, 0], "shortconv.l_cache": 3},
                 names={"attn_norm": "operator_norm", "ffn_norm": "ffn_norm", "attn_output": "self_attn.out_proj",
                        "attn_q_norm": "self_attn.q_layernorm", "attn_k_norm": "self_attn.k_layernorm",
                        "shortconv.conv": "conv.conv", "shortconv.in_proj": "conv.in_proj",
                        "shortconv.out_proj": "conv.out_proj", "ffn_gate": "feed_forward.w1",
                        "ffn_up": "feed_forward.w3", "ffn_down": "feed_forward.w2"}),
    # Phi-2: LayerNorms, partial rotary, biases everywhere (the head too); q/k/v apart, and fused
    # into attn_qkv as older conversions write them (split back by rows).
    "phi2": dict(global_names=PHI2_GLOBALS, matrices=ATTN + [("ffn_up", FFN, HIDDEN), ("ffn_down", HIDDEN, FFN)], layer_norm=True, rotary=32,
                 output_bias=True, vectors=PHI2_VECTORS + [("attn_q.bias", Q_ROWS), ("attn_k.bias", KV_ROWS),
                                                           ("attn_v.bias", KV_ROWS)], names=PHI2_NAMES),
    "phi2-fused-qkv": dict(arch="phi2", global_names=PHI2_GLOBALS, layer_norm=True, rotary=32, output_bias=True, names=PHI2_NAMES,
                           matrices=[("attn_qkv", Q_ROWS + 2 * KV_ROWS, HIDDEN), ("attn_output", HIDDEN, Q_ROWS),
                                     ("ffn_up", FFN, HIDDEN), ("ffn_down", HIDDEN, FFN)],
                           vectors=PHI2_VECTORS + [("attn_qkv.bias", Q_ROWS + 2 * KV_ROWS)],
                           fused_rows={"attn_qkv": [("self_attn.q_proj", Q_ROWS), ("self_attn.k_proj", KV_ROWS),
                                                    ("self_attn.v_proj", KV_ROWS)]}),
    # Hunyuan dense: per-head q/k norms; llama.cpp's NTK-alpha base folded into rope.freq_base.
    "hunyuan-dense": dict(matrices=ATTN + GATED_MLP,
                          vectors=[("attn_norm", HIDDEN), ("ffn_norm", HIDDEN), ("attn_q_norm", HEAD_DIM),
                                   ("attn_k_norm", HEAD_DIM)],
                          meta={"rope.scaling.type": "none", "rope.scaling.factor": 1.0},
                          names={"attn_q_norm": "self_attn.query_layernorm", "attn_k_norm": "self_attn.key_layernorm"}),
    "cohere2": dict(matrices=ATTN + GATED_MLP, vectors=[("attn_norm", HIDDEN)], layer_norm=True, tied=True, layers=4,
                    meta={"logit_scale": 0.25, "attention.sliding_window": 6}),
}
PERMUTED = {"granite", "smollm3"}


def add_metadata(w, arch, meta):
    for key, value in meta.items():
        if value is None:  # left out
            continue
        full = f"{arch}.{key}"
        if isinstance(value, bool):
            w.add_bool(full, value)
        elif isinstance(value, str):
            w.add_string(full, value)
        elif isinstance(value, list):
            w.add_array(full, value)
        elif isinstance(value, int):
            w.add_uint32(full, value)
        else:
            w.add_float32(full, value)


def write_family_gguf(path, case, rng, types=MATRIX_TYPES, meta=None, skip=(), extra=()):
    """`meta` overrides the family's metadata (None leaves a key out), `skip` names tensors left
    out, `extra` adds (name, shape) float32 tensors: for the bad-input cases."""
    spec = FAMILIES[case]
    arch = spec.get("arch", case)
    layers = spec.get("layers", 2)
    w = GGUFWriter(str(path), arch)
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    if "attention.head_count_kv" not in spec.get("meta", {}):
        w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(10000.0)
    if "rotary" in spec:
        w.add_rope_dimension_count(spec["rotary"])
    if spec.get("layer_norm"):
        w.add_layer_norm_eps(1e-5)
    else:
        w.add_layer_norm_rms_eps(1e-6)
    add_metadata(w, arch, {**spec.get("meta", {}), **(meta or {})})
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(TOKENS)
    w.add_token_types(TYPES)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def add(name, shape, qtype):
        if name not in skip:
            add_random_tensor(w, name, shape, qtype, rng)

    add("token_embd.weight", (len(TOKENS), HIDDEN), Q.F16)
    if not spec.get("no_output_norm"):
        add("output_norm.weight", (HIDDEN,), Q.F32)
    for name, length in spec.get("globals", []):
        add(f"{name}.weight", (length,), Q.F32)
    if spec.get("layer_norm") and arch != "cohere2":
        add("output_norm.bias", (HIDDEN,), Q.F32)
    if not spec.get("tied"):
        add("output.weight", (len(TOKENS), HIDDEN), Q.Q8_0)
    if spec.get("output_bias"):
        add("output.bias", (len(TOKENS),), Q.F32)
    n = 0
    for i in range(layers):
        conv = i in spec.get("conv_layers", ())
        for name, length in spec["conv_vectors" if conv else "vectors"]:
            shape = length if isinstance(length, tuple) else (length,)
            add(f"blk.{i}.{name}" + ("" if name.endswith(".bias") else ".weight"), shape, Q.F32)
        for name, rows, cols in spec["conv_matrices" if conv else "matrices"]:
            add(f"blk.{i}.{name}.weight", (rows, cols), types[n % len(types)])
            n += 1
        for name, shape, qtypes in spec.get("experts", []):
            add(f"blk.{i}.{name}.weight", shape, qtypes[i % len(qtypes)])
    for name, shape in extra:
        w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def expected_fields(arch):
    return {
        "granite": {"attention_multiplier": 0.125, "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
                    "logits_scaling": 8.0},
        "smollm3": {"no_rope_layer_interval": 4},
        "exaone4": {"sliding_window": 6, "sliding_window_pattern": "LLLG"},
        "starcoder2": {"norm_epsilon": 1e-5},
        "stablelm": {"layer_norm_eps": 1e-5, "partial_rotary_factor": 0.25, "use_qkv_bias": True,
                     "use_parallel_residual": False, "qk_layernorm": False},
        "stablelm-qk-norms": {"use_qkv_bias": False, "use_parallel_residual": True, "qk_layernorm": True},
        "glm4": {"partial_rotary_factor": 0.5, "rope_traditional": True, "attention_bias": True},
        "cohere2": {"logit_scale": 0.25, "sliding_window": 6, "sliding_window_pattern": 4, "layer_norm_eps": 1e-5,
                    "tie_word_embeddings": True},
        "olmo2": {"rms_norm_eps": 1e-6},
        "olmo3": {"model_type": "olmo3", "sliding_window": 6,
                  "layer_types": ["sliding_attention"] * 3 + ["full_attention"]},
        "olmoe": {"num_experts": EXPERTS, "num_experts_per_tok": 2, "intermediate_size": FFN, "norm_topk_prob": False},
        "ernie4_5": {"use_bias": False, "tie_word_embeddings": True},
        "seed_oss": {"attention_bias": True, "attention_out_bias": False},
        "hunyuan-dense": {"use_qk_norm": True, "rope_scaling": None},
        "phi2": {"partial_rotary_factor": 0.5, "layer_norm_eps": 1e-5, "model_type": "phi"},
        "phi2-fused-qkv": {"partial_rotary_factor": 0.5, "model_type": "phi"},
        "lfm2": {"full_attn_idxs": [1], "num_key_value_heads": KV_HEADS, "conv_L_cache": 3, "conv_bias": False,
                 "block_ff_dim": FFN, "block_auto_adjust_ff_dim": False, "norm_eps": 1e-6},
        "gpt-oss": {"num_local_experts": EXPERTS, "num_experts_per_tok": 2, "intermediate_size": FFN,
                    "sliding_window": 6, "layer_types": ["sliding_attention", "full_attention"],
                    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 4.0,
                                     "original_max_position_embeddings": 64, "rope_type": "yarn"}},
    }[arch]


@pytest.mark.parametrize("case", list(FAMILIES))
def test_family_gguf_converts_exactly_and_runs(case, tmp_path):
    spec = FAMILIES[case]
    arch = spec.get("arch", case)
    gguf_path = tmp_path / f"tiny-{case}.gguf"
    write_family_gguf(gguf_path, case, np.random.default_rng(29))
    out = convert(gguf_path, tmp_path / "model")
    config = json.loads((out / "config.json").read_text())
    want_type = {"phi2": "phi", "hunyuan-dense": "hunyuan_v1_dense"}.get(arch, arch.replace("-", "_"))
    assert config["model_type"] == expected_fields(case).get("model_type", want_type)
    for key, value in expected_fields(case).items():
        assert config[key] == value, (key, config[key], value)
    names = {**LAYER_NAMES, **spec.get("names", {})}
    checked, reader = check_every_tensor(gguf_path, out, permuted_qk=arch in PERMUTED, layer_names=names,
                                         split_rows=spec.get("split_rows", ()), fused_rows=spec.get("fused_rows"),
                                         global_names={**GLOBAL_NAMES, **spec.get("global_names", {})})
    assert checked == len(reader.tensors)
    assert_logits_equal_mlx_lm(out, tmp_path)


BAD = {
    "granite without its logit scale": ("granite", dict(meta={"logit_scale": None}),
                                        "metadata 'granite.logit_scale' is missing or not a finite, positive number"),
    "exaone4 with a flag short": ("exaone4", dict(meta={"attention.sliding_window_pattern": [True, False]}),
                                  "'exaone4.attention.sliding_window_pattern' must hold one flag per layer (4)"),
    "cohere2 with its own head": ("cohere2", dict(extra=[("output.weight", (len(TOKENS), HIDDEN))]),
                                  "cohere2 ties its output head to the embeddings"),
    "stablelm with a q norm row short": ("stablelm", dict(extra=[("blk.0.attn_q_norm.weight", (HEADS - 1, HEAD_DIM))]),
                                         "tensor 'blk.0.attn_q_norm.weight' must be a 2-D F32/F16/BF16 tensor of one "
                                         "row per query head (4 rows)"),
    "olmoe with flattened experts": ("olmoe", dict(skip={"blk.1.ffn_up_exps.weight"},
                                                   extra=[("blk.1.ffn_up_exps.weight", (EXPERTS * FFN, HIDDEN))]),
                                     "tensor 'blk.1.ffn_up_exps.weight' has 2 dimensions, expected 3 (stacked experts)"),
    "lfm2 with a key/value head list short": ("lfm2", dict(meta={"attention.head_count_kv": [0, KV_HEADS]}),
                                              "metadata 'lfm2.attention.head_count_kv' must list the key/value heads "
                                              "of each of the 3 layers"),
    "phi2 with a fused qkv of the wrong height": ("phi2-fused-qkv", dict(skip={"blk.0.attn_qkv.weight"},
                                                  extra=[("blk.0.attn_qkv.weight", (Q_ROWS + KV_ROWS, HIDDEN))]),
                                                  "tensor 'blk.0.attn_qkv.weight' must hold the 512 query, key and "
                                                  "value rows (4 + 2 x 2 heads of 64)"),
    "glm4 without a head": ("glm4", dict(skip={"output.weight"}), "glm4 needs an output head of its own"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_family_gguf_is_refused_by_name(case, tmp_path):
    """Missing or contradictory family metadata and tensors: a message naming the file and what
    was expected, a non-zero exit, no output directory."""
    from gguf_support import run_convert

    family, changes, message = BAD[case]
    gguf_path = tmp_path / f"bad-{family}.gguf"
    write_family_gguf(gguf_path, family, np.random.default_rng(3), **changes)
    r = run_convert("--gguf", str(gguf_path), "--out", str(tmp_path / "out"))
    assert r.returncode != 0 and message in r.stderr, r.stderr
    assert str(gguf_path) in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()
