"""L1: logits through mlx-lm's rotating KV cache (--max-kv-size), quantized KV cache (--kv-bits,
maybe_quantize_kv_cache after every model call) and sliding-window layers (llama, gemma3_text), byte-equal to
mlx-lm's across the point where the cache rotates / quantizes: one token at a time and in chunks
(the chunked path of RotatingKVCache concatenates, the one-token path writes in place)."""
import mlx.core as mx
import pytest

import kv_oracle
import long_tests
import oracle
from conftest import run_mlxrt

TOKENS = [(i * 37 + 5) % 512 for i in range(40)]

# (fixture, cache options as (flag, kwarg, value) triples)
CASES = [
    ("qwen3_bf16", {"max_kv_size": 16}),
    ("llama_q4_g64", {"max_kv_size": 12}),
    ("llama_swa", {}),  # sliding_window 6: RotatingKVCache on layers 0 and 2
    ("gemma3_bf16", {}),  # sliding_window 6, pattern 2: RotatingKVCache on layers 0 and 2
    ("gemma3_q4_g64", {}),
    ("gemma3_fp16_untied", {}),  # pattern 3: layers 0 and 1 slide
    ("qwen3_mha_hd64", {"kv_bits": 4, "kv_group_size": 64, "quantized_kv_start": 8}),
    ("qwen3_bf16", {"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 5}),
    ("llama_bf16", {"kv_bits": 4, "kv_group_size": 32, "quantized_kv_start": 0}),
    ("qwen3_hd128", {"kv_bits": 8, "kv_group_size": 64, "quantized_kv_start": 4}),
    ("qwen3_hd128", {"kv_bits": 4, "kv_group_size": 32, "quantized_kv_start": 0}),
    ("qwen2_bf16", {"max_kv_size": 16}),  # qwen2.py has no make_cache: max_kv_size rotates every layer
    ("qwen2_q4_g64", {"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 5}),
    ("phi3_longrope", {"max_kv_size": 16}),  # phi3.py has no make_cache: max_kv_size rotates every layer
    ("phi3_q4_g64", {"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 5}),
    # hybrid gated delta nets: ArraysCache layers beside KVCache ones; chunks of 3 and 5 split the conv
    # window (kernel 4) and every chunk crosses the full-attention layers
    ("qwen3_5_bf16", {}),
    ("qwen3_5_q4_g64", {"max_kv_size": 16}),  # qwen3_5.py defines make_cache: max_kv_size changes nothing
    ("qwen3_5_hd256_gqa", {"kv_bits": 8, "kv_group_size": 64, "quantized_kv_start": 4}),
    ("qwen3_5_fp16", {"kv_bits": 4, "kv_group_size": 32, "quantized_kv_start": 0}),
    ("qwen3_next_dense_bf16", {}),
    # experts: a 40-token chunk routes 80 (token, expert) pairs through the sorted gather, one token 2
    ("qwen3_next_fp32", {}),
    ("qwen3_5_moe_q4_g64", {"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 5}),
    # mixture of experts: 40 tokens at once take switch_layers' sorted path, chunks of 1, 3 and 7 the other
    ("qwen3_moe_q4_g64", {"max_kv_size": 64}),
    ("qwen3_moe_fp32", {"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 5}),
    ("mixtral_q4_g64", {"max_kv_size": 16}),
    ("mixtral_per_expert_q4_ties", {"max_kv_size": 64}),
    ("qwen2_moe_q4_g64", {"max_kv_size": 64}),
    ("olmoe_fp32_norm_bias", {"max_kv_size": 16}),
    ("gpt_oss_mxfp4", {}),  # sliding_window 6: RotatingKVCache on layers 0 and 2, sinks
    ("gpt_oss_fp32", {}),
    ("ministral3_bf16", {}),  # mistral3.py has no make_cache: layer 1 slides (window 6) over a KVCache
    ("ministral3_q4_g64", {}),  # ministral3.py's make_cache: RotatingKVCache(6) on layer 1
    ("mistral3_bf16", {"max_kv_size": 16}),
    ("smollm3_bf16", {"max_kv_size": 16}),  # smollm3.py has no make_cache: every layer rotates
    ("smollm3_q4_g64", {"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 5}),
    # gemma4: sliding layers on RotatingKVCache, KV-shared layers reading an earlier layer's cache
    ("gemma4_bf16", {}),
    ("gemma4_q4_g64", {}),
    ("gemma4_fp16_keqv", {}),
    ("gemma4_multimodal", {}),
    # gemma4's MoE block: 40 tokens at once take the sorted expert path, chunks of 1, 3 and 7 the other
    ("gemma4_moe_fp32", {}),
    ("gemma4_moe_q4_g64", {}),
    # gemma3n: sliding layers on RotatingKVCache, KV-shared layers reading the cache of the last
    # earlier layer of their type (after it took this step's keys), one RoPE offset per forward
    ("gemma3n_bf16", {}),
    ("gemma3n_q4_g64", {}),
    ("gemma3n_fp32_variant", {}),
    ("olmo2_bf16", {"max_kv_size": 16}),
    ("olmo2_q4_g64", {"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 5}),
    ("olmo3_bf16", {}),
    ("olmo3_q4_g64", {}),
    ("granite_bf16", {"max_kv_size": 16}),
    ("minicpm_bf16", {"max_kv_size": 16}),
    ("exaone4_bf16", {}),
    ("exaone4_q4_g64", {"max_kv_size": 16}),
    ("glm4_bf16", {"max_kv_size": 16}),
    ("glm4_q4_g64", {"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 5}),
    ("ernie4_5_bf16", {"max_kv_size": 16}),
    ("seed_oss_bf16", {"max_kv_size": 16}),
    ("hunyuan_v1_dense_bf16", {"max_kv_size": 16}),
    ("hunyuan_v1_dense_bf16", {"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 5}),
    ("internlm3_bf16", {"max_kv_size": 16}),
    ("starcoder2_bf16", {"max_kv_size": 16}),
    ("stablelm_bf16", {"max_kv_size": 16}),
    ("phi_bf16", {"max_kv_size": 16}),
    ("phixtral_fp32", {"max_kv_size": 16}),  # phixtral.py has no make_cache: a RotatingKVCache of 16
    ("phixtral_per_expert_q4", {"max_kv_size": 12}),
    ("helium_bf16", {"max_kv_size": 16}),
    ("cohere2_bf16", {}),
    ("cohere2_fp16", {}),
    ("cohere2_q4_g64", {}),
    # gemma2.py and gemma.py have no make_cache: max_kv_size rotates every layer; gemma2's written-out
    # attention takes the cache's mask as an array
    ("gemma2_bf16", {"max_kv_size": 16}),
    ("gemma2_q4_g64", {}),
    ("gemma2_fp16_mha", {"max_kv_size": 12}),
    ("gemma_bf16", {"max_kv_size": 16}),
    ("gemma_q4_g64", {"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 5}),
    # lfm2: conv layers (ArraysCache, conv_L_cache 3 or 4) beside KVCache ones; lfm2.py defines make_cache
    ("lfm2_bf16", {}),
    ("lfm2_q4_g64", {"max_kv_size": 16}),
    ("lfm2_bf16", {"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 5}),
    ("lfm2_fp32_layer_types", {"kv_bits": 4, "kv_group_size": 32, "quantized_kv_start": 0}),
    # minicpm3: keys of 48 (32 + 16 RoPE'd), values of 32; no make_cache, so max_kv_size rotates every layer
    ("minicpm3_bf16", {"max_kv_size": 16}),
    ("minicpm3_q4_g64", {"max_kv_size": 12}),  # (keys of 48 take no quantized KV cache: no group size divides it)
    ("minicpm3_fp16_defaults", {}),
]
CHUNKS = [1, 3, 7, 40]
# the hybrid families' conv keeps 3 inputs: chunks of 3 and 5 split its window differently
HYBRID_CHUNKS = [1, 3, 5, 40]


# `make test` takes one token at a time, one chunk size that crosses the window or quantization point
# unaligned, and the whole prompt at once; `make test-long` adds the other chunk size.
QUICK_CHUNKS = {1, 5, 7, 40}


def chunks_for(name):
    chunks = HYBRID_CHUNKS if name.startswith(("qwen3_5", "qwen3_next", "lfm2")) else CHUNKS
    return chunks if long_tests.LONG else [c for c in chunks if c in QUICK_CHUNKS]


def reference_or_refusal(compute):
    """mlx-lm's result, or the error MLX raised computing it: MLX's CUDA backend has no quantized
    matmul for head sizes under 128, and then mlxrt must refuse with the same message."""
    try:
        return compute(), None
    except RuntimeError as e:
        if "No implementation for problem shape" not in str(e):
            raise
        return None, str(e)


def assert_same_refusal(proc, refusal):
    assert proc.returncode == 1 and refusal in proc.stderr, (refusal, proc.stderr)


def flags(options):
    out = []
    for key, value in options.items():
        out += ["--" + key.replace("_", "-"), value]
    return out


@pytest.mark.parametrize("name,options", CASES, ids=[f"{n}-{'-'.join(map(str, o.values())) or 'swa'}"
                                                     for n, o in CASES])
def test_cached_logits_byte_equal(name, options, fixtures_dir, tmp_path):
    path = fixtures_dir / name
    model, _ = oracle.load(path)
    for chunk in chunks_for(name):
        ref, refusal = reference_or_refusal(lambda: kv_oracle.cached_logits(model, TOKENS, chunk, **options))
        out = tmp_path / f"chunk{chunk}.safetensors"
        proc = run_mlxrt("logits", "--model", path, "--tokens", ",".join(map(str, TOKENS)), "--out", out,
                         "--chunk-size", chunk, *flags(options), check=refusal is None)
        if refusal:
            assert_same_refusal(proc, refusal)
            continue
        ours = mx.load(str(out))["logits"]
        assert ours.dtype == ref.dtype and ours.shape == ref.shape
        assert oracle.raw_bytes(ours) == oracle.raw_bytes(ref), f"{name} {options} chunk {chunk}: logits differ"


def test_sliding_window_full_forward(fixtures_dir, tmp_path):
    """No cache: the sliding layers' mask is the windowed causal mask (40 > window 6)."""
    path = fixtures_dir / "llama_swa"
    model, _ = oracle.load(path)
    ref = oracle.full_logits(model, TOKENS)
    out = tmp_path / "full.safetensors"
    run_mlxrt("logits", "--model", path, "--tokens", ",".join(map(str, TOKENS)), "--out", out)
    assert oracle.raw_bytes(mx.load(str(out))["logits"]) == oracle.raw_bytes(ref)


def test_rotating_cache_cannot_be_quantized(fixtures_dir, tmp_path):
    """mlx-lm raises NotImplementedError for RotatingKVCache.to_quantized; we refuse clearly."""
    proc = run_mlxrt("logits", "--model", fixtures_dir / "qwen3_bf16", "--tokens", "1,2,3,4", "--out",
                     tmp_path / "x.safetensors", "--max-kv-size", 8, "--kv-bits", 4, "--kv-group-size", 32,
                     "--quantized-kv-start", 0, check=False)
    assert proc.returncode == 1 and "rotating KV cache" in proc.stderr and "--kv-bits" in proc.stderr


@pytest.mark.parametrize("args,needle", [
    (["--kv-bits", 7], "--kv-bits"),
    (["--kv-bits", 4, "--kv-group-size", 48], "--kv-group-size"),
    (["--kv-bits", 4, "--quantized-kv-start", -1], "--quantized-kv-start"),
    (["--max-kv-size", 0], "--max-kv-size"),
    (["--kv-bits", 4, "--kv-group-size", 64, "--quantized-kv-start", 0], "does not divide"),
])
def test_bad_cache_flags(args, needle, fixtures_dir, tmp_path):
    proc = run_mlxrt("logits", "--model", fixtures_dir / "qwen3_bf16", "--tokens", "1,2,3", "--out",
                     tmp_path / "x.safetensors", *args, check=False)
    assert proc.returncode == 1 and needle in proc.stderr, proc.stderr


GREEDY_CASES = [
    ("qwen3_bf16", {"max_kv_size": 16}),
    ("llama_swa", {}),
    ("gemma3_bf16", {}),
    ("gemma3_fp16_untied", {}),
    ("qwen3_mha_hd64", {"kv_bits": 4, "kv_group_size": 64, "quantized_kv_start": 8}),
    ("qwen3_bf16", {"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 5}),
    ("qwen3_hd128", {"kv_bits": 8, "kv_group_size": 64, "quantized_kv_start": 5}),
    ("qwen2_bf16", {"max_kv_size": 16}),
    ("phi3_longrope", {"max_kv_size": 16}),
    ("qwen3_5_bf16", {}),
    ("qwen3_5_hd256_gqa", {"kv_bits": 8, "kv_group_size": 64, "quantized_kv_start": 5}),
    ("qwen3_next_dense_bf16", {"max_kv_size": 16}),
    ("qwen3_moe_q4_g64", {"max_kv_size": 16}),
    ("gpt_oss_mxfp4", {}),
    ("ministral3_bf16", {}),
    ("ministral3_q4_g64", {}),
    ("smollm3_bf16", {"max_kv_size": 16}),
    ("gemma4_bf16", {}),
    ("gemma4_fp16_keqv", {}),
    ("gemma4_moe_fp32", {}),
    ("gemma4_moe_q4_g64", {}),
    ("gemma3n_bf16", {}),
    ("gemma3n_fp32_variant", {}),
    ("olmo3_bf16", {}),
    ("exaone4_bf16", {}),
    ("cohere2_bf16", {}),
    ("cohere2_fp16", {}),
    ("gemma2_bf16", {"max_kv_size": 16}),
    ("gemma_fp16_mqa", {"max_kv_size": 16}),
    ("lfm2_bf16", {}),
    ("lfm2_fp32_layer_types", {"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 5}),
    ("minicpm3_bf16", {"max_kv_size": 16}),
]


@pytest.mark.parametrize("name,options", GREEDY_CASES, ids=[f"{n}-{'-'.join(map(str, o.values())) or 'swa'}"
                                                            for n, o in GREEDY_CASES])
def test_greedy_tokens_equal(name, options, fixtures_dir):
    """`mlxrt generate` with the cache flags: the tokens of mlx-lm's generate_step, across rotation /
    quantization, with chunked prefill."""
    path = fixtures_dir / name
    model, config = oracle.load(path)
    prompt = TOKENS[:20]
    ref, refusal = reference_or_refusal(
        lambda: kv_oracle.greedy_tokens(model, config, prompt, 48, prefill_step_size=6, **options))
    proc = run_mlxrt("generate", "--model", path, "--prompt-tokens", ",".join(map(str, prompt)),
                     "--max-tokens", 48, "--prefill-step-size", 6, *flags(options), check=refusal is None)
    if refusal:
        assert_same_refusal(proc, refusal)
        return
    body = proc.stdout.split("==========\n")[1].strip()
    ours = [int(t) for t in body.split()] if body and not body.startswith("No text") else []
    assert ours == ref
