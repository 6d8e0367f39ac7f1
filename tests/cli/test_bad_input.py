"""Bad input: each case gives a clear message naming the file/field and a non-zero exit."""
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("MLXRT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BIN = os.environ.get("MLXRT_BIN", str(ROOT / "build" / "mlxrt"))
FIXTURES = Path(os.environ.get("MLXRT_FIXTURES", ROOT / "build" / "fixtures"))
sys.path.insert(0, str(ROOT / "tools"))
from fixture_dirs import fixture_dir  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    fixture_dir("qwen3_bf16")
    fixture_dir("qwen3_q4_g64")
    return FIXTURES


def copy_model(src, dst):
    shutil.copytree(src, dst)
    return dst


def logits(model_dir, *extra):
    return subprocess.run([BIN, "logits", "--model", str(model_dir), "--tokens", "1,2,3",
                           "--out", str(Path(model_dir).parent / "out.safetensors"), *extra],
                          capture_output=True, text=True)

def fixture_copy(name, tmp_path):
    """A fresh copy of one fixture of tools/make_fixtures.py (made first when missing)."""
    return copy_model(fixture_dir(name), tmp_path / "m")


def assert_refused(proc, case, expected):
    """Exit 1 with an "error: " line holding every expected text."""
    assert proc.returncode == 1 and proc.stderr.startswith("error: "), proc.stderr
    for text in expected:
        assert text in proc.stderr, f"{case}: {text!r} not in {proc.stderr!r}"



def rewrite_header(path: Path, edit):
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    edit(header)
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + data[8 + n:])


def edit_config(d, fn):
    cfg = json.loads((d / "config.json").read_text())
    fn(cfg)
    (d / "config.json").write_text(json.dumps(cfg))


def weights_of(d):
    from mlx.core import load
    return load(str(d / "model.safetensors"))


def save_weights(d, w):
    import mlx.core as mx
    mx.save_safetensors(str(d / "model.safetensors"), w)


CASES = {
    "missing directory": (lambda d: shutil.rmtree(d), ["does not exist"]),
    "missing config.json": (lambda d: (d / "config.json").unlink(), ["config.json", "not found"]),
    "invalid config.json": (lambda d: (d / "config.json").write_text("{not json"), ["config.json", "invalid JSON"]),
    "missing required key": (lambda d: edit_config(d, lambda c: c.pop("hidden_size")),
                             ["config.json", "hidden_size"]),
    "wrong key type": (lambda d: edit_config(d, lambda c: c.update(num_hidden_layers="two")),
                       ["num_hidden_layers", "integer"]),
    "layer count beyond the weights": (lambda d: edit_config(d, lambda c: c.update(num_hidden_layers=1000000000)),
                                       ["config.json", "num_hidden_layers", "1000000000", "weights hold layers 0.."]),
    "integer beyond its range": (lambda d: edit_config(d, lambda c: c.update(hidden_size=4294967424)),
                                 ["config.json", "hidden_size", "4294967424", "outside the range"]),
    "integral float beyond its range": (lambda d: edit_config(d, lambda c: c.update(num_attention_heads=1e300)),
                                        ["config.json", "num_attention_heads", "outside the range"]),
    "eos id beyond int32": (lambda d: edit_config(d, lambda c: c.update(eos_token_id=[1, 2 ** 40])),
                            ["config.json", "eos_token_id 1099511627776"]),
    "number that overflows": (lambda d: (d / "config.json").write_text(
        (d / "config.json").read_text()[:-1] + ', "rope_theta": 1e999}'), ["config.json", "1e999"]),
    "unsupported model_type": (lambda d: edit_config(d, lambda c: c.update(model_type="mamba")),
                               ["unsupported model_type \"mamba\"", "supported: ", " gemma3_text, ", " llama, "]),
    "remapped model_type": (lambda d: edit_config(d, lambda c: c.update(model_type="kimi_k2")),
                            ["mlx-lm remaps it to \"deepseek_v3\""]),
    "missing weight": (lambda d: (save_weights(d, {k: v for k, v in weights_of(d).items()
                                                   if k != "model.norm.weight"}),
                                  (d / "model.safetensors.index.json").unlink()),
                       ["missing parameters", "model.norm.weight"]),
    "index names a tensor its file lacks": (lambda d: save_weights(d, {k: v for k, v in weights_of(d).items()
                                                                       if k != "model.norm.weight"}),
                                            ["model.safetensors.index.json", "'model.norm.weight' is not in"]),
    "index names a missing file": (lambda d: (d / "model.safetensors").rename(d / "model-x.safetensors"),
                                   ["maps to missing file model.safetensors"]),
    "extra weight": (lambda d: save_weights(d, {**weights_of(d), "model.extra.weight": weights_of(d)["model.norm.weight"]}),
                     ["unexpected parameters", "model.extra.weight"]),
    "mis-shaped weight": (lambda d: save_weights(d, {**weights_of(d), "model.norm.weight": weights_of(d)["model.norm.weight"][:64]}),
                          ["model.norm.weight", "expected shape (128,)", "(64,)"]),
    "no weight files": (lambda d: (d / "model.safetensors").unlink(), ["no model*.safetensors"]),
    "truncated safetensors": (lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:-100]),
                              ["model.safetensors", "beyond the end of the file"]),
    "header length beyond file": (lambda d: (d / "model.safetensors").write_bytes(
        struct.pack("<Q", 1 << 40) + (d / "model.safetensors").read_bytes()[8:]), ["header length", "beyond the end"]),
    "unknown dtype": (lambda d: rewrite_header(d / "model.safetensors",
                                               lambda h: h["model.norm.weight"].update(dtype="Q9")),
                      ["unknown dtype 'Q9'", "model.norm.weight"]),
    "dtype size mismatch": (lambda d: rewrite_header(d / "model.safetensors",
                                                     lambda h: h["model.norm.weight"].update(dtype="F32")),
                            ["model.norm.weight", "data_offsets span"]),
}

