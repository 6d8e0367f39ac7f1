"""`mlxrt convert --hf-path` against mlx_lm.convert on the same input: the output directories are
byte-identical (every safetensors file, the index, config.json, the model card, copied files) for
every family, each quantization mode, the mixed recipes, the dtype cast and dequantization; the
tokenizer files are copied as they are (mlx_lm.convert re-serialises them through transformers,
so those are compared by content: the source's bytes). A converted model's logits equal mlx-lm's."""
import contextlib
import filecmp
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import pytest

from mlx_lm_side_by_side import BIN, ROOT, assert_same_directory, source_copy  # noqa: E402
from hf_cache_layout import write_snapshot  # noqa: E402

FAMILIES = [
    "cohere2_bf16", "cohere2_fp16", "ernie4_5_bf16", "gemma2_bf16", "gemma3_bf16", "gemma3_fp16_untied",
    "gemma3_multimodal", "gemma3n_bf16", "gemma4_bf16", "gemma4_moe_fp32", "gemma4_multimodal", "gemma_bf16",
    "glm4_bf16", "gpt_oss_bf16", "gpt_oss_openai_mxfp4", "granite_bf16", "helium_bf16", "hunyuan_v1_dense_bf16",
    "lfm2_bf16", "llama_bf16", "llama_bias", "minicpm3_bf16", "minicpm_bf16", "ministral3_bf16", "mistral3_bf16",
    "mistral_bf16", "mixtral_fp32", "olmo2_bf16", "olmo3_bf16", "olmoe_bf16", "phi3_bf16", "phi_bf16",
    "phixtral_fp32", "qwen2_bf16", "qwen2_moe_bf16", "qwen2_moe_fp32_per_expert", "qwen3_5_bf16", "qwen3_bf16",
    "qwen3_fp16_untied", "qwen3_moe_bf16", "qwen3_moe_per_expert", "qwen3_next_bf16", "qwen3_next_dense_bf16",
    "seed_oss_bf16", "smollm3_bf16", "stablelm_bf16", "starcoder2_bf16",
]
QUANT_MODELS = ["qwen3_bf16", "qwen3_moe_bf16", "gpt_oss_bf16", "qwen3_5_bf16", "qwen3_next_bf16", "granite_bf16",
                "gemma4_moe_fp32", "llama_bias"]
QUANT_OPTIONS = [
    ["-q"], ["-q", "--q-bits", "8", "--q-group-size", "32"], ["-q", "--q-bits", "3", "--q-group-size", "128"],
    ["-q", "--q-mode", "mxfp4"], ["-q", "--q-mode", "nvfp4"], ["-q", "--q-mode", "mxfp8"],
    ["-q", "--quant-predicate", "mixed_3_6"], ["-q", "--quant-predicate", "mixed_4_6", "--q-group-size", "32"],
    ["-q", "--q-bits", "6", "--dtype", "float32"], ["--dtype", "float16"],
]
QUANTIZED = ["qwen3_5_moe_q4_g64", "qwen3_q4_g64", "qwen3_mxfp4", "qwen3_nvfp4", "qwen3_mxfp8", "qwen3_mixed", "gpt_oss_mxfp4",
             "qwen3_moe_q4_g64", "mixtral_per_expert_q4_ties", "gemma3n_q4_g64", "qwen3_5_q4_g64",
             "llama_q8_g128_sharded"]


def mlx_lm_options(args):
    out, i = {}, 0
    names = {"--q-bits": ("q_bits", int), "--q-group-size": ("q_group_size", int), "--q-mode": ("q_mode", str),
             "--quant-predicate": ("quant_predicate", str), "--dtype": ("dtype", str)}
    while i < len(args):
        if args[i] == "-q":
            out["quantize"] = True
        elif args[i] == "-d":
            out["dequantize"] = True
        else:
            key, kind = names[args[i]]
            out[key] = kind(args[i + 1])
            i += 1
        i += 1
    return out


def mlx_lm_convert(src, dst, args):
    from mlx_lm.convert import convert
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        convert(str(src), str(dst), **mlx_lm_options(args))
    return printed.getvalue()


