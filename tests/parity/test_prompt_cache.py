"""Prompt-cache files: `mlxrt cache_prompt` writes what `mlx_lm.cache_prompt` writes (same tensors,
same metadata), mlx-lm's load_prompt_cache reads ours and we read mlx-lm's, and continuing from
either gives byte-equal logits. Corrupt or mismatched files fail with a clear error."""
import sys

import mlx.core as mx
import pytest
from mlx_lm import cache_prompt as mlx_cache_prompt
from mlx_lm.models.cache import load_prompt_cache

import kv_oracle
import oracle
from conftest import run_mlxrt

PROMPT = "the cache " + " ".join(f"w{i}" for i in range(46)) + " hello world"
CONTINUATION = [7, 20, 33, 9, 110, 3, 64, 12, 5, 90]

SCENARIOS = {
    "kv": ("qwen3_bf16", True, {"eos_token": "<|end|>"}),  # recorded in the metadata's tokenizer_config
    "rotating": ("qwen3_bf16", True, {"max_kv_size": 16}),
    # head_dim 128: MLX's CUDA backend quantizes the KV cache only from there up
    "quantized": ("qwen3_hd128", True, {"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 4}),
    "swa_plain": ("llama_swa", False, {}),
    "gemma3": ("gemma3_bf16", False, {}),  # KVCache and RotatingKVCache layers, its own make_cache
    # ArraysCache layers (conv and recurrent state) beside KVCache ones
    "hybrid": ("qwen3_5_bf16", False, {}),
    "hybrid_moe": ("qwen3_5_moe_q4_g64", False, {}),
    "hybrid_quantized": ("qwen3_5_hd256_gqa", False, {"kv_bits": 8, "kv_group_size": 64, "quantized_kv_start": 4}),
    # mixture of experts: the 50-token prompt takes the sorted expert path, the continuation the other
    "moe": ("qwen3_moe_q4_g64", True, {}),
    "moe_sliding": ("gpt_oss_mxfp4", False, {}),  # sinks, RotatingKVCache and KVCache layers
    "gemma4": ("gemma4_bf16", False, {}),  # caches for the 4 layers that are not KV-shared (of 6)
    "gemma4_moe": ("gemma4_moe_fp32", False, {}),  # the MoE block: the prompt takes the sorted expert path
    "gemma3n": ("gemma3n_bf16", False, {}),  # caches for the 4 layers that are not KV-shared (of 6)
    # lfm2: conv state (ArraysCache of one slot) beside KVCache layers; a conv layer first, or attention
    "lfm2": ("lfm2_bf16", False, {}),
    "lfm2_attention_first": ("lfm2_fp32_layer_types", False, {}),
    # minicpm3: keys and values of different head sizes (48 and 32), rotating
    "mla_rotating": ("minicpm3_bf16", False, {"max_kv_size": 16}),
}


def flags(options):
    out = []
    for key, value in options.items():
        out += ["--" + key.replace("_", "-"), str(value)]
    return out


def mlx_lm_cache_prompt(model_dir, out, options, monkeypatch):
    argv = ["mlx_lm.cache_prompt", "--model", str(model_dir), "--prompt-cache-file", str(out),
            "--prompt", PROMPT, *flags(options)]
    monkeypatch.setattr(sys, "argv", argv)
    mlx_cache_prompt.main()


@pytest.fixture(scope="module")
def models(fixtures_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    made = {name: kv_oracle.model_with_tokenizer(fixtures_dir / name, root / f"{name}_{chat}", chat)
            for name, chat in {("qwen3_bf16", True), ("llama_swa", False), ("qwen3_mha_hd64", True),
                               ("qwen3_hd128", True), ("gemma3_bf16", False), ("qwen3_moe_q4_g64", True),
                               ("gpt_oss_mxfp4", False), ("gemma4_bf16", False),
                               ("gemma4_moe_fp32", False), ("gemma3n_bf16", False), ("lfm2_bf16", False),
                               ("lfm2_fp32_layer_types", False), ("minicpm3_bf16", False)}}
    # qwen3_5: transformers replaces the tokenizer's pipeline by Qwen3.5's; a byte-level one survives it
    for name in ("qwen3_5_bf16", "qwen3_5_hd256_gqa", "qwen3_5_moe_q4_g64"):
        made[name] = kv_oracle.model_with_byte_tokenizer(fixtures_dir / name, root / f"{name}_bytes")
    return made


def assert_same_file_contents(ours, theirs):
    a, a_meta = mx.load(str(ours), return_metadata=True)
    b, b_meta = mx.load(str(theirs), return_metadata=True)
    assert a_meta == b_meta
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        assert oracle.raw_bytes(a[key]) == oracle.raw_bytes(b[key]), key


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_cache_prompt_interchangeable(scenario, models, tmp_path, monkeypatch):
    name, _, options = SCENARIOS[scenario]
    model_dir = models[name]
    ours, theirs = tmp_path / "ours.safetensors", tmp_path / "theirs.safetensors"
    proc = run_mlxrt("cache_prompt", "--model", model_dir, "--prompt-cache-file", ours, "--prompt", PROMPT,
                     *flags(options))
    assert "Saving..." in proc.stdout and "Peak memory:" in proc.stdout
    mlx_lm_cache_prompt(model_dir, theirs, options, monkeypatch)
    assert_same_file_contents(ours, theirs)

    # Continue from mlx-lm's file with mlxrt, and from ours with mlx-lm: the same logits.
    model, _ = oracle.load(model_dir)
    kv = {k: v for k, v in options.items() if k.startswith(("kv_", "quantized_"))}
    ref = kv_oracle.cached_logits(model, CONTINUATION, 1, cache=load_prompt_cache(str(ours)), **kv)
    out = tmp_path / "logits.safetensors"
    run_mlxrt("logits", "--model", model_dir, "--tokens", ",".join(map(str, CONTINUATION)), "--out", out,
              "--incremental", "--prompt-cache-file", theirs, *flags(kv))
    assert oracle.raw_bytes(mx.load(str(out))["logits"]) == oracle.raw_bytes(ref)


def test_cache_prompt_reads_stdin(models, tmp_path):
    import subprocess
    from conftest import BIN
    model_dir = models["qwen3_bf16"]
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    run_mlxrt("cache_prompt", "--model", model_dir, "--prompt-cache-file", a, "--prompt", PROMPT)
    subprocess.run([BIN, "cache_prompt", "--model", str(model_dir), "--prompt-cache-file", str(b), "--prompt", "-"],
                   input=PROMPT, text=True, check=True, capture_output=True)
    assert_same_file_contents(a, b)


@pytest.fixture(scope="module")
def saved(models, tmp_path_factory):
    root = tmp_path_factory.mktemp("saved")
    files = {}
    for name in ("qwen3_bf16", "llama_swa", "qwen3_5_bf16"):
        files[name] = root / f"{name}.safetensors"
        run_mlxrt("cache_prompt", "--model", models[name], "--prompt-cache-file", files[name], "--prompt", PROMPT)
    return files


def rewrite(src, dst, edit):
    arrays, meta = mx.load(str(src), return_metadata=True)
    edit(arrays, meta)
    mx.save_safetensors(str(dst), arrays, meta)
    return dst


def bad_files(saved, models, tmp_path):
    good = saved["qwen3_bf16"]
    raw = good.read_bytes()
    (tmp_path / "truncated.safetensors").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "garbage.safetensors").write_bytes(b"\x00\x01not a safetensors file at all")
    return {
        "wrong_layer_count": (models["qwen3_bf16"], saved["llama_swa"], "has 3 layers, the model has 2"),
        "wrong_model_shapes": (models["qwen3_mha_hd64"], good, "KV heads of size 32/32, the model uses 2 of size 64"),
        "truncated": (models["qwen3_bf16"], tmp_path / "truncated.safetensors", "truncated.safetensors"),
        "garbage": (models["qwen3_bf16"], tmp_path / "garbage.safetensors", "garbage.safetensors"),
        "weights_file": (models["qwen3_bf16"], models["qwen3_bf16"] / "model.safetensors",
                         "not a prompt-cache file"),
        "missing": (models["qwen3_bf16"], tmp_path / "absent.safetensors", "absent.safetensors"),
        "unknown_class": (models["qwen3_bf16"], rewrite(good, tmp_path / "cls.safetensors",
                          lambda a, m: m.update({"1.0": "ChunkedKVCache"})), "\"ChunkedKVCache\" is not supported"),
        # a KVCache's state read as an ArraysCache: no slot tensors where its state would be
        "arrays_without_slots": (models["qwen3_bf16"], rewrite(good, tmp_path / "arr.safetensors",
                                 lambda a, m: m.update({"1.0": "ArraysCache"})), "ArraysCache without slots"),
        # a hybrid model's cache on another hybrid model with other state sizes
        "wrong_state_shapes": (models["qwen3_5_hd256_gqa"], saved["qwen3_5_bf16"],
                               "layer 0 state array 0 has shape [1, 3, 256], the model keeps [1, 3, 768]"),
        "missing_tensor": (models["qwen3_bf16"], rewrite(good, tmp_path / "miss.safetensors",
                           lambda a, m: a.pop("1.1")), "missing tensor \"1.1\""),
        "offset_past_end": (models["qwen3_bf16"], rewrite(good, tmp_path / "off.safetensors",
                            lambda a, m: a.update({"0.2": mx.array(9999)})), "offset 9999 exceeds"),
        "stray_tensor": (models["qwen3_bf16"], rewrite(good, tmp_path / "stray.safetensors",
                         lambda a, m: a.update({"7.0": mx.zeros((2,))})), "\"7.0\" belongs to no layer"),
    }


def test_bad_prompt_cache_files(saved, models, tmp_path):
    for case, (model_dir, cache_file, needle) in bad_files(saved, models, tmp_path).items():
        proc = run_mlxrt("logits", "--model", model_dir, "--tokens", "5,6", "--out", tmp_path / "x.safetensors",
                         "--prompt-cache-file", cache_file, check=False)
        assert proc.returncode == 1, case
        assert proc.stderr.startswith("error: ") and needle in proc.stderr, (case, proc.stderr)


def test_cache_prompt_checks_its_adapter(models, tmp_path):
    """--adapter-path loads an mlx_lm.lora adapter (tests/parity/test_adapters.py); a directory without
    adapter_config.json is refused naming it."""
    proc = run_mlxrt("cache_prompt", "--model", models["qwen3_bf16"], "--prompt-cache-file", tmp_path / "x",
                     "--prompt", "hello", "--adapter-path", tmp_path, check=False)
    assert proc.returncode == 1 and "adapter_config.json" in proc.stderr, proc.stderr


def test_cache_prompt_spec_exact(models, tmp_path):
    """`cache_prompt --spec-exact` (ours) prefills as one-token steps, so `generate --spec-exact`
    continuing its file gives the bytes of the whole prompt decoded by `generate --spec-exact`. A
    plain cache does not: on the CPU's BLAS a float32 model's chunked prefill has other bytes."""
    model = oracle.float32_copy(models["qwen3_5_bf16"], tmp_path / "qwen3_5_fp32")
    query = " and then some more"

    def logprobs(*flags):
        out = tmp_path / "logprobs.safetensors"
        run_mlxrt("generate", "--model", model, "-m", 16, "--spec-exact", "--logprobs-file", out, *flags)
        return oracle.raw_bytes(mx.load(str(out))["logprobs"])

    def continued(*cache_flags):
        saved = tmp_path / "prompt.safetensors"
        run_mlxrt("cache_prompt", "--model", model, "--prompt-cache-file", saved, "--prompt", PROMPT, *cache_flags)
        return logprobs("--prompt-cache-file", saved, "--prompt", query)

    whole = logprobs("--prompt", PROMPT + query)
    assert continued("--spec-exact") == whole
    assert continued() != whole
    proc = run_mlxrt("cache_prompt", "--model", model, "--prompt-cache-file", tmp_path / "x", "--prompt", PROMPT,
                     "--spec-exact", "--kv-bits", "8", check=False)
    assert proc.returncode != 0 and "--spec-exact cannot be combined with --kv-bits" in proc.stderr
