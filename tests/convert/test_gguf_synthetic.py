"""Every supported tensor type and architecture entry, on tiny GGUF files written here with the
gguf package: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K blocks (with per-module packings), Q2_K,
Q3_K, Q6_K, IQ4_NL, IQ4_XS and the IQ1..IQ3 lattice kinds (stored as float32), F16/BF16/F32 tensors kept, an untied (quantized) output head; llama (Q/K permuted by llama.cpp), qwen2 (attention biases), qwen3 (Q/K
norms). Each converts losslessly, and mlx-lm loads it and computes the same logits as a dense
model built from the reference dequantisation; mlxrt runs the converted directory with logits
byte-equal to mlx-lm's."""

import json

import mlx.core as mx
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter
from gguf.quants import quantize

from gguf_support import convert
from test_gguf_dequant import check_every_tensor, unpermute

HIDDEN, HEADS, KV_HEADS, FFN, LAYERS, EXPERTS = 256, 4, 2, 256, 2, 4
HEAD_DIM = HIDDEN // HEADS

# A small byte-level vocabulary: the 256 byte characters, two merges, and the special tokens.
BYTE_CHARS = [chr(c) for c in range(33, 127)] + [chr(c) for c in range(161, 173)] + [chr(c) for c in range(174, 256)]
BYTE_CHARS += [chr(256 + i) for i in range(256 - len(BYTE_CHARS))]
TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + BYTE_CHARS + ["Ġt", "Ġth"]
TYPES = [3, 3, 3] + [1] * (len(TOKENS) - 3)
MERGES = ["Ġ t", "Ġt h"]

# (gguf name, rows, cols, type per layer): the types mix every supported block and float kind.
LAYER = [
    ("attn_q", HEADS * HEAD_DIM, HIDDEN, (Q.Q8_0, Q.Q8_0)),
    ("attn_k", KV_HEADS * HEAD_DIM, HIDDEN, (Q.Q4_0, Q.Q4_0)),
    ("attn_v", KV_HEADS * HEAD_DIM, HIDDEN, (Q.BF16, Q.F16)),
    ("attn_output", HIDDEN, HEADS * HEAD_DIM, (Q.Q4_1, Q.Q4_1)),
    ("ffn_gate", FFN, HIDDEN, (Q.Q4_K, Q.Q5_K)),
    ("ffn_up", FFN, HIDDEN, (Q.Q5_1, Q.Q4_0)),
    ("ffn_down", HIDDEN, FFN, (Q.Q5_0, Q.Q6_K)),
]
# Block bytes, the offsets of its fp16 fields, elements per block.
K_QUANTS = {Q.Q4_K: (144, [0, 2], 256), Q.Q5_K: (176, [0, 2], 256), Q.Q6_K: (210, [208], 256),
            Q.Q2_K: (84, [80, 82], 256), Q.Q3_K: (110, [108], 256), Q.IQ4_XS: (136, [0], 256),
            Q.IQ4_NL: (18, [0], 32), Q.IQ2_XXS: (66, [0], 256), Q.IQ2_XS: (74, [0], 256),
            Q.IQ2_S: (82, [0], 256), Q.IQ3_XXS: (98, [0], 256), Q.IQ3_S: (110, [0], 256), Q.IQ1_S: (50, [0], 256),
            Q.IQ1_M: (56, [], 256), Q.TQ1_0: (54, [52], 256), Q.TQ2_0: (66, [64], 256)}
# The types stored as float32 (16-element sub-blocks, or the IQ4 grid), each in two modules.
LAYER_FLOAT32_KINDS = [
    ("attn_q", HEADS * HEAD_DIM, HIDDEN, (Q.Q2_K, Q.Q3_K)),
    ("attn_k", KV_HEADS * HEAD_DIM, HIDDEN, (Q.IQ4_NL, Q.IQ4_XS)),
    ("attn_v", KV_HEADS * HEAD_DIM, HIDDEN, (Q.Q3_K, Q.Q2_K)),
    ("attn_output", HIDDEN, HEADS * HEAD_DIM, (Q.IQ4_XS, Q.IQ4_NL)),
    ("ffn_gate", FFN, HIDDEN, (Q.Q2_K, Q.Q6_K)),
    ("ffn_up", FFN, HIDDEN, (Q.Q3_K, Q.IQ4_NL)),
    ("ffn_down", HIDDEN, FFN, (Q.IQ4_XS, Q.Q2_K)),
]

