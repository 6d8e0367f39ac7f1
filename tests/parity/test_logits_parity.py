"""L1: `mlxrt logits` byte-equal to mlx-lm for every fixture, full and incremental, and greedy
tokens equal to mlx-lm's generate_step. No tolerances."""
import mlx.core as mx
import pytest

import oracle
from conftest import fixture_names, run_mlxrt

TOKENS = [1, 17, 300, 42, 5, 511, 77, 8, 256, 3, 99, 150]


@pytest.mark.parametrize("name", fixture_names())
def test_logits_byte_equal(name, fixtures_dir, tmp_path):
    path = fixtures_dir / name
    model, _ = oracle.load(path)
    for mode, ref in (("full", oracle.full_logits(model, TOKENS)),
                      ("incremental", oracle.incremental_logits(model, TOKENS))):
        out = tmp_path / f"{mode}.safetensors"
        args = ["logits", "--model", path, "--tokens", ",".join(map(str, TOKENS)), "--out", out]
        run_mlxrt(*args, *(["--incremental"] if mode == "incremental" else []))
        ours = mx.load(str(out))["logits"]
        assert ours.dtype == ref.dtype and ours.shape == ref.shape, (mode, ours.dtype, ours.shape)
        assert oracle.raw_bytes(ours) == oracle.raw_bytes(ref), f"{name} {mode}: logits differ"


def parse_generated(stdout):
    body = stdout.split("==========\n")[1].strip()
    return [int(t) for t in body.split()] if body and not body.startswith("No text") else []


@pytest.mark.parametrize("name", ["qwen3_bf16", "qwen3_q4_g64", "qwen3_mixed", "llama_bf16", "llama_q8_g128_sharded",
                                  "qwen2_bf16", "qwen2_q4_g64",
                                  "phi3_bf16", "phi3_q4_g64", "phi3_longrope", "phi3_partial_su_fp16",
                                  "phi3_linear_partial",
                                  "llama_rope_dynamic", "mistral_bf16", "gemma3_bf16", "gemma3_q4_g64",
                                  "gemma3_fp16_untied", "gemma3_multimodal",
                                  "gemma4_bf16", "gemma4_q4_g64", "gemma4_fp16_keqv", "gemma4_multimodal",
                                  "gemma2_bf16", "gemma2_q4_g64", "gemma2_fp16_mha",
                                  "gemma_bf16", "gemma_q4_g64", "gemma_fp16_mqa"])
def test_greedy_tokens_equal(name, fixtures_dir):
    path = fixtures_dir / name
    model, config = oracle.load(path)
    prompt = [1, 5, 9, 200, 33]
    # A small prefill step exercises chunked prefill on both sides.
    ref = oracle.greedy_tokens(model, config, prompt, 64, prefill_step_size=2)
    proc = run_mlxrt("generate", "--model", path, "--prompt-tokens", ",".join(map(str, prompt)),
                     "--max-tokens", 64, "--prefill-step-size", 2)
    assert parse_generated(proc.stdout) == ref
    assert "Prompt: 5 tokens" in proc.stdout and "Peak memory:" in proc.stdout
