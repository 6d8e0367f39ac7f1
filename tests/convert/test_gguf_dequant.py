"""Lossless conversion: for every tensor of the real SmolLM2 GGUF, MLX's dequantisation of the
converted weights/scales/biases equals the gguf package's reference dequantisation of the GGUF
blocks, exactly, once llama.cpp's Q/K row permutation is undone."""

import json
import shutil

import mlx.core as mx
import numpy as np
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize

from gguf_support import convert, smollm2_gguf

LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_exps": "mlp.switch_mlp.gate_proj",
    "ffn_up_exps": "mlp.switch_mlp.up_proj",
    "ffn_down_exps": "mlp.switch_mlp.down_proj",
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
    "ffn_up_shexp": "mlp.shared_expert.up_proj",
    "ffn_down_shexp": "mlp.shared_expert.down_proj",
}
# Gemma 3: a norm after each sublayer and one before the MLP.
GEMMA3_NAMES = {**LAYER_NAMES, "ffn_norm": "pre_feedforward_layernorm", "post_attention_norm": "post_attention_layernorm",
                "post_ffw_norm": "post_feedforward_layernorm"}
# Phi-3 keeps q/k/v and gate/up fused.
PHI3_NAMES = {**LAYER_NAMES, "attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}
# Mixtral (llama.cpp's "llama" with experts) keeps its experts under block_sparse_moe.
MIXTRAL_NAMES = {**LAYER_NAMES, "ffn_gate_inp": "block_sparse_moe.gate",
                 "ffn_gate_exps": "block_sparse_moe.switch_mlp.gate_proj",
                 "ffn_up_exps": "block_sparse_moe.switch_mlp.up_proj",
                 "ffn_down_exps": "block_sparse_moe.switch_mlp.down_proj"}
GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head",
                "token_embd_norm": "model.embedding_norm"}  # LFM2's final norm


def hf_module(gguf_name: str, layer_names=LAYER_NAMES, global_names=GLOBAL_NAMES) -> str:
    base = gguf_name.rsplit(".", 1)[0]
    if base in global_names:
        return global_names[base]
    _, layer, part = base.split(".", 2)  # LFM2's parts have a dot of their own (shortconv.conv)
    return f"model.layers.{layer}.{layer_names[part]}"


def unpermute(rows: np.ndarray, heads: int) -> np.ndarray:
    """Inverse of llama.cpp's permute(): (heads, half, 2, in) -> (heads, 2, half, in)."""
    return rows.reshape(heads, rows.shape[0] // heads // 2, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def stored_values(weights, module, suffix, shape):
    """The float32 values the checkpoint holds for `{module}.{suffix}` (dequantised when packed)."""
    if f"{module}.scales" in weights and weights[f"{module}.scales"].dtype == mx.uint8 and suffix == "weight":
        # MXFP4 kept as MLX's mxfp4 (E8M0 scale bytes, no biases)
        return np.array(mx.dequantize(weights[f"{module}.weight"], weights[f"{module}.scales"], None, group_size=32,
                                      bits=4, mode="mxfp4", dtype=mx.float32))
    if f"{module}.scales" in weights and suffix == "weight":
        w, s, b = weights[f"{module}.weight"], weights[f"{module}.scales"], weights[f"{module}.biases"]
        assert s.dtype == mx.float32 and b.dtype == mx.float32, module
        group_size = shape[-1] // s.shape[-1]
        bits = w.shape[-1] * 32 // shape[-1]
        return np.array(mx.dequantize(w, s, b, group_size=group_size, bits=bits))
    if f"{module}.{suffix}" not in weights and module in weights:  # a bare parameter (gpt-oss's sinks)
        return np.array(weights[module].astype(mx.float32)).reshape(shape)
    return np.array(weights[f"{module}.{suffix}"].astype(mx.float32)).reshape(shape)


def check_every_tensor(gguf_path, out_dir, permuted_qk=True, layer_names=LAYER_NAMES, norms_minus_one=False,
                       split_rows=(), fused_rows=None, global_names=GLOBAL_NAMES):
    """`split_rows`: GGUF tensor kinds (e.g. "attn_q_norm") stored as one `{module}.norms.{row}` per row;
    `fused_rows`: kinds (e.g. "attn_qkv") stored split by rows, {kind: [(module in the layer, rows), ...]}."""
    config = json.loads((out_dir / "config.json").read_text())
    weights = {}
    for f in out_dir.glob("model*.safetensors"):
        weights.update(mx.load(str(f)))
    reader = GGUFReader(str(gguf_path))
    checked = 0
    for t in reader.tensors:
        ref = dequantize(t.data, t.tensor_type)
        if t.name.startswith("rope_factors_"):  # phi3's LongRoPE factors: config.json's rope_scaling
            kind = t.name.split("_")[2].split(".")[0]
            assert np.array_equal(np.array(config["rope_scaling"][f"{kind}_factor"], dtype=np.float32), ref), t.name
            checked += 1
            continue
        part = t.name.rsplit(".", 1)[0].split(".")[-1]
        if permuted_qk and part == "attn_q":
            ref = unpermute(ref, config["num_attention_heads"])
        elif permuted_qk and part == "attn_k":
            ref = unpermute(ref, config["num_key_value_heads"])
        if norms_minus_one and t.name.endswith("norm.weight"):  # Gemma: llama.cpp stored 1 + weight
            ref = ref - np.float32(1)
        module = hf_module(t.name, layer_names, global_names)
        suffix = t.name.rsplit(".", 1)[1]
        if part in split_rows:
            got = np.stack([np.array(weights[f"{module}.norms.{r}.{suffix}"].astype(mx.float32)) for r in range(ref.shape[0])])
        elif fused_rows and part in fused_rows:
            layer = ".".join(module.split(".")[:3])  # model.layers.N
            got = np.concatenate([stored_values(weights, f"{layer}.{m}", suffix, (rows, *ref.shape[1:]))
                                  for m, rows in fused_rows[part]])
        else:
            got = stored_values(weights, module, suffix, ref.shape)
        assert got.shape == ref.shape, (t.name, got.shape, ref.shape)
        assert np.array_equal(got, ref), f"{t.name}: max |diff| {np.abs(got - ref).max()}"
        checked += 1
    return checked, reader


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = convert(smollm2_gguf(), tmp_path_factory.mktemp("smollm2") / "model")
    yield out
    shutil.rmtree(out)  # 115 MB


def test_every_tensor_dequantises_exactly(converted):
    checked, reader = check_every_tensor(smollm2_gguf(), converted)
    types = sorted({t.tensor_type.name for t in reader.tensors})
    print(f"{checked} tensors equal to the reference dequantisation; GGUF types {types}")
    assert checked == len(reader.tensors) == 272


def test_quantization_section_matches_the_blocks(converted):
    config = json.loads((converted / "config.json").read_text())
    q = config["quantization"]
    assert (q["group_size"], q["bits"], q["mode"]) == (32, 4, "affine")  # Q4_1 everywhere ...
    assert q["model.embed_tokens"] == {"group_size": 32, "bits": 8, "mode": "affine"}  # ... but Q8_0 here
    assert config["quantization_config"] == q