QUANT_CASES = {
    "unsupported bits": (lambda d: edit_config(d, lambda c: c["quantization"].update(
        {"model.layers.0.mlp.up_proj": {"bits": 7, "group_size": 64}})), ["bits 7", "model.layers.0.mlp.up_proj"]),
    "unsupported group size": (lambda d: edit_config(d, lambda c: c["quantization"].update(
        {"model.layers.0.mlp.up_proj": {"bits": 4, "group_size": 48}})), ["group size 48"]),
    "unsupported mode": (lambda d: edit_config(d, lambda c: c["quantization"].update(
        {"model.layers.0.mlp.up_proj": {"mode": "fp3"}})), ["mode 'fp3'"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_model(case, base, tmp_path):
    d = copy_model(base / "qwen3_bf16", tmp_path / "m")
    breaker, expected = CASES[case]
    breaker(d)
    proc = logits(d)
    assert proc.returncode != 0, proc.stdout
    assert proc.stderr.startswith("error: "), proc.stderr
    for text in expected:
        assert text in proc.stderr, f"{case}: {text!r} not in {proc.stderr!r}"
    assert not (tmp_path / "out.safetensors").exists()


def point_index_at(d, file):
    index = json.loads((d / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.norm.weight"] = file
    (d / "model.safetensors.index.json").write_text(json.dumps(index))


# An index entry outside the model folder gets one answer, whether or not that path exists, so the
# error cannot be used to probe the file system.
@pytest.mark.parametrize("target", ["../m/model.safetensors", "../absent.safetensors", "/etc/passwd",
                                    "/absent/x.safetensors", "sub/../model.safetensors"])
def test_index_entry_outside_the_folder(target, base, tmp_path):
    d = copy_model(base / "qwen3_bf16", tmp_path / "m")
    point_index_at(d, target)
    proc = logits(d)
    assert proc.returncode != 0
    assert proc.stderr == (f"error: {d / 'model.safetensors.index.json'}: weight_map['model.norm.weight'] "
                           "must name a file inside the model folder (a plain file name)\n"), proc.stderr

@pytest.mark.parametrize("case", list(QUANT_CASES))
def test_bad_quantization(case, base, tmp_path):
    d = copy_model(base / "qwen3_q4_g64", tmp_path / "m")
    breaker, expected = QUANT_CASES[case]
    breaker(d)
    proc = logits(d)
    assert proc.returncode != 0
    for text in expected:
        assert text in proc.stderr, f"{case}: {text!r} not in {proc.stderr!r}"


@pytest.mark.parametrize("args,expected", [
    (["--tokens", "1,x"], "--tokens"),
    (["--tokens", "1,99999"], "outside the vocabulary"),
])
def test_bad_flags(args, expected, base, tmp_path):
    proc = subprocess.run([BIN, "logits", "--model", str(base / "qwen3_bf16"), "--out", str(tmp_path / "o.safetensors"),
                           *args], capture_output=True, text=True)
    assert proc.returncode != 0 and expected in proc.stderr, proc.stderr


GEMMA3_CASES = {
    "layer pattern longer than the model": (lambda c: c.update(sliding_window_pattern=6),
                                            ["config.json", "'num_hidden_layers' (4)", "'sliding_window_pattern' (6)"]),
    "zero layer pattern": (lambda c: c.update(sliding_window_pattern=0),
                           ["config.json", "'sliding_window_pattern' must be at least 1"]),
    "gemma3 without text_config": (lambda c: c.update(model_type="gemma3"), ["config.json", "'text_config'"]),
}


@pytest.mark.parametrize("case", list(GEMMA3_CASES))
def test_bad_gemma3_config(case, tmp_path):
    """Configs on which mlx-lm's gemma3_text fails inside the graph (a modulo by zero, a cache index
    out of range) are refused up front, naming the fields."""
    d = fixture_copy("gemma3_bf16", tmp_path)
    edit, expected = GEMMA3_CASES[case]
    edit_config(d, edit)
    assert_refused(logits(d), case, expected)


def _text_of(c):
    return c["text_config"]


HYBRID_CASES = {
    # qwen3_next's ModelArgs requires every linear_* field
    "qwen3_next without linear_num_key_heads": (
        "qwen3_next_dense_bf16", lambda c: c.pop("linear_num_key_heads"),
        ["config.json", "missing required key 'linear_num_key_heads'"]),
    "qwen3_next interval 0": (
        "qwen3_next_dense_bf16", lambda c: c.update(full_attention_interval=0),
        ["config.json", "'full_attention_interval' must be a positive integer"]),
    "qwen3_next value heads not a multiple of key heads": (
        "qwen3_next_dense_bf16", lambda c: c.update(linear_num_value_heads=3),
        ["config.json", "'linear_num_value_heads' (3)", "'linear_num_key_heads' (2)"]),
    "qwen3_next attention heads not a multiple of KV heads": (
        "qwen3_next_dense_bf16", lambda c: c.update(num_key_value_heads=3),
        ["config.json", "'num_attention_heads' (4)", "'num_key_value_heads' (3)"]),
    "qwen3_next mlp_only_layers not a list": (
        "qwen3_next_dense_bf16", lambda c: c.update(mlp_only_layers=3), ["config.json", "'mlp_only_layers'"]),
    "qwen3_next experts per token above experts": (
        "qwen3_next_dense_bf16", lambda c: c.update(num_experts=2, num_experts_per_tok=4, moe_intermediate_size=8,
                                                     shared_expert_intermediate_size=8),
        ["config.json", "'num_experts_per_tok' (4)", "'num_experts' (2)"]),
    # qwen3_5 reads text_config, whose fields all have defaults
    "qwen3_5 interval 0": (
        "qwen3_5_bf16", lambda c: _text_of(c).update(full_attention_interval=0),
        ["config.json: text_config", "'full_attention_interval' must be a positive integer"]),
    "qwen3_5 interval beyond the layers": (
        "qwen3_5_bf16", lambda c: _text_of(c).update(full_attention_interval=8),
        ["config.json: text_config", "'full_attention_interval' (8)", "'num_hidden_layers' (4)"]),
    "qwen3_5 conv kernel 1": (
        "qwen3_5_bf16", lambda c: _text_of(c).update(linear_conv_kernel_dim=1),
        ["'linear_conv_kernel_dim' must be at least 2"]),
    "qwen3_5 text_config not an object": (
        "qwen3_5_bf16", lambda c: c.update(text_config=[1]), ["config.json", "'text_config' must be an object"]),
    "qwen3_5 rope_parameters not an object": (
        "qwen3_5_bf16", lambda c: _text_of(c).update(rope_parameters=5), ["'rope_parameters' must be an object"]),
    # a missing linear_* field takes TextModelArgs' default (64 value heads), which the weights contradict
    "qwen3_5 without linear_num_value_heads": (
        "qwen3_5_bf16", lambda c: _text_of(c).pop("linear_num_value_heads"),
        ["linear_attn.in_proj_z.weight: expected shape"]),
    # lfm2: ModelArgs' required fields (present, though some may be null), the layer list's length
    "lfm2 without conv_L_cache": (
        "lfm2_bf16", lambda c: c.pop("conv_L_cache"), ["config.json", "missing required key 'conv_L_cache'"]),
    "lfm2 without block_ffn_dim_multiplier": (
        "lfm2_bf16", lambda c: c.pop("block_ffn_dim_multiplier"),
        ["config.json", "missing required key 'block_ffn_dim_multiplier'"]),
    "lfm2 without block_ff_dim or intermediate_size": (
        "lfm2_bf16", lambda c: c.pop("block_ff_dim"), ["config.json", "'block_ff_dim' or 'intermediate_size'"]),
    "lfm2 without full_attn_idxs or layer_types": (
        "lfm2_bf16", lambda c: c.pop("full_attn_idxs"), ["config.json", "'full_attn_idxs'", "'layer_types'"]),
    "lfm2 layer_types of the wrong length": (
        "lfm2_fp32_layer_types", lambda c: c.update(layer_types=["full_attention", "conv"]),
        ["config.json", "'layer_types' must list 4 strings", "got 2 entries"]),
    "lfm2 layer_types entry unknown": (
        "lfm2_fp32_layer_types", lambda c: c["layer_types"].__setitem__(2, "sliding_attention"),
        ["config.json", "'layer_types' entry 2", "sliding_attention"]),
    "lfm2 full_attn_idxs beyond the layers": (
        "lfm2_bf16", lambda c: c.update(full_attn_idxs=[1, 4]),
        ["config.json", "'full_attn_idxs' holds 4", "'num_hidden_layers' (4)"]),
    "lfm2 no conv layer": (
        "lfm2_bf16", lambda c: c.update(full_attn_idxs=[0, 1, 2, 3]), ["config.json", "at least one conv layer"]),
    "lfm2 conv_L_cache 1": (
        "lfm2_bf16", lambda c: c.update(conv_L_cache=1), ["config.json", "'conv_L_cache' must be at least 2"]),
}


@pytest.mark.parametrize("case", list(HYBRID_CASES))
def test_bad_hybrid_config(case, tmp_path):
    fixture, edit, expected = HYBRID_CASES[case]
    d = fixture_copy(fixture, tmp_path)
    edit_config(d, edit)
    assert_refused(logits(d), case, expected)


# Dense families on the decoder skeleton: (fixture, edit of config.json, texts the error must hold).
def _text(edit):
    return lambda c: edit(c["text_config"])


DENSE_CASES = {
    "mistral3 without text_config": ("mistral3_bf16", lambda c: c.pop("text_config"), ["config.json", "'text_config'"]),
    "mistral3 text model without hidden_size": ("mistral3_bf16", _text(lambda t: t.pop("hidden_size")),
                                                ["config.json: text_config", "'hidden_size'"]),
    "mistral3 mistral4 text model": ("mistral3_bf16", _text(lambda t: t.update(model_type="mistral4")),
                                     ["text_config.model_type", "mistral4"]),
    "ministral3 without llama_4_scaling_beta": ("ministral3_bf16",
                                                _text(lambda t: t["rope_parameters"].pop("llama_4_scaling_beta")),
                                                ["rope_parameters", "'llama_4_scaling_beta'"]),
    "ministral3 layer_types of the wrong length": ("ministral3_bf16",
                                                   _text(lambda t: t.update(layer_types=["full_attention"])),
                                                   ["text_config", "'layer_types'", "3 strings"]),
    "ministral3 without rope_parameters": ("ministral3_q4_g64", lambda c: c.pop("rope_parameters"),
                                           ["config.json", "'rope_parameters'"]),
    "smollm3 no_rope_layers of the wrong length": ("smollm3_bf16", lambda c: c.update(no_rope_layers=[1, 0]),
                                                   ["config.json", "'no_rope_layers'", "4 integers"]),
    "smollm3 zero no_rope_layer_interval": ("smollm3_bf16", lambda c: c.update(no_rope_layer_interval=0),
                                            ["config.json", "'no_rope_layer_interval'"]),
    "olmo2 without rms_norm_eps": ("olmo2_bf16", lambda c: c.pop("rms_norm_eps"), ["config.json", "'rms_norm_eps'"]),
    "olmo3 layer_types of the wrong length": ("olmo3_bf16", lambda c: c.update(layer_types=["full_attention"]), ["config.json", "'layer_types'", "4 strings"]),
    "olmo3 without sliding_window": ("olmo3_bf16", lambda c: c.pop("sliding_window"), ["config.json", "'sliding_window'"]),
    "granite without logits_scaling": ("granite_bf16", lambda c: c.pop("logits_scaling"), ["config.json", "'logits_scaling'"]),
    "minicpm without scale_depth": ("minicpm_bf16", lambda c: c.pop("scale_depth"), ["config.json", "'scale_depth'"]),
    "minicpm tied": ("minicpm_bf16", lambda c: c.update(tie_word_embeddings=True), ["config.json", "'tie_word_embeddings'"]),
    "exaone4 pattern without a global layer": ("exaone4_bf16", lambda c: c.update(sliding_window_pattern="LLL"), ["config.json", "'sliding_window_pattern'"]),
    "exaone4 without rope_scaling": ("exaone4_bf16", lambda c: c.pop("rope_scaling"), ["config.json", "'rope_scaling'"]),
    "glm4 without partial_rotary_factor": ("glm4_bf16", lambda c: c.pop("partial_rotary_factor"), ["config.json", "'partial_rotary_factor'"]),
    "ernie4_5 without head_dim": ("ernie4_5_bf16", lambda c: c.pop("head_dim"), ["config.json", "'head_dim'"]),
    "seed_oss without head_dim": ("seed_oss_bf16", lambda c: c.pop("head_dim"), ["config.json", "'head_dim'"]),
    "hunyuan_v1_dense rope_scaling without alpha": ("hunyuan_v1_dense_bf16", lambda c: c["rope_scaling"].pop("alpha"), ["config.json", "rope_scaling", "'alpha'"]),
    "internlm3 unsupported rope_type": ("internlm3_bf16", lambda c: c.update(rope_scaling={"rope_type": "yarn", "factor": 2.0}), ["config.json", "rope_scaling", "'linear' or 'dynamic'"]),
    "starcoder2 without num_key_value_heads": ("starcoder2_bf16", lambda c: c.pop("num_key_value_heads"), ["config.json", "'num_key_value_heads'"]),
    "stablelm without partial_rotary_factor": ("stablelm_bf16", lambda c: c.pop("partial_rotary_factor"), ["config.json", "'partial_rotary_factor'"]),
    "phi heads not dividing hidden_size": ("phi_bf16", lambda c: c.update(num_attention_heads=5), ["config.json", "hidden_size", "num_attention_heads"]),
    "helium without attention_bias": ("helium_bf16", lambda c: c.pop("attention_bias"), ["config.json", "'attention_bias'"]),
    "cohere2 zero sliding_window_pattern": ("cohere2_bf16", lambda c: c.update(sliding_window_pattern=0), ["config.json", "'sliding_window_pattern'"]),
    "minicpm3 without kv_lora_rank": ("minicpm3_bf16", lambda c: c.pop("kv_lora_rank"), ["config.json", "'kv_lora_rank'"]),
    "minicpm3 without num_key_value_heads": ("minicpm3_bf16", lambda c: c.pop("num_key_value_heads"), ["config.json", "'num_key_value_heads'"]),
    "minicpm3 without rope_scaling": ("minicpm3_bf16", lambda c: c.pop("rope_scaling"), ["config.json", "'rope_scaling' must be an object"]),
    "minicpm3 odd qk_rope_head_dim": ("minicpm3_bf16", lambda c: c.update(qk_rope_head_dim=15), ["config.json", "'qk_rope_head_dim' must be even"]),
}


@pytest.mark.parametrize("case", list(DENSE_CASES))
def test_bad_dense_config(case, tmp_path):
    """A missing required field or a per-layer list of the wrong length: refused before any weight is
    read, naming the file and the field."""
    fixture, edit, expected = DENSE_CASES[case]
    d = fixture_copy(fixture, tmp_path)
    edit_config(d, edit)
    assert_refused(logits(d), case, expected)


def _split_weights(d):
    """All tensors of a fixture's shards, and a function that saves them back as one file."""
    import mlx.core as mx
    arrays = {}
    for f in sorted(d.glob("model*.safetensors")):
        arrays.update(mx.load(str(f)))
        f.unlink()
    (d / "model.safetensors.index.json").unlink(missing_ok=True)
    return arrays, lambda w: mx.save_safetensors(str(d / "model.safetensors"), w, metadata={"format": "mlx"})


def _drop(d, name):
    w, save = _split_weights(d)
    save({k: v for k, v in w.items() if k != name})


def _requantize_expert(d, name, bits):
    """Expert `name` (a ...experts.N.w1 prefix) re-quantized with other bits than its siblings."""
    import mlx.core as mx
    w, save = _split_weights(d)
    dense = mx.dequantize(w[name + ".weight"], w[name + ".scales"], w[name + ".biases"], 64, 4)
    w[name + ".weight"], w[name + ".scales"], w[name + ".biases"] = mx.quantize(dense, 64, bits)
    save(w)


def _dequantize_expert(d, name):
    import mlx.core as mx
    w, save = _split_weights(d)
    w[name + ".weight"] = mx.dequantize(w.pop(name + ".weight"), w.pop(name + ".scales"), w.pop(name + ".biases"),
                                        64, 4)
    save(w)


# Mixture of experts: the expert counts, missing expert tensors, experts of mixed quantization.
MOE_CASES = {
    "more experts per token than experts": (
        "qwen3_moe_q4_g64", lambda d: edit_config(d, lambda c: c.update(num_experts_per_tok=17)),
        ["config.json", "'num_experts_per_tok' is 17", "'num_experts' (16)"]),
    "mixtral top-k beyond its experts": (
        "mixtral_q4_g64", lambda d: edit_config(d, lambda c: c.update(num_experts_per_tok=9)),
        ["config.json", "'num_experts_per_tok' is 9", "'num_local_experts' (8)"]),
    "gpt_oss top-k beyond its experts": (
        "gpt_oss_mxfp4", lambda d: edit_config(d, lambda c: c.update(num_experts_per_tok=9)),
        ["config.json", "'num_experts_per_tok' is 9", "'num_local_experts' (8)"]),
    "stacked expert tensor missing": (
        "qwen3_moe_q4_g64", lambda d: _drop(d, "model.layers.2.mlp.switch_mlp.down_proj.weight"),
        ["missing parameters: model.layers.2.mlp.switch_mlp.down_proj.weight"]),
    "one expert's tensor missing": (
        "qwen3_moe_per_expert", lambda d: _drop(d, "model.layers.0.mlp.experts.5.gate_proj.weight"),
        ["model.layers.0.mlp.experts.5.gate_proj.weight is missing", "each of the 16 experts"]),
    "one expert with other bits": (
        "mixtral_per_expert_q4_ties", lambda d: _requantize_expert(d, "model.layers.1.block_sparse_moe.experts.3.w1", 8),
        ["model.layers.1.block_sparse_moe.experts.3.w1.weight has shape (64, 32)",
         "experts.0.w1.weight has shape (64, 16)", "the same quantization"]),
    "one expert not quantized": (
        "mixtral_per_expert_q4_ties", lambda d: _dequantize_expert(d, "model.layers.0.block_sparse_moe.experts.2.w3"),
        ["model.layers.0.block_sparse_moe.experts.2.w3.weight has shape (64, 128) and dtype bfloat16",
         "experts.0.w3.weight has shape (64, 16) and dtype uint32"]),
    # phixtral
    "phixtral top-k beyond its experts": (
        "phixtral_q4_g64", lambda d: edit_config(d, lambda c: c.update(num_experts_per_tok=5)),
        ["config.json", "'num_experts_per_tok' is 5", "'num_local_experts' (4)"]),
    "phixtral heads not dividing model_dim": (
        "phixtral_fp32", lambda d: edit_config(d, lambda c: c.update(num_heads=5)),
        ["config.json", "model_dim", "num_heads"]),
    "phixtral rotary_dim beyond the head": (
        "phixtral_fp32", lambda d: edit_config(d, lambda c: c.update(rotary_dim=64)),
        ["config.json", "rotary_dim", "32"]),
    # nvfp4 tensor scales of switch layers
    "global scale on affine experts": (
        "mixtral_q4_g64", lambda d: edit_config(d, lambda c: c["quantization"].update({
            "model.layers.0.block_sparse_moe.switch_mlp.up_proj":
                {"group_size": 64, "bits": 4, "mode": "affine", "global_scale": True}})),
        ["model.layers.0.block_sparse_moe.switch_mlp.up_proj has a global scale", "needs 'nvfp4' mode",
         "got 'affine'"]),
    "global scale tensor missing": (
        "mixtral_nvfp4_global_scale",
        lambda d: _drop(d, "model.layers.1.block_sparse_moe.switch_mlp.down_proj.global_scale"),
        ["missing parameters: model.layers.1.block_sparse_moe.switch_mlp.down_proj.global_scale"]),
    "phixtral one expert's bias missing": (
        "phixtral_per_expert_q4", lambda d: _drop(d, "transformer.h.1.moe.mlp.3.fc2.bias"),
        ["transformer.h.1.moe.mlp.3.fc2.bias is missing", "each of the 8 experts"]),
}


@pytest.mark.parametrize("case", list(MOE_CASES))
def test_bad_moe_model(case, tmp_path):
    fixture, breaker, expected = MOE_CASES[case]
    d = fixture_copy(fixture, tmp_path)
    breaker(d)
    assert_refused(logits(d), case, expected)
    assert not (tmp_path / "out.safetensors").exists()


def test_conv_weight_of_the_wrong_shape(tmp_path):
    """A conv1d weight whose kernel disagrees with linear_conv_kernel_dim is named with both shapes."""
    d = fixture_copy("qwen3_next_dense_bf16", tmp_path)
    w = dict(weights_of(d))
    name = "model.layers.0.linear_attn.conv1d.weight"
    w[name] = w[name][:, :3, :]
    save_weights(d, w)
    proc = logits(d)
    assert proc.returncode == 1 and name in proc.stderr and "(256, 4, 1)" in proc.stderr, proc.stderr


SLIDING, FULL = "sliding_attention", "full_attention"
GEMMA4_CASES = {
    "layer_types shorter than the model": (lambda c: c.update(layer_types=[SLIDING, FULL]),
                                           ["config.json", "'layer_types' lists 2 layers", "'num_hidden_layers' is 6"]),
    "layer_types longer than the model": (lambda c: c.update(layer_types=[SLIDING, SLIDING, FULL] * 3),
                                          ["config.json", "'layer_types' lists 9 layers"]),
    "unknown layer type": (lambda c: c.update(layer_types=[SLIDING, "chunked_attention", FULL] * 2),
                           ["config.json", "'layer_types' entries", "\"chunked_attention\""]),
    "layer_types not a list": (lambda c: c.update(layer_types="sliding"), ["config.json", "'layer_types' must be a list"]),
    "every layer KV-shared": (lambda c: c.update(num_kv_shared_layers=6),
                              ["config.json", "'num_kv_shared_layers' (6)", "less than 'num_hidden_layers' (6)"]),
    "a shared layer with nothing to share": (lambda c: c.update(layer_types=[SLIDING] * 4 + [FULL, FULL]),
                                             ["config.json", "layer 4 is KV-shared", "\"full_attention\""]),
    "more experts per token than experts": (
        lambda c: c.update(enable_moe_block=True, num_experts=4, top_k_experts=5, moe_intermediate_size=64),
        ["config.json", "'top_k_experts' is 5", "at most 'num_experts' (4)"]),
    "MoE block without num_experts": (lambda c: c.update(enable_moe_block=True, top_k_experts=2, moe_intermediate_size=64),
                                      ["config.json", "'num_experts' is missing or null", "'enable_moe_block'"]),
    "MoE block with a null expert size": (
        lambda c: c.update(enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=None),
        ["config.json", "'moe_intermediate_size' is missing or null"]),
    "MoE block with no experts per token": (
        lambda c: c.update(enable_moe_block=True, num_experts=4, top_k_experts=0, moe_intermediate_size=64),
        ["config.json", "'top_k_experts' must be a positive integer, got 0"]),
    "wrong field type": (lambda c: c.update(global_head_dim="wide"), ["config.json", "global_head_dim"]),
    "rope_parameters not an object": (lambda c: c.update(rope_parameters=[1, 2]),
                                      ["config.json", "'rope_parameters' must be an object"]),
    "unknown rope type": (lambda c: c.update(rope_parameters={FULL: {"rope_type": "spiral"}}),
                          ["config.json", "rope_parameters.full_attention", "unsupported RoPE type 'spiral'"]),
    "gemma4 with a text_config that is not an object": (lambda c: c.update(model_type="gemma4", text_config=[1]),
                                                        ["config.json", "'text_config' must be an object"]),
    "gemma4 with a bad text model": (lambda c: c.update(model_type="gemma4", text_config={**c, "layer_types": [FULL]}),
                                     ["config.json: text_config", "'layer_types' lists 1 layers"]),
}


@pytest.mark.parametrize("case", list(GEMMA4_CASES))
def test_bad_gemma4_config(case, tmp_path):
    """Gemma 4 configs mlx-lm fails on inside the graph (an index past layer_types, a KV-shared layer
    with no layer to share from, an MoE block without its sizes or with more experts per token than
    experts) are refused before any weight is read, naming the field. (gemma4_text's fields all have
    defaults: none is required; the MoE block's become required once it is enabled.)"""
    d = fixture_copy("gemma4_bf16", tmp_path)
    edit, expected = GEMMA4_CASES[case]
    edit_config(d, edit)
    assert_refused(logits(d), case, expected)
    assert not (tmp_path / "out.safetensors").exists()


GEMMA2_CASES = {
    "missing head_dim": ("gemma2_bf16", lambda c: c.pop("head_dim"), ["config.json", "missing required key 'head_dim'"]),
    "missing rms_norm_eps": ("gemma_bf16", lambda c: c.pop("rms_norm_eps"),
                             ["config.json", "missing required key 'rms_norm_eps'"]),
    "heads not a multiple of the KV heads": ("gemma2_bf16", lambda c: c.update(num_key_value_heads=3),
                                             ["config.json", "'num_attention_heads' (4)", "'num_key_value_heads' (3)"]),
    "null attention softcap": ("gemma2_bf16", lambda c: c.update(attn_logit_softcapping=None),
                               ["config.json", "'attn_logit_softcapping' must be a number"]),
    "wrong field type": ("gemma_bf16", lambda c: c.update(rope_theta="fast"), ["config.json", "rope_theta"]),
}


@pytest.mark.parametrize("case", list(GEMMA2_CASES))
def test_bad_gemma2_and_gemma_config(case, tmp_path):
    """gemma2.py's and gemma.py's fields without defaults are required; configs on which gemma2's
    grouped attention or its softcap fails in mlx-lm's graph are refused, naming the field."""
    fixture, edit, expected = GEMMA2_CASES[case]
    d = fixture_copy(fixture, tmp_path)
    edit_config(d, edit)
    assert_refused(logits(d), case, expected)
    assert not (tmp_path / "out.safetensors").exists()


def test_gemma2_refuses_a_quantized_kv_cache(tmp_path):
    """mlx-lm's gemma2.py multiplies the quantized cache's tuples as arrays and fails; mlxrt says why."""
    proc = logits(fixture_dir("gemma2_bf16"), "--kv-bits", "8", "--kv-group-size", "32", "--quantized-kv-start", "0",
                  "--chunk-size", "1")
    assert proc.returncode == 1 and "--kv-bits" in proc.stderr and "gemma2" in proc.stderr, proc.stderr


def _gemma3n_text(fn):
    return lambda c: fn(c["text_config"])


GEMMA3N_CASES = {
    "without text_config": (lambda c: c.pop("text_config"), ["config.json", "'text_config' must be an object"]),
    "a required key missing": (_gemma3n_text(lambda t: t.pop("altup_num_inputs")),
                               ["config.json: text_config", "missing required key 'altup_num_inputs'"]),
    "a nullable key missing": (_gemma3n_text(lambda t: t.pop("final_logit_softcapping")),
                               ["config.json: text_config", "missing required key 'final_logit_softcapping'"]),
    "layer_types of the wrong length": (_gemma3n_text(lambda t: t.update(layer_types=[SLIDING, FULL])),
                                        ["config.json: text_config", "'layer_types' lists 2 layers",
                                         "'num_hidden_layers' is 6"]),
    "unknown layer type": (_gemma3n_text(lambda t: t.update(layer_types=[SLIDING, "chunked_attention", FULL] * 2)),
                           ["config.json: text_config", "'layer_types' entries", "\"chunked_attention\""]),
    "activation_sparsity_pattern too short": (_gemma3n_text(lambda t: t.update(activation_sparsity_pattern=[0.9])),
                                              ["config.json: text_config", "'activation_sparsity_pattern' lists 1"]),
    "intermediate_size list too short": (_gemma3n_text(lambda t: t.update(intermediate_size=[256, 256])),
                                         ["config.json: text_config", "'intermediate_size' lists 2 sizes"]),
    "no full layer with a cache of its own": (
        _gemma3n_text(lambda t: t.update(layer_types=[SLIDING] * 4 + [FULL, FULL])),
        ["config.json: text_config", "'layer_types' has no \"full_attention\" layer among the first 4"]),
    "active AltUp input out of range": (_gemma3n_text(lambda t: t.update(altup_active_idx=4)),
                                        ["config.json: text_config", "'altup_active_idx' (4)", "'altup_num_inputs' (4)"]),
    "heads not a multiple of the KV heads": (_gemma3n_text(lambda t: t.update(num_key_value_heads=3)),
                                             ["config.json: text_config", "'num_attention_heads' (4)",
                                              "'num_key_value_heads' (3)"]),
    "every layer KV-shared": (_gemma3n_text(lambda t: t.update(num_kv_shared_layers=6)),
                              ["config.json: text_config", "'num_kv_shared_layers' (6)"]),
    "wrong field type": (_gemma3n_text(lambda t: t.update(laurel_rank="wide")), ["config.json: text_config", "laurel_rank"]),
}


@pytest.mark.parametrize("case", list(GEMMA3N_CASES))
def test_bad_gemma3n_config(case, tmp_path):
    """gemma3n's TextConfig has no defaults: a missing key is named (a null one only where the graph
    tests for None); layer lists of the wrong length, and configs mlx-lm's constructor or graph fails
    on, are refused before any weight is read, naming the field."""
    d = fixture_copy("gemma3n_bf16", tmp_path)
    edit, expected = GEMMA3N_CASES[case]
    edit_config(d, edit)
    assert_refused(logits(d), case, expected)
    assert not (tmp_path / "out.safetensors").exists()


def test_output_files_are_written_atomically(base, tmp_path):
    """--out (like --logprobs-file and --losses-file) goes under a partial name first and is renamed
    into place: a killed run's leftover is cleared by the next run, nothing partial is left, and a
    place that cannot be written is an error naming the flag and the path."""
    out = tmp_path / "logits.safetensors"
    stale = tmp_path / ".logits.safetensors.partial-999999999.safetensors"  # no such process
    stale.write_bytes(b"half a file")
    proc = subprocess.run([BIN, "logits", "--model", str(base / "qwen3_bf16"), "--tokens", "1,2,3", "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["logits.safetensors"]
    missing = tmp_path / "no-such-dir" / "x.safetensors"
    proc = subprocess.run([BIN, "logits", "--model", str(base / "qwen3_bf16"), "--tokens", "1,2,3", "--out",
                           str(missing)], capture_output=True, text=True)
    assert proc.returncode != 0 and f"--out {missing}: cannot be written" in proc.stderr, proc.stderr