# The IQ1..IQ3 lattice kinds, stored as float32 from the tables generated at build time.
LAYER_IQ_KINDS = [
    ("attn_q", HEADS * HEAD_DIM, HIDDEN, (Q.IQ2_XXS, Q.IQ1_M)),
    ("attn_k", KV_HEADS * HEAD_DIM, HIDDEN, (Q.IQ2_XS, Q.IQ3_S)),
    ("attn_v", KV_HEADS * HEAD_DIM, HIDDEN, (Q.IQ2_S, Q.IQ1_S)),
    ("attn_output", HIDDEN, HEADS * HEAD_DIM, (Q.IQ3_XXS, Q.IQ2_XXS)),
    ("ffn_gate", FFN, HIDDEN, (Q.IQ3_S, Q.IQ2_XS)),
    ("ffn_up", FFN, HIDDEN, (Q.IQ1_S, Q.IQ2_S)),
    ("ffn_down", HIDDEN, FFN, (Q.IQ1_M, Q.IQ3_XXS)),
]


def random_k_blocks(rows, cols, qtype, rng):
    """K-quant / IQ4 blocks of random bits (gguf-py cannot quantize to most), with finite fp16 scales."""
    size, halves, elements = K_QUANTS[qtype]
    blocks = rng.integers(0, 256, size=(rows * cols // elements, size), dtype=np.uint8)
    for at in halves:
        blocks[:, at : at + 2] = (rng.standard_normal(len(blocks)) * 0.01).astype(np.float16).view(np.uint8).reshape(-1, 2)
    if qtype == Q.IQ1_M:  # its fp16 scale is the top nibbles of the four u16 at bytes 48..55
        d = (rng.standard_normal(len(blocks)) * 0.01).astype(np.float16).view(np.uint16)
        sc = blocks[:, 48:56].copy().view(np.uint16) & np.uint16(0x0FFF)
        for k in range(4):
            sc[:, k] |= ((d >> np.uint16(4 * k)) & np.uint16(0xF)) << np.uint16(12)
        blocks[:, 48:56] = sc.view(np.uint8)
    return blocks.reshape(rows, -1)


# Phi-3: fused qkv and gate_up (the GGUF's ffn_up holds both halves), LongRoPE over 3/4 of each head.
PHI3_LAYER = [
    ("attn_qkv", (HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN, (Q.Q8_0, Q.Q4_K)),
    ("attn_output", HIDDEN, HEADS * HEAD_DIM, (Q.Q3_K, Q.Q4_1)),
    ("ffn_up", 2 * FFN, HIDDEN, (Q.Q4_0, Q.IQ4_XS)),
    ("ffn_down", HIDDEN, FFN, (Q.Q6_K, Q.Q5_0)),
]
PHI3_ROTARY = 48

MOE_LAYERS = {"qwen3moe": [0], "qwen2moe": [0, 1], "mixtral": [0, 1]}  # layers whose MLP is experts


def add_random_tensor(w, name, shape, qtype, rng):
    """Adds tensor `name` of `shape` to the GGUFWriter `w`, stored as `qtype`: random k-quant blocks,
    or random values (float or quantized by the gguf package)."""
    values = rng.standard_normal(shape).astype(np.float32) * 0.2
    if qtype in K_QUANTS:
        blocks = random_k_blocks(int(np.prod(shape[:-1])), shape[-1], qtype, rng)
        w.add_tensor(name, blocks.reshape(*shape[:-1], -1), raw_dtype=qtype)
    elif qtype == Q.F32:
        w.add_tensor(name, values)
    elif qtype == Q.F16:
        w.add_tensor(name, values.astype(np.float16))
    else:
        w.add_tensor(name, quantize(values, qtype), raw_dtype=qtype)


def write_gguf(path, arch, rng, layer=LAYER, layers=LAYERS):
    moe_layers = MOE_LAYERS.get(arch, [])
    w = GGUFWriter(str(path), "llama" if arch == "mixtral" else arch)
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    if arch in ("gemma", "gemma2", "gemma3"):
        w.add_key_length(HEAD_DIM)
        w.add_value_length(HEAD_DIM)
    if arch in ("gemma2", "gemma3"):
        w.add_sliding_window(6)
    if arch == "gemma2":
        w.add_float32("gemma2.attn_logit_softcapping", 50.0)
        w.add_float32("gemma2.final_logit_softcapping", 30.0)
    if arch == "phi3":
        w.add_rope_dimension_count(PHI3_ROTARY)
        w.add_uint32("phi3.rope.scaling.original_context_length", 64)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2" if arch not in ("llama", "mixtral") else "llama-bpe")
    if moe_layers:
        w.add_expert_count(EXPERTS)
        w.add_expert_used_count(2)
        if arch != "mixtral":
            w.add_expert_feed_forward_length(FFN)
        if arch == "qwen2moe":
            w.add_expert_shared_feed_forward_length(FFN)
    w.add_token_list(TOKENS)
    w.add_token_types(TYPES)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}")

    def add(name, shape, qtype):
        add_random_tensor(w, name, shape, qtype, rng)

    add("token_embd.weight", (len(TOKENS), HIDDEN), Q.F16)
    if arch == "phi3":
        w.add_tensor("rope_factors_long.weight", (1.0 + rng.random(PHI3_ROTARY // 2) * 3).astype(np.float32))
        w.add_tensor("rope_factors_short.weight", (1.0 + rng.random(PHI3_ROTARY // 2) * 0.1).astype(np.float32))
    add("output_norm.weight", (HIDDEN,), Q.F32)
    if arch not in ("gemma", "gemma2"):  # Gemma 1 and 2 tie their head
        add("output.weight", (len(TOKENS), HIDDEN), Q.Q8_0)
    for i in range(layers):
        add(f"blk.{i}.attn_norm.weight", (HIDDEN,), Q.F32)
        add(f"blk.{i}.ffn_norm.weight", (HIDDEN,), Q.F32)
        for name, rows, cols, qtypes in layer:
            if i in moe_layers and name.startswith("ffn_"):
                continue  # the experts below (qwen3moe's layer 1 stays dense: mlp_only_layers)
            add(f"blk.{i}.{name}.weight", (rows, cols), qtypes[i % 2])
        if i in moe_layers:
            add(f"blk.{i}.ffn_gate_inp.weight", (EXPERTS, HIDDEN), Q.F32)
            add(f"blk.{i}.ffn_gate_exps.weight", (EXPERTS, FFN, HIDDEN), (Q.Q4_K, Q.Q5_0)[i])
            add(f"blk.{i}.ffn_up_exps.weight", (EXPERTS, FFN, HIDDEN), (Q.Q8_0, Q.Q2_K)[i])
            add(f"blk.{i}.ffn_down_exps.weight", (EXPERTS, HIDDEN, FFN), (Q.Q6_K, Q.Q4_0)[i])
        if arch == "qwen2moe":
            add(f"blk.{i}.ffn_gate_inp_shexp.weight", (HIDDEN,), Q.F32)
            add(f"blk.{i}.ffn_gate_shexp.weight", (FFN, HIDDEN), Q.Q8_0)
            add(f"blk.{i}.ffn_up_shexp.weight", (FFN, HIDDEN), Q.Q4_K)
            add(f"blk.{i}.ffn_down_shexp.weight", (HIDDEN, FFN), Q.Q4_1)
        if arch in ("qwen2", "qwen2moe"):
            for name, rows in (("attn_q", HEADS * HEAD_DIM), ("attn_k", KV_HEADS * HEAD_DIM), ("attn_v", KV_HEADS * HEAD_DIM)):
                add(f"blk.{i}.{name}.bias", (rows,), Q.F32)
        if arch in ("gemma2", "gemma3"):
            for name in ("post_attention_norm", "post_ffw_norm"):
                add(f"blk.{i}.{name}.weight", (HIDDEN,), Q.F32)
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            add(f"blk.{i}.attn_q_norm.weight", (HEAD_DIM,), Q.F32)
            add(f"blk.{i}.attn_k_norm.weight", (HEAD_DIM,), Q.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def dense_reference(gguf_path, arch):
    """The same model, unquantized, from the gguf package's dequantisation."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    from test_gguf_dequant import hf_module

    weights = {}
    for t in GGUFReader(str(gguf_path)).tensors:
        ref = dequantize(t.data, t.tensor_type)
        part = t.name.split(".")[-2]
        if arch == "llama" and part in ("attn_q", "attn_k"):
            ref = unpermute(ref, HEADS if part == "attn_q" else KV_HEADS)
        weights[f"{hf_module(t.name)}.{t.name.rsplit('.', 1)[1]}"] = mx.array(ref)
    return weights


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_tiny_model_converts_losslessly_and_runs_in_mlx_lm(arch, tmp_path):
    from mlx_lm.utils import load_model

    gguf_path = tmp_path / f"tiny-{arch}.gguf"
    write_gguf(gguf_path, arch, np.random.default_rng(7))
    out = convert(gguf_path, tmp_path / "model")
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == arch and config["tie_word_embeddings"] is False
    q = config["quantization"]
    assert (q["bits"], q["group_size"]) == (4, 32)  # Q4_0 / Q4_1 are the most common
    for i in range(LAYERS):
        assert q[f"model.layers.{i}.self_attn.q_proj"] == {"group_size": 32, "bits": 8, "mode": "affine"}
    assert q["model.layers.0.mlp.up_proj"] == {"group_size": 32, "bits": 5, "mode": "affine"}  # Q5_1
    assert q["model.layers.0.mlp.down_proj"]["bits"] == 5  # Q5_0
    assert q["model.layers.1.mlp.gate_proj"]["bits"] == 5  # Q5_K
    assert "model.layers.0.mlp.gate_proj" not in q  # Q4_K: the default packing
    assert "model.layers.1.mlp.down_proj" not in q  # Q6_K: float32
    assert q["lm_head"]["bits"] == 8 and "model.embed_tokens" not in q

    # Dequantised conversion check (biases and norms are compared as plain tensors).
    checked, reader = check_every_tensor(gguf_path, out, permuted_qk=arch == "llama")
    assert checked == len(reader.tensors)

    weights = mx.load(str(out / "model.safetensors"))
    assert weights["model.layers.0.self_attn.v_proj.weight"].dtype == mx.bfloat16
    assert weights["model.embed_tokens.weight"].dtype == mx.float16
    assert weights["model.layers.1.mlp.down_proj.weight"].dtype == mx.float32
    assert "model.embed_tokens.scales" not in weights and "lm_head.scales" in weights

    model, _ = load_model(out)  # strict: every weight must match a parameter
    tokens = mx.array([[1, 40, 41, 42, 258, 2]])
    logits = model(tokens)
    dense_config = {k: v for k, v in config.items() if not k.startswith("quantization")}
    (tmp_path / "dense").mkdir()
    (tmp_path / "dense" / "config.json").write_text(json.dumps(dense_config))
    mx.save_safetensors(str(tmp_path / "dense" / "model.safetensors"), dense_reference(gguf_path, arch))
    dense, _ = load_model(tmp_path / "dense")
    want = dense(tokens)
    diff = float(mx.abs(logits.astype(mx.float32) - want.astype(mx.float32)).max())
    print(f"{arch}: {checked} tensors exact; max |logit diff| quantized vs dense = {diff:.2e}")
    assert diff < 1e-3, diff


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_converted_model_logits_in_mlxrt_equal_mlx_lm(arch, tmp_path):
    """The converted checkpoint (mixed packings and float kinds) runs in mlxrt with logits
    byte-equal to mlx-lm's on the same directory."""
    gguf_path = tmp_path / f"tiny-{arch}.gguf"
    write_gguf(gguf_path, arch, np.random.default_rng(11))
    assert_logits_equal_mlx_lm(convert(gguf_path, tmp_path / "model"), tmp_path)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_float32_kinds_convert_exactly_and_run(arch, tmp_path):
    """Q2_K, Q3_K, Q6_K, IQ4_NL and IQ4_XS: stored as float32 holding the gguf package's
    dequantised values bit for bit; mlxrt's logits on the result equal mlx-lm's."""
    gguf_path = tmp_path / f"tiny-{arch}.gguf"
    write_gguf(gguf_path, arch, np.random.default_rng(13), layer=LAYER_FLOAT32_KINDS)
    out = convert(gguf_path, tmp_path / "model")
    checked, reader = check_every_tensor(gguf_path, out, permuted_qk=arch == "llama")
    assert checked == len(reader.tensors)
    weights = mx.load(str(out / "model.safetensors"))
    for name, *_ in LAYER_FLOAT32_KINDS:
        assert not any(k.endswith(".scales") and f".{name}" in k for k in weights)
    assert_logits_equal_mlx_lm(out, tmp_path)


# The ternary kinds (TQ1_0, TQ2_0) kept as MLX 2-bit affine groups of 128, beside other packings.
LAYER_TERNARY_KINDS = [
    ("attn_q", HEADS * HEAD_DIM, HIDDEN, (Q.TQ1_0, Q.TQ2_0)),
    ("attn_k", KV_HEADS * HEAD_DIM, HIDDEN, (Q.TQ2_0, Q.TQ1_0)),
    ("attn_v", KV_HEADS * HEAD_DIM, HIDDEN, (Q.Q8_0, Q.TQ2_0)),
    ("attn_output", HIDDEN, HEADS * HEAD_DIM, (Q.TQ1_0, Q.Q4_K)),
    ("ffn_gate", FFN, HIDDEN, (Q.TQ2_0, Q.TQ1_0)),
    ("ffn_up", FFN, HIDDEN, (Q.TQ1_0, Q.TQ2_0)),
    ("ffn_down", HIDDEN, FFN, (Q.TQ2_0, Q.IQ2_XXS)),
]


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_ternary_kinds_convert_exactly_and_run(arch, tmp_path):
    """TQ1_0 and TQ2_0 (random blocks: every base-3 digit and 2-bit code, TQ2_0's unused 3 too)
    repacked as MLX 2-bit affine with scale d and bias -d; exact against the gguf package (Q/K rows
    un-permuted for llama), mlxrt's logits equal mlx-lm's."""
    gguf_path = tmp_path / f"tiny-{arch}.gguf"
    write_gguf(gguf_path, arch, np.random.default_rng(37), layer=LAYER_TERNARY_KINDS)
    out = convert(gguf_path, tmp_path / "model")
    checked, reader = check_every_tensor(gguf_path, out, permuted_qk=arch == "llama")
    assert checked == len(reader.tensors)
    q = json.loads((out / "config.json").read_text())["quantization"]
    assert (q["bits"], q["group_size"]) == (2, 128)
    assert_logits_equal_mlx_lm(out, tmp_path)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_iq_kinds_convert_exactly_and_run(arch, tmp_path):
    """IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S (random blocks: every grid index,
    sign pattern and scale): stored as float32 holding the gguf package's dequantised values bit for
    bit (Q/K rows un-permuted for llama); mlxrt's logits on the result equal mlx-lm's."""
    gguf_path = tmp_path / f"tiny-{arch}.gguf"
    write_gguf(gguf_path, arch, np.random.default_rng(31), layer=LAYER_IQ_KINDS)
    out = convert(gguf_path, tmp_path / "model")
    checked, reader = check_every_tensor(gguf_path, out, permuted_qk=arch == "llama")
    assert checked == len(reader.tensors)
    kinds = {t.tensor_type for t in reader.tensors}
    assert {Q.IQ1_S, Q.IQ1_M, Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S} <= kinds
    weights = mx.load(str(out / "model.safetensors"))
    assert weights["model.layers.0.self_attn.q_proj.weight"].dtype == mx.float32
    assert not any(k.endswith(".scales") and ".layers." in k for k in weights)
    assert_logits_equal_mlx_lm(out, tmp_path)


@pytest.mark.parametrize("arch", ["qwen3moe", "qwen2moe", "mixtral"])
def test_moe_gguf_converts_exactly_and_runs(arch, tmp_path):
    """Mixture-of-experts GGUFs: llama.cpp's qwen3moe (a dense layer as mlp_only_layers), qwen2moe
    (a shared expert behind its gate, a 1-D vector in the GGUF) and Mixtral (architecture "llama"
    with experts, Q/K permuted): the router and the stacked experts ([experts, out, in]; K- and
    legacy quants repacked as MLX switch layers, Q2_K/Q6_K as float32); exact against the gguf
    package, mlxrt's logits equal mlx-lm's."""
    from test_gguf_dequant import LAYER_NAMES, MIXTRAL_NAMES

    gguf_path = tmp_path / f"tiny-{arch}.gguf"
    write_gguf(gguf_path, arch, np.random.default_rng(17))
    out = convert(gguf_path, tmp_path / "model")
    config = json.loads((out / "config.json").read_text())
    want_type = {"qwen3moe": "qwen3_moe", "qwen2moe": "qwen2_moe", "mixtral": "mixtral"}[arch]
    assert config["model_type"] == want_type and config["num_experts_per_tok"] == 2
    assert config["num_local_experts" if arch == "mixtral" else "num_experts"] == EXPERTS
    if arch == "qwen3moe":
        assert config["mlp_only_layers"] == [1] and config["norm_topk_prob"] is True
    if arch == "qwen2moe":
        assert config["shared_expert_intermediate_size"] == FFN
    names = MIXTRAL_NAMES if arch == "mixtral" else LAYER_NAMES
    checked, reader = check_every_tensor(gguf_path, out, permuted_qk=arch == "mixtral", layer_names=names)
    assert checked == len(reader.tensors)
    weights = mx.load(str(out / "model.safetensors"))
    experts = "block_sparse_moe" if arch == "mixtral" else "mlp"
    assert weights[f"model.layers.0.{experts}.switch_mlp.gate_proj.weight"].shape == (EXPERTS, FFN, HIDDEN * 4 // 32)
    assert weights[f"model.layers.0.{experts}.switch_mlp.down_proj.weight"].dtype == mx.float32
    assert_logits_equal_mlx_lm(out, tmp_path)


@pytest.mark.parametrize("arch", ["gemma", "gemma2", "gemma3"])
def test_gemma_gguf_converts_exactly_and_runs(arch, tmp_path):
    """llama.cpp's gemma, gemma2 and gemma3: every norm stored as 1 + weight (read back as
    weight - 1 in float32, so the model's 1 + weight is the GGUF's own scale), the tied head,
    Gemma 2's soft caps and Gemma 3's constants in config.json."""
    from test_gguf_dequant import GEMMA3_NAMES, LAYER_NAMES

    gguf_path = tmp_path / f"tiny-{arch}.gguf"
    # mlx-lm's gemma3_text needs a whole pattern of layers (five sliding, one global).
    write_gguf(gguf_path, arch, np.random.default_rng(23), layers=6 if arch == "gemma3" else 2)
    out = convert(gguf_path, tmp_path / "model")
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == {"gemma": "gemma", "gemma2": "gemma2", "gemma3": "gemma3_text"}[arch]
    if arch != "gemma":
        assert config["query_pre_attn_scalar"] == HEAD_DIM and config["sliding_window"] == 6
    if arch == "gemma2":
        assert (config["attn_logit_softcapping"], config["final_logit_softcapping"]) == (50.0, 30.0)
    checked, reader = check_every_tensor(gguf_path, out, permuted_qk=False,
                                         layer_names=LAYER_NAMES if arch == "gemma" else GEMMA3_NAMES,
                                         norms_minus_one=True)
    assert checked == len(reader.tensors)
    assert_logits_equal_mlx_lm(out, tmp_path)


def test_phi3_gguf_converts_exactly_and_runs(tmp_path):
    """llama.cpp's phi3: fused qkv and gate/up projections, partial rotary (rope.dimension_count
    below the head size) and LongRoPE factors (rope_factors_long/short, into rope_scaling)."""
    from test_gguf_dequant import PHI3_NAMES

    gguf_path = tmp_path / "tiny-phi3.gguf"
    write_gguf(gguf_path, "phi3", np.random.default_rng(19), layer=PHI3_LAYER)
    out = convert(gguf_path, tmp_path / "model")
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "phi3" and config["partial_rotary_factor"] == PHI3_ROTARY / HEAD_DIM
    assert config["rope_scaling"]["type"] == "longrope" and len(config["rope_scaling"]["long_factor"]) == PHI3_ROTARY // 2
    assert config["original_max_position_embeddings"] == 64 and config["max_position_embeddings"] == 256
    checked, reader = check_every_tensor(gguf_path, out, permuted_qk=False, layer_names=PHI3_NAMES)
    assert checked == len(reader.tensors)
    assert_logits_equal_mlx_lm(out, tmp_path)


def assert_logits_equal_mlx_lm(out, tmp_path):
    """mlxrt's logits on the converted directory byte-equal to mlx-lm's."""
    import subprocess

    from mlx_lm.utils import load_model

    from gguf_support import mlxrt_bin

    tokens = [1, 40, 41, 42, 258, 2, 200, 77]
    model, _ = load_model(out)
    want = model(mx.array([tokens]))[0]
    logits_file = tmp_path / "logits.safetensors"
    r = subprocess.run([mlxrt_bin(), "logits", "--model", str(out), "--tokens", ",".join(map(str, tokens)),
                        "--out", str(logits_file)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    got = mx.load(str(logits_file))["logits"]
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.shape)
    width = {2: mx.uint16, 4: mx.uint32}[want.dtype.size]
    assert np.array_equal(np.array(got.view(width)), np.array(want.view(width))), f"{out}: logits differ"
