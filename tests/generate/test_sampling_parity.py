"""Sampler and logits-processor parity: `mlxrt generate --seed S` against mlx-lm's make_sampler /
make_logits_processors / generate_step seeded the way mlx_lm.generate seeds (before the model is
built). Token sequences equal, logprobs byte-equal, 128 tokens, several seeds."""
import mlx.core as mx
import pytest
from conftest import run_mlxrt
from oracle import raw_bytes
from sampling_oracle import sample_tokens

PROMPT = [1, 5, 9, 200, 33, 17]
EOS = 2  # the fixture's eos_token_id

CASES = {
    "temp": (dict(temp=1.0), {}, []),
    "top_p": (dict(temp=0.7, top_p=0.9), {}, ["--top-p", "0.9"]),
    "min_p_keep": (dict(temp=0.8, min_p=0.05, min_tokens_to_keep=3), {}, ["--min-p", "0.05", "--min-tokens-to-keep", "3"]),
    "top_k": (dict(temp=1.2, top_k=20), {}, ["--top-k", "20"]),
    "xtc": (dict(temp=1.0, xtc_probability=0.5, xtc_threshold=0.05, xtc_special_tokens=[EOS]), {},
            ["--xtc-probability", "0.5", "--xtc-threshold", "0.05"]),
    "combo": (dict(temp=0.9, top_p=0.95, min_p=0.02), dict(repetition_penalty=1.3, logit_bias={5: 2.5, 7: -1.0}),
              ["--top-p", "0.95", "--min-p", "0.02", "--repetition-penalty", "1.3", "--logit-bias", '{"5": 2.5, "7": -1.0}']),
    "penalties": (dict(temp=1.0, top_k=50), dict(presence_penalty=0.5, frequency_penalty=0.3, frequency_context_size=40,
                                                 repetition_penalty=0.9, repetition_context_size=8),
                  ["--top-k", "50", "--presence-penalty", "0.5", "--frequency-penalty", "0.3",
                   "--frequency-context-size", "40", "--repetition-penalty", "0.9", "--repetition-context-size", "8"]),
    "greedy_bias": (dict(temp=0.0), dict(logit_bias={300: 3.0}), ["--logit-bias", '{"300": 3.0}']),
}


@pytest.mark.parametrize("seed", [0, pytest.param(12345, marks=pytest.mark.long)])
@pytest.mark.parametrize("case", list(CASES))
def test_tokens_and_logprobs_equal_mlx_lm(tiny_model, tmp_path, case, seed):
    sampler_args, processor_args, flags = CASES[case]
    sampler_args = {"top_p": 1.0, **sampler_args}  # mlx_lm.generate's default --top-p
    want_tokens, want_logprobs = sample_tokens(tiny_model, PROMPT, 128, seed, sampler_args, processor_args, {EOS})
    out = tmp_path / "logprobs.safetensors"
    proc = run_mlxrt("generate", "--model", tiny_model, "--prompt-tokens", ",".join(map(str, PROMPT)), "-m", 128,
                     "--seed", seed, "--temp", sampler_args["temp"], "--logprobs-file", out, *flags)
    body = proc.stdout.split("==========\n")[1]
    got = [int(t) for t in body.split()]
    assert got == want_tokens
    assert got  # something was sampled (an eos may end it early)
    assert raw_bytes(mx.load(str(out))["logprobs"]) == raw_bytes(want_logprobs)


def test_seeds_differ(tiny_model):
    """The seed reaches the sampler: two seeds give two different sequences."""
    runs = [run_mlxrt("generate", "--model", tiny_model, "--prompt-tokens", "1,5,9", "-m", 32, "--temp", 1.0,
                      "--seed", s).stdout for s in (1, 2)]
    assert runs[0] != runs[1]


