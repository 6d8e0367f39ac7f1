"""`mlxrt generate --spec-exact`: every position computed as a one-token decoding step computes it,
so greedy decoding gives the bytes of decoding one token at a time (`--prefill-step-size 1`, what
mlx-lm computes with prefill_step_size 1) whatever the prefill chunks and with any draft model:
one that agrees often (a quantized copy), always (the model itself) or seldom (another random init).
The invariance suite: 256 tokens, logprobs compared as bytes, on qwen3 (float32, bfloat16, 4-bit),
llama (bfloat16, float16) and qwen2. On the CPU, float32 layers go through the BLAS, whose products
depend on the row count: there plain chunked prefill and plain speculation differ from the
one-token run, and --spec-exact does not. Then bad input."""
import mlx.core as mx
import pytest
from conftest import make_fixture, run_mlxrt
from oracle import raw_bytes

PROMPT = ",".join(map(str, [1, 5, 9, 200, 33, 17, 80, 41, 7, 300, 12, 99, 4, 8, 15, 16, 23, 42, 108, 3, 77, 55, 21, 34]))
MAX_TOKENS = 256

# Every variant runs with --spec-exact: (name, flags); drafts are fixture names.
VARIANTS = {
    "default_prefill": [],
    "prefill_7": ["--prefill-step-size", "7"],
    "draft_copy": ["--draft-model", "{copy}", "--num-draft-tokens", "3"],
    "draft_other_init_chunked": ["--draft-model", "qwen3_q8_g32", "--num-draft-tokens", "5", "--prefill-step-size", "5"],
    "draft_itself": ["--draft-model", "{main}", "--num-draft-tokens", "4"],
}
# main model: the quantized copy that drafts for it
MODELS = {
    "qwen3_fp32": "qwen3_bf16_q8_draft",
    "qwen3_bf16": "qwen3_bf16_q8_draft",
    "qwen3_q4_g64": "qwen3_bf16_q8_draft",
    "llama_bf16": "llama_bf16_q4_draft",
    "llama_tied_fp16": None,
    "qwen2_bf16": None,
}


def generate(model, flags, tmp_path):
    out = tmp_path / "logprobs.safetensors"
    proc = run_mlxrt("generate", "--model", model, "--prompt-tokens", PROMPT, "-m", MAX_TOKENS,
                     "--logprobs-file", out, *flags)
    tokens = [int(t) for t in proc.stdout.split("==========\n")[1].split()]
    return tokens, raw_bytes(mx.load(str(out))["logprobs"])


def variant_flags(name, main, copy):
    flags = [f.format(main=main, copy=copy) for f in VARIANTS[name]]
    if "--draft-model" in flags:
        at = flags.index("--draft-model") + 1
        flags[at] = str(main) if flags[at] == str(main) else str(make_fixture(flags[at]))
    return flags


@pytest.fixture(scope="module")
def one_token_runs(tmp_path_factory):
    """Each model's reference: plain greedy decoding with a prefill of one token at a time."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = generate(make_fixture(name), ["--prefill-step-size", "1"], tmp_path_factory.mktemp(name))
        return cache[name]

    return get


CASES = [(m, v) for m, copy in MODELS.items() for v in VARIANTS
         if not (v == "draft_copy" and copy is None)
         and not (v == "draft_other_init_chunked" and not m.startswith("qwen3"))]


@pytest.mark.parametrize("model,variant", CASES, ids=[f"{m}-{v}" for m, v in CASES])
def test_spec_exact_equals_one_token_decoding(model, variant, one_token_runs, tmp_path):
    main = make_fixture(model)
    want_tokens, want_logprobs = one_token_runs(model)
    got_tokens, got_logprobs = generate(main, ["--spec-exact", *variant_flags(variant, main, MODELS[model])],
                                        tmp_path)
    assert got_tokens == want_tokens
    assert got_logprobs == want_logprobs


@pytest.mark.parametrize("variant", ["default_prefill", "draft_copy"])
def test_without_spec_exact_float32_bytes_depend_on_the_row_count(variant, one_token_runs, tmp_path):
    """Why the mode exists (and that the comparison above can fail): on the CPU's BLAS a float32
    model's chunked prefill, and a speculative step's verification, do not give one-token bytes."""
    main = make_fixture("qwen3_fp32")
    _, want_logprobs = one_token_runs("qwen3_fp32")
    _, got_logprobs = generate(main, variant_flags(variant, main, MODELS["qwen3_fp32"]), tmp_path)
    assert got_logprobs != want_logprobs


@pytest.mark.parametrize("flags,message", [
    (["--kv-bits", "4"], "--spec-exact cannot be combined with --kv-bits"),
    (["--fidelity", "l3"], "--spec-exact runs at --fidelity l1"),
])
def test_refused_combinations(flags, message):
    proc = run_mlxrt("generate", "--model", make_fixture("qwen3_bf16"), "--prompt-tokens", PROMPT, "-m", 4,
                     "--spec-exact", *flags, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr


def test_a_family_it_does_not_cover_is_refused():
    proc = run_mlxrt("generate", "--model", make_fixture("qwen3_moe_bf16"), "--prompt-tokens", PROMPT, "-m", 4,
                     "--spec-exact", check=False)
    assert proc.returncode != 0
    assert "--spec-exact: model_type 'qwen3_moe' is not supported (llama, mistral, qwen2, qwen3)" in proc.stderr
