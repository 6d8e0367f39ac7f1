"""L1: `mlxrt logits` byte-equal to mlx-lm for every fixture, full and incremental, and greedy
tokens equal to mlx-lm's generate_step. No tolerances."""
import mlx.core as mx
import pytest

import oracle
from conftest import fixture_names, head_only_fixtures, run_mlxrt

TOKENS = [1, 17, 300, 42, 5, 511, 77, 8, 256, 3, 99, 150]


# MLX's CPU gather_mm runs float32 only, and its gather_qmm takes no nvfp4 global scale: where mlx-lm
# stops with these (a bf16 mixture of experts, or nvfp4 experts with tensor scales, on a CPU), mlxrt
# must stop with the same MLX message.
MLX_REFUSALS = ("[GatherMM::eval] Currently only supports float32.",
                "[gather_qmm] Global scale is only supported on the GPU.")


def reference_or_refusal(compute):
    try:
        return compute(), None
    except (RuntimeError, ValueError) as e:  # MLX raises the global-scale refusal as a ValueError
        if not any(r in str(e) for r in MLX_REFUSALS):
            raise
        return None, str(e)


@pytest.mark.parametrize("name", fixture_names())
def test_logits_byte_equal(name, fixtures_dir, tmp_path):
    path = fixtures_dir / name
    model, _ = oracle.load(path)
    for mode, compute in (("full", lambda: oracle.full_logits(model, TOKENS)),
                          ("incremental", lambda: oracle.incremental_logits(model, TOKENS))):
        ref, refusal = reference_or_refusal(compute)
        out = tmp_path / f"{mode}.safetensors"
        args = ["logits", "--model", path, "--tokens", ",".join(map(str, TOKENS)), "--out", out]
        proc = run_mlxrt(*args, *(["--incremental"] if mode == "incremental" else []), check=refusal is None)
        if refusal:
            assert proc.returncode == 1 and refusal in proc.stderr, (refusal, proc.stderr)
            continue
        ours = mx.load(str(out))["logits"]
        assert ours.dtype == ref.dtype and ours.shape == ref.shape, (mode, ours.dtype, ours.shape)
        assert oracle.raw_bytes(ours) == oracle.raw_bytes(ref), f"{name} {mode}: logits differ"


@pytest.mark.parametrize("name", head_only_fixtures())
def test_a_head_mlx_lm_keeps_is_refused_as_mlx_lm_refuses_it(name, fixtures_dir, tmp_path):
    """qwen3_next's sanitize drops mtp.* only from per-expert checkpoints: on an MLX-layout one both
    loads stop at the head's tensors (mlxrt runs it with --mtp)."""
    with pytest.raises(ValueError, match="parameters not in model"):
        oracle.load(fixtures_dir / name)
    proc = run_mlxrt("logits", "--model", fixtures_dir / name, "--tokens", "1,2", "--out", tmp_path / "l.safetensors",
                     check=False)
    assert proc.returncode != 0 and "unexpected parameters: mtp." in proc.stderr, proc.stderr


def parse_generated(stdout):
    body = stdout.split("==========\n")[1].strip()
    return [int(t) for t in body.split()] if body and not body.startswith("No text") else []


GREEDY_NAMES = ["qwen3_bf16", "qwen3_q4_g64", "qwen3_mixed", "llama_bf16", "llama_q8_g128_sharded",
               "qwen2_bf16", "qwen2_q4_g64",
               "phi3_bf16", "phi3_q4_g64", "phi3_longrope", "phi3_partial_su_fp16",
               "phi3_linear_partial",
               "llama_rope_dynamic", "mistral_bf16", "gemma3_bf16", "gemma3_q4_g64",
               "gemma3_fp16_untied", "gemma3_multimodal",
               "qwen3_5_bf16", "qwen3_5_q4_g64", "qwen3_5_hd256_gqa", "qwen3_5_fp16",
               "qwen3_next_dense_bf16", "qwen3_next_fp32", "qwen3_next_q4_g64",
               "qwen3_5_moe_q4_g64",
               # mixture of experts
               "qwen3_moe_fp32", "qwen3_moe_q4_g64", "qwen3_moe_step2_ties", "qwen3_moe_per_expert",
               "mixtral_fp32", "mixtral_q4_g64", "mixtral_per_expert_q4_ties",
               "qwen2_moe_fp32_per_expert", "qwen2_moe_q4_g64",
               "olmoe_fp32_norm_bias", "olmoe_q4_g64",
               "gpt_oss_fp32", "gpt_oss_q4_g64", "gpt_oss_mxfp4", "gpt_oss_openai_mxfp4",
               # dense families on the decoder skeleton
               "mistral3_bf16", "mistral3_q4_g64", "ministral3_bf16", "ministral3_q4_g64",
               "smollm3_bf16", "smollm3_q4_g64",
               "gemma4_bf16", "gemma4_q4_g64", "gemma4_fp16_keqv", "gemma4_multimodal",
               "gemma4_moe_fp32", "gemma4_moe_q4_g64",
               "gemma3n_bf16", "gemma3n_q4_g64", "gemma3n_fp32_variant",
               "olmo2_bf16", "olmo2_q4_g64",
               "olmo3_bf16", "olmo3_q4_g64",
               "granite_bf16", "granite_q4_g64",
               "minicpm_bf16", "minicpm_q4_g64",
               "exaone4_bf16", "exaone4_q4_g64",
               "glm4_bf16", "glm4_q4_g64",
               "ernie4_5_bf16", "ernie4_5_q4_g64",
               "seed_oss_bf16", "seed_oss_tied_fp16", "seed_oss_q4_g64",
               "hunyuan_v1_dense_bf16", "hunyuan_v1_dense_q4_g64",
               "internlm3_bf16", "internlm3_q4_g64",
               "starcoder2_bf16", "starcoder2_q4_g64",
               "stablelm_bf16", "stablelm_q4_g64",
               "phi_bf16", "phi_q4_g64",
               "helium_bf16", "helium_q4_g64",
               "cohere2_bf16", "cohere2_fp16", "cohere2_q4_g64",
               "gemma2_bf16", "gemma2_q4_g64", "gemma2_fp16_mha",
               "gemma_bf16", "gemma_q4_g64", "gemma_fp16_mqa",
               "phixtral_fp32", "phixtral_q4_g64", "phixtral_per_expert_q4",
               # lfm2: short conv layers beside attention layers
               "lfm2_bf16", "lfm2_q4_g64", "lfm2_fp32_layer_types",
               # minicpm3: multi-head latent attention
               "minicpm3_bf16", "minicpm3_q4_g64", "minicpm3_fp16_defaults"]