def mlxrt_convert(src, dst, args, check=True):
    proc = subprocess.run([BIN, "convert", "--hf-path", str(src), "--mlx-path", str(dst), "--quiet", *args],
                          capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def check(name, args, tmp_path, source=None):
    src = source or source_copy(name, tmp_path)
    theirs, ours = tmp_path / "mlx_lm", tmp_path / "mlxrt"
    printed = mlx_lm_convert(src, theirs, args)
    proc = mlxrt_convert(src, ours, args)
    assert_same_directory(src, ours, theirs)
    # The "[INFO]" lines; the bits-per-weight figure may differ in its last digit for models whose
    # RoPE keeps frequency tables (mlx-lm counts those private arrays in the model's bytes).
    strip_bpw = lambda s: [l for l in s.splitlines() if "bits per weight" not in l]  # noqa: E731
    assert strip_bpw(proc.stdout) == strip_bpw(printed)
    return ours


@pytest.mark.parametrize("name", FAMILIES)
def test_family_converts_byte_identical(name, tmp_path):
    check(name, [], tmp_path)


@pytest.mark.parametrize("name", ["exaone4_bf16", "internlm3_bf16"])
def test_family_mlx_lm_cannot_convert_here_matches_its_save(name, tmp_path):
    """mlx_lm.convert stops on these two fixtures here (exaone4's loader and transformers'
    InternLM3 config check); a bf16 checkpoint that mlx-lm saved converts to the same bytes, so
    mlxrt's output is compared with the fixture as mlx-lm saved it."""
    src = source_copy(name, tmp_path)
    ours = tmp_path / "mlxrt"
    mlxrt_convert(src, ours, [])
    for f in ("model.safetensors", "model.safetensors.index.json"):
        assert (ours / f).read_bytes() == (src / f).read_bytes(), f


@pytest.mark.parametrize("args", QUANT_OPTIONS, ids=lambda a: "_".join(x.strip("-") for x in a))
@pytest.mark.parametrize("name", QUANT_MODELS)
def test_quantized_byte_identical(name, args, tmp_path):
    check(name, args, tmp_path)


@pytest.mark.parametrize("name", QUANTIZED)
def test_dequantize_byte_identical(name, tmp_path):
    check(name, ["-d"], tmp_path)


@pytest.mark.parametrize("name", ["qwen3_q4_g64", "qwen3_mixed", "gpt_oss_mxfp4"])
def test_quantized_input_requantized_byte_identical(name, tmp_path):
    """A checkpoint already quantized: its quantized layers stay, the others are quantized and
    recorded per layer (quantize_model's fine-grained config)."""
    check(name, ["-q", "--q-bits", "8"], tmp_path)


def hf_layout(tmp_path):
    """llama_tied_fp16 laid out as a Hugging Face repository: a saved lm_head beside the tied
    embedding and rotary inv_freq buffers (both dropped by sanitize), float16 weights with
    torch_dtype bfloat16, two shards with their index, the eos ids in generation_config.json,
    _name_or_path and a vision_config, a custom .py file and vocab/merges files."""
    src = source_copy("llama_tied_fp16", tmp_path)
    weights = mx.load(str(src / "model.safetensors"))
    weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    for i in range(2):
        weights[f"model.layers.{i}.self_attn.rotary_emb.inv_freq"] = mx.arange(16, dtype=mx.float32)
    for f in src.glob("model*.safetensors*"):
        f.unlink()
    names = sorted(weights)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    for file, keys in shards.items():
        mx.save_safetensors(str(src / file), {k: weights[k] for k in keys}, metadata={"format": "pt"})
    (src / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 0}, "weight_map": {k: f for f, ks in shards.items() for k in ks}}))
    config = json.loads((src / "config.json").read_text())
    config.update({"torch_dtype": "bfloat16", "_name_or_path": "org/model", "vision_config": {"depth": 1},
                   "architectures": ["LlamaForCausalLM"], "initializer_range": 0.02, "rope_scaling": None,
                   "note": "caf\u00e9 \u2713"})
    (src / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
    (src / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": [2, 7]}))
    (src / "modeling_extra.py").write_text("# a repository's own code, copied as mlx_lm.convert copies it\n")
    (src / "vocab.json").write_text("{}")
    return src


def test_hugging_face_layout_byte_identical(tmp_path):
    src = hf_layout(tmp_path)
    ours = check("llama_tied_fp16", [], tmp_path, source=src)
    config = json.loads((ours / "config.json").read_text())
    assert config["eos_token_id"] == [2, 7] and "vision_config" not in config and "_name_or_path" not in config
    assert (ours / "modeling_extra.py").exists() and (ours / "vocab.json").exists()


def test_hugging_face_layout_quantized_byte_identical(tmp_path):
    check("llama_tied_fp16", ["-q", "--quant-predicate", "mixed_3_4"], tmp_path, source=hf_layout(tmp_path))


def test_small_shards_split_as_mlx_lm(tmp_path, monkeypatch):
    """A model over the shard limit is split where make_shards splits it (the limit lowered to
    show it: the mlxrt side takes MLXRT_CONVERT_SHARD_BYTES, mlx-lm's MAX_FILE_SIZE_GB is patched)."""
    import mlx_lm.utils as lm_utils
    src = source_copy("qwen3_fp32", tmp_path)
    real = lm_utils.make_shards
    monkeypatch.setattr(lm_utils, "make_shards", lambda w, max_file_size_gb=0: real_split(w))

    def real_split(weights):
        shards, size = [], 0
        for k, v in weights.items():
            if not shards or size + v.nbytes > 600_000:
                shards.append({})
                size = 0
            shards[-1][k] = v
            size += v.nbytes
        return shards
    assert real is not None
    theirs, ours = tmp_path / "mlx_lm", tmp_path / "mlxrt"
    mlx_lm_convert(src, theirs, [])
    proc = subprocess.run([BIN, "convert", "--hf-path", str(src), "--mlx-path", str(ours), "--quiet"],
                          capture_output=True, text=True, env={**os.environ, "MLXRT_CONVERT_SHARD_BYTES": "600000"})
    assert proc.returncode == 0, proc.stderr
    assert len(list(theirs.glob("model-*.safetensors"))) > 1
    assert_same_directory(src, ours, theirs)


def test_hf_cache_id(tmp_path):
    """org/name[@revision] from the local cache (laid out by huggingface_hub's own code)."""
    src = source_copy("qwen3_bf16", tmp_path)
    cache = tmp_path / "hub"
    write_snapshot(cache, "org/tiny-qwen3", src, "0123456789abcdef0123456789abcdef01234567", revisions=["main"])
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "out"
    proc = subprocess.run([BIN, "convert", "--hf-path", "org/tiny-qwen3", "--mlx-path", str(out), "-q", "--quiet"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    theirs = tmp_path / "theirs"
    mlx_lm_convert(src, theirs, ["-q"])
    for f in ("model.safetensors", "model.safetensors.index.json", "config.json"):
        assert (out / f).read_bytes() == (theirs / f).read_bytes(), f
    assert "base_model: org/tiny-qwen3\n" in (out / "README.md").read_text()
    missing = subprocess.run([BIN, "convert", "--hf-path", "org/absent", "--mlx-path", str(tmp_path / "x")],
                             capture_output=True, text=True, env=env)
    assert missing.returncode != 0 and "huggingface-cli download org/absent" in missing.stderr, missing.stderr


def test_converted_model_logits_equal_mlx_lm(tmp_path):
    import oracle
    src = source_copy("qwen3_moe_bf16", tmp_path)
    ours = tmp_path / "q"
    mlxrt_convert(src, ours, ["-q", "--dtype", "float32"])
    tokens = [1, 17, 300, 42, 5, 511, 77, 8]
    model, _ = oracle.load(ours)
    ref = oracle.full_logits(model, tokens)
    out = tmp_path / "logits.safetensors"
    proc = subprocess.run([BIN, "logits", "--model", str(ours), "--tokens", ",".join(map(str, tokens)), "--out",
                           str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert oracle.raw_bytes(mx.load(str(out))["logits"]) == oracle.raw_bytes(ref)


@pytest.mark.parametrize("args,message", [
    (["-q", "-d"], "choose either -q/--quantize or -d/--dequantize"),
    (["--trust-remote-code"], "runs no Python code"),
    (["--upload-repo", "me/model"], "huggingface-cli upload me/model"),
    (["-q", "--q-mode", "mxfp4", "--quant-predicate", "mixed_3_6"], "only support 'affine'"),
    (["-q", "--q-bits", "7"], "bits"),
    (["--q-mode", "int4"], "--q-mode"),
    (["--dtype", "float64"], "--dtype"),
])
def test_bad_options_name_the_flag(args, message, tmp_path):
    src = source_copy("qwen3_bf16", tmp_path)
    proc = mlxrt_convert(src, tmp_path / "out", args, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_existing_output_and_unsupported_models_refused(tmp_path):
    src = source_copy("qwen3_bf16", tmp_path)
    (tmp_path / "exists").mkdir()
    proc = mlxrt_convert(src, tmp_path / "exists", [], check=False)
    assert proc.returncode != 0 and "already exists" in proc.stderr
    proc = mlxrt_convert(source_copy("lfm2_bf16", tmp_path), tmp_path / "o", ["-q", "--quant-predicate", "mixed_2_6"],
                         check=False)
    assert proc.returncode != 0 and "no down_proj" in proc.stderr and not (tmp_path / "o").exists()
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**config, "model_type": "made_up"}))
    proc = mlxrt_convert(src, tmp_path / "o2", [], check=False)
    assert proc.returncode != 0 and "made_up" in proc.stderr
    (src / "config.json").write_text(json.dumps({**config, "model_file": "custom.py"}))
    proc = mlxrt_convert(src, tmp_path / "o3", [], check=False)
    assert proc.returncode != 0 and "custom.py" in proc.stderr


def test_parameter_order_table_is_current():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_parameter_order.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + proc.stdout
