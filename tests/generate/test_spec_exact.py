"""`mlxrt generate --spec-exact`: every position computed as a one-token decoding step computes it,
so greedy decoding gives the bytes of decoding one token at a time (`--prefill-step-size 1`, what
mlx-lm computes with prefill_step_size 1) whatever the prefill chunks and with any draft model:
one that agrees often (a quantized copy), always (the model itself) or seldom (another random init).
The invariance suite: 256 tokens, logprobs compared as bytes, on qwen3 (float32, bfloat16, 4-bit),
llama (bfloat16, float16), qwen2 and the hybrid qwen3_5 (bfloat16, 4-bit, and a float32 copy; its
caches cannot be rewound, so no draft model: chunked prefill only). On the CPU, float32 layers go
through the BLAS, whose products depend on the row count: there plain chunked prefill and plain
speculation differ from the one-token run, and --spec-exact does not. Then bad input."""
import shutil

import mlx.core as mx
import pytest
from conftest import fixture_lock, make_fixture, run_mlxrt
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
    "qwen3_5_bf16": None,
    "qwen3_5_q4_g64": None,
    "qwen3_5_bf16:fp32": None,  # a float32 copy, made here
}
# Models whose caches cannot be rewound: speculation is refused there (as mlx-lm refuses it).
NO_DRAFTS = {"qwen3_5_bf16", "qwen3_5_q4_g64", "qwen3_5_bf16:fp32"}


def model_path(name):
    """A fixture, or (NAME:fp32) a float32 copy of one."""
    if not name.endswith(":fp32"):
        return make_fixture(name)
    src = make_fixture(name.split(":")[0])
    out = src.parent / (src.name + "_fp32_copy")
    stamp = src / "fixture.json"
    with fixture_lock():
        # Kept while it was copied from the fixture as it is now.
        if (out / "config.json").exists() and (out / stamp.name).read_text() == stamp.read_text():
            return out
        tmp = src.parent / (src.name + "_fp32_copy.partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for f in src.iterdir():
            if f.suffix == ".safetensors":
                weights = mx.load(str(f))
                mx.save_safetensors(str(tmp / f.name), {k: v.astype(mx.float32) if v.dtype in (mx.bfloat16, mx.float16)
                                                        else v for k, v in weights.items()}, metadata={"format": "mlx"})
            else:
                shutil.copy(f, tmp / f.name)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return out


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
            cache[name] = generate(model_path(name), ["--prefill-step-size", "1"],
                                   tmp_path_factory.mktemp(name.replace(":", "_")))
        return cache[name]

    return get


CASES = [(m, v) for m, copy in MODELS.items() for v in VARIANTS
         if not (v == "draft_copy" and copy is None)
         and not (v == "draft_other_init_chunked" and not m.startswith("qwen3_"))
         and not (m in NO_DRAFTS and v.startswith("draft"))]


@pytest.mark.parametrize("model,variant", CASES, ids=[f"{m}-{v}" for m, v in CASES])
def test_spec_exact_equals_one_token_decoding(model, variant, one_token_runs, tmp_path):
    main = model_path(model)
    want_tokens, want_logprobs = one_token_runs(model)
    got_tokens, got_logprobs = generate(main, ["--spec-exact", *variant_flags(variant, main, MODELS[model])],
                                        tmp_path)
    assert got_tokens == want_tokens
    assert got_logprobs == want_logprobs


@pytest.mark.parametrize("model,variant", [("qwen3_fp32", "default_prefill"), ("qwen3_fp32", "draft_copy"),
                                           ("qwen3_5_bf16:fp32", "prefill_7")])
def test_without_spec_exact_float32_bytes_depend_on_the_row_count(model, variant, one_token_runs, tmp_path):
    """Why the mode exists (and that the comparison above can fail): on the CPU's BLAS a float32
    model's chunked prefill, and a speculative step's verification, do not give one-token bytes."""
    main = model_path(model)
    _, want_logprobs = one_token_runs(model)
    _, got_logprobs = generate(main, variant_flags(variant, main, MODELS[model]), tmp_path)
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
    assert "--spec-exact: model_type 'qwen3_moe' is not supported (llama, mistral, qwen2, qwen3, qwen3_5, qwen3_5_moe, qwen3_next)" in proc.stderr