@pytest.mark.parametrize("fixture", ["llama_bf16", "llama_bias", "qwen3_q4_g64", "qwen3_mixed", "qwen3_fp16_untied",
                                     "qwen2_bf16", "qwen2_q4_g64",
                                     "phi3_bf16", "phi3_q4_g64", "phi3_partial_su_fp16",
                                     "gemma3_bf16", "gemma3_q4_g64", "gemma3_fp16_untied", "gemma3_multimodal",
                                     "qwen3_5_bf16", "qwen3_5_q4_g64", "qwen3_5_hd256_gqa", "qwen3_5_fp16",
                                     "qwen3_next_dense_bf16", "qwen3_next_fp32", "qwen3_next_q4_g64",
                                     "qwen3_5_moe_q4_g64",
                                     # mixture of experts: a switch layer draws once (twice quantized), its
                                     # bias nothing; experts saved one by one draw as one stacked layer
                                     "qwen3_moe_fp32", "qwen3_moe_q4_g64", "qwen3_moe_per_expert",
                                     "mixtral_fp32", "mixtral_per_expert_q4_ties", "qwen2_moe_q4_g64",
                                     "qwen2_moe_fp32_per_expert", "olmoe_fp32_norm_bias", "olmoe_q4_g64",
                                     "gpt_oss_fp32", "gpt_oss_mxfp4", "gpt_oss_openai_mxfp4",
                                     # dense families on the decoder skeleton
                                     "mistral3_bf16", "mistral3_q4_g64", "ministral3_bf16", "ministral3_q4_g64",
                                     "smollm3_bf16", "smollm3_q4_g64",
                                     "gemma4_bf16", "gemma4_q4_g64", "gemma4_fp16_keqv", "gemma4_multimodal",
                                     "gemma4_moe_fp32", "gemma4_moe_q4_g64",
                                     # gemma3n: every Linear and Embedding draws, the towers nothing
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
                                     # phixtral: SwitchMLP layers (biases start at zeros), experts saved
                                     # one by one (moe.mlp.N) drawing as one stacked layer
                                     "phixtral_fp32", "phixtral_q4_g64", "phixtral_per_expert_q4",
                                     # lfm2: each Conv1d draws its weight (its bias starts at zeros)
                                     "lfm2_bf16", "lfm2_q4_g64", "lfm2_fp32_layer_types",
                                     # minicpm3: untied by default
                                     "minicpm3_bf16", "minicpm3_q4_g64", "minicpm3_fp16_defaults"])
def test_seed_position_after_model_construction(fixture):
    """mlx_lm.generate seeds before building the model, whose layers draw initial weights: the first
    sampling key depends on the architecture (biases, untied heads, quantized layers; gemma3_text builds an
    lm_head that a tied checkpoint lacks, gemma3 no vision tower)."""
    from conftest import make_fixture
    model = make_fixture(fixture)
    want, _ = sample_tokens(model, PROMPT, 24, 3, {"temp": 1.0, "top_p": 1.0}, {}, {EOS})
    proc = run_mlxrt("generate", "--model", model, "--prompt-tokens", ",".join(map(str, PROMPT)), "-m", 24,
                     "--seed", 3, "--temp", 1.0)
    assert [int(t) for t in proc.stdout.split("==========\n")[1].split()] == want


@pytest.mark.parametrize("fixture", ["qwen2_bf16", "qwen3_bf16", "llama_tied_fp16"])
def test_seed_position_with_a_saved_tied_head(fixture, tmp_path):
    """A tied checkpoint that still holds lm_head.weight: mlx-lm builds no head (sanitize drops the
    tensor), so the head draws nothing before sampling."""
    import shutil

    from conftest import make_fixture
    model = tmp_path / fixture
    shutil.copytree(make_fixture(fixture), model)
    weights = mx.load(str(model / "model.safetensors"))
    weights["lm_head.weight"] = weights["model.embed_tokens.weight"] * 2
    mx.save_safetensors(str(model / "model.safetensors"), weights, metadata={"format": "mlx"})
    (model / "model.safetensors.index.json").unlink(missing_ok=True)
    want, _ = sample_tokens(model, PROMPT, 24, 3, {"temp": 1.0, "top_p": 1.0}, {}, {EOS})
    proc = run_mlxrt("generate", "--model", model, "--prompt-tokens", ",".join(map(str, PROMPT)), "-m", 24,
                     "--seed", 3, "--temp", 1.0)
    assert [int(t) for t in proc.stdout.split("==========\n")[1].split()] == want