def first_of_each_family(names):
    """The first name listed of each model_type: `make test` generates with those, `make test-long`
    with every one (test_logits_byte_equal already checks every fixture's logits one token at a time;
    this adds the generate loop and a chunked prefill, which do not depend on the weights' kind)."""
    import make_fixtures
    seen, firsts = set(), set()
    for name in names:
        model_type = make_fixtures.FIXTURES[name]["config"]["model_type"]
        if model_type not in seen:
            seen.add(model_type)
            firsts.add(name)
    return firsts


GREEDY_QUICK = first_of_each_family(GREEDY_NAMES)


@pytest.mark.parametrize("name", [n if n in GREEDY_QUICK else pytest.param(n, marks=pytest.mark.long)
                                  for n in GREEDY_NAMES])
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


HYBRID_NAMES = ["qwen3_5_bf16", "qwen3_5_q4_g64", "qwen3_next_dense_bf16", "qwen3_next_fp32", "qwen3_5_moe_q4_g64",
                "lfm2_bf16", "lfm2_fp32_layer_types"]
# Every hybrid in chunks of 3; the whole prompt in one step for one model of each recurrent layer kind
# in `make test`, for all of them in `make test-long`.
WHOLE_PROMPT_QUICK = {"qwen3_5_bf16", "lfm2_bf16"}


@pytest.mark.parametrize("name,prefill_step_size",
                         [(n, 3) for n in HYBRID_NAMES]
                         + [pytest.param(n, 2048, marks=() if n in WHOLE_PROMPT_QUICK else pytest.mark.long)
                            for n in HYBRID_NAMES])
def test_hybrid_greedy_128_tokens(name, prefill_step_size, fixtures_dir):
    """The recurrent state carried across 128 one-token steps (and a prefill in chunks that split the
    conv window): the tokens of mlx-lm's generate_step."""
    path = fixtures_dir / name
    model, config = oracle.load(path)
    prompt = [1, 5, 9, 200, 33, 17, 300, 42]
    ref = oracle.greedy_tokens(model, config, prompt, 128, prefill_step_size=prefill_step_size)
    proc = run_mlxrt("generate", "--model", path, "--prompt-tokens", ",".join(map(str, prompt)),
                     "--max-tokens", 128, "--prefill-step-size", prefill_step_size)
    assert parse_generated(proc.stdout) == ref


def test_lfm2_hugging_face_conv_layout(fixtures_dir, tmp_path):
    """conv.weight saved as Hugging Face saves it ([C, 1, K]): sanitize moves it to [C, K, 1] on load,
    in both tools, and the logits stay byte-equal."""
    import shutil
    model_dir = tmp_path / "lfm2_hf_conv"
    shutil.copytree(fixtures_dir / "lfm2_fp32_layer_types", model_dir)
    weights = mx.load(str(model_dir / "model.safetensors"))
    moved = {k: v.transpose(0, 2, 1) if k.endswith("conv.conv.weight") else v for k, v in weights.items()}
    assert any(moved[k].shape != weights[k].shape for k in weights)
    mx.save_safetensors(str(model_dir / "model.safetensors"), moved, metadata={"format": "mlx"})
    model, _ = oracle.load(model_dir)
    ref = oracle.incremental_logits(model, TOKENS)
    out = tmp_path / "logits.safetensors"
    run_mlxrt("logits", "--model", model_dir, "--tokens", ",".join(map(str, TOKENS)), "--out", out, "--incremental")
    assert oracle.raw_bytes(mx.load(str(out))["logits"]) == oracle.raw_bytes(ref)
