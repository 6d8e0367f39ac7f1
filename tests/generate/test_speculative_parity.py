"""Speculative decoding (`mlxrt generate --draft-model`) against mlx-lm's speculative_generate_step,
seeded the way mlx_lm.generate seeds (before building the main model, then the draft model): token
ids equal, logprobs byte-equal, from_draft flags equal, greedy and sampled, on drafts that agree
often (quantized copies of the main model), always (the main model itself, greedy) and seldom (a
different random init of the same shapes). Then the text path against `mlx_lm generate
--draft-model` itself (whole stdout), and bad input."""
import shutil

import mlx.core as mx
import pytest
from conftest import FIXTURES, TOKENIZERS, make_fixture, mlx_lm_main, run_mlxrt
from oracle import raw_bytes
from speculative_oracle import make_chat_pair, speculative_tokens
from test_generate_text import FOOTER, split_output

PROMPT = [1, 5, 9, 200, 33, 17, 80, 41, 7, 300, 12, 99]
EOS = 2  # the fixtures' eos_token_id

# (main, draft): quantized copies agree often; qwen3_q8_g32 is another random init of qwen3_bf16's
# shapes (it seldom agrees); a model drafting for itself always agrees when greedy.
PAIRS = {
    "qwen3_q8_copy": ("qwen3_bf16", "qwen3_bf16_q8_draft"),
    "llama_q4_copy": ("llama_bf16", "llama_bf16_q4_draft"),
    "qwen3_other_init": ("qwen3_bf16", "qwen3_q8_g32"),
    "qwen3_itself": ("qwen3_bf16", "qwen3_bf16"),
}

# name: (sampler args, processor args, mlxrt flags, num_draft_tokens, max_tokens, prefill step)
CASES = {
    "greedy": (dict(temp=0.0), {}, [], 3, 48, 2048),
    "greedy_draft2_chunked": (dict(temp=0.0), {}, ["--prefill-step-size", "5"], 2, 37, 5),
    "top_p": (dict(temp=0.7, top_p=0.9), {}, ["--top-p", "0.9"], 3, 48, 2048),
    "temp_draft5": (dict(temp=1.0), {}, [], 5, 41, 2048),
    # logits processors: each verified row is processed and sampled on its own
    "penalties": (dict(temp=0.8, top_k=40), dict(repetition_penalty=1.3, logit_bias={5: 2.5, 7: -1.0}),
                  ["--top-k", "40", "--repetition-penalty", "1.3", "--logit-bias", '{"5": 2.5, "7": -1.0}'],
                  3, 40, 2048),
}


def mlxrt_tokens(main, draft, tmp_path, seed, sampler_args, flags, num_draft, max_tokens):
    out = tmp_path / "logprobs.safetensors"
    proc = run_mlxrt("generate", "--model", main, "--draft-model", draft, "--prompt-tokens",
                     ",".join(map(str, PROMPT)), "-m", max_tokens, "--num-draft-tokens", num_draft,
                     "--seed", seed, "--temp", sampler_args["temp"], "--logprobs-file", out, *flags)
    tokens = [int(t) for t in proc.stdout.split("==========\n")[1].split()]
    saved = mx.load(str(out))
    return tokens, saved["logprobs"], [bool(f) for f in saved["from_draft"].tolist()]


# Which case runs on which pair, and what the drafts do there per mlx-lm itself: "mixed" (some
# accepted, some rejected and the caches rewound), "all" (every draft accepted), "some" (at least one
# accepted) or "none" (every draft rejected: at temperature 1 these flat random models never agree).
RUNS = [
    ("qwen3_q8_copy", "greedy", "all"), ("qwen3_q8_copy", "top_p", "some"), ("qwen3_q8_copy", "penalties", "some"),
    ("qwen3_q8_copy", "temp_draft5", "none"),
    ("llama_q4_copy", "greedy_draft2_chunked", "mixed"), ("llama_q4_copy", "top_p", "some"),
    ("qwen3_other_init", "greedy", "mixed"), ("qwen3_other_init", "temp_draft5", "none"),
    ("qwen3_itself", "greedy", "all"),
]
# A second pair on the same sampler repeats what the first proves: `make test-long` runs them.
LONG_RUNS = {("llama_q4_copy", "top_p"), ("qwen3_other_init", "temp_draft5")}


@pytest.mark.parametrize("pair,case,drafts",
                         [pytest.param(p, c, d, marks=pytest.mark.long if (p, c) in LONG_RUNS else ())
                          for p, c, d in RUNS], ids=[f"{p}-{c}" for p, c, _ in RUNS])
def test_tokens_equal_mlx_lm(pair, case, drafts, tmp_path):
    main, draft = (make_fixture(name) for name in PAIRS[pair])
    sampler_args, processor_args, flags, num_draft, max_tokens, prefill = CASES[case]
    sampler_args = {"top_p": 1.0, **sampler_args}  # mlx_lm.generate's default --top-p
    seed = 7
    want, want_logprobs, want_flags = speculative_tokens(main, draft, PROMPT, max_tokens, seed, sampler_args,
                                                         processor_args, {EOS}, num_draft, prefill)
    got, got_logprobs, got_flags = mlxrt_tokens(main, draft, tmp_path, seed, sampler_args, flags, num_draft,
                                                max_tokens)
    assert got == want
    assert got_flags == want_flags
    assert raw_bytes(got_logprobs) == raw_bytes(want_logprobs)
    rounds = -(-len(want_flags) // (num_draft + 1))  # steps if every draft were accepted
    if drafts == "all":
        assert want_flags.count(False) == rounds, want_flags
    elif drafts == "mixed":
        assert any(want_flags) and want_flags.count(False) > rounds, want_flags
    elif drafts == "some":
        assert any(want_flags), want_flags
    else:
        assert not any(want_flags) and len(want_flags) == max_tokens, want_flags


def test_greedy_equals_plain_decoding():
    """A draft model changes how greedy tokens are found, not which (on these fixtures)."""
    main, draft = make_fixture("llama_bf16"), make_fixture("llama_bf16_q4_draft")
    args = ["--model", main, "--prompt-tokens", ",".join(map(str, PROMPT)), "-m", 40]
    plain = run_mlxrt("generate", *args).stdout.split("==========\n")[1]
    speculative = run_mlxrt("generate", *args, "--draft-model", draft).stdout.split("==========\n")[1]
    assert speculative == plain


# --- the text path against `mlx_lm generate --draft-model` ----------------------------------------

@pytest.fixture(scope="module")
def chat_pair():
    """The generate tests' chat fixture recipe (Qwen3's tokenizer on a tiny llama) and its 4-bit copy."""
    return make_chat_pair(FIXTURES, TOKENIZERS)


TEXT_CASES = {
    "greedy": ["--prompt", "Write a haiku about the sea."],
    "sampled": ["--prompt", "Tell me a story.", "--temp", "0.7", "--top-p", "0.9", "--seed", "5",
                "--num-draft-tokens", "2"],
    "quiet": ["--prompt", "hi", "--verbose", "F", "--num-draft-tokens", "4", "--temp", "1.0", "--seed", "1"],
}


# The text path over several draft rounds: the token tests above hold the longer runs to mlx-lm's
# step by step (these cost about 0.4 s a token in mlx-lm, its 4-bit draft's 151936-row head).
TEXT_MAX_TOKENS = 12


@pytest.mark.parametrize("case", list(TEXT_CASES))
def test_text_equals_mlx_lm(chat_pair, case):
    main, draft = chat_pair
    args = ["--model", main, "--draft-model", draft, "--max-tokens", TEXT_MAX_TOKENS, *TEXT_CASES[case]]
    want = mlx_lm_main("generate", *args).stdout
    got = run_mlxrt("generate", *args).stdout
    if "--verbose" in args:
        assert got == want
        return
    # The footer's rates differ run to run; the text and the token counts are equal.
    want_body, want_footer = split_output(want)
    got_body, got_footer = split_output(got)
    assert got_body == want_body
    assert FOOTER.match(got_footer).groups() == FOOTER.match(want_footer).groups()


# --- bad input: a clear error before anything is generated ---------------------------------------

def expect_error(args, *needles):
    proc = run_mlxrt("generate", *args, check=False)
    assert proc.returncode != 0
    for needle in needles:
        assert needle in proc.stderr, proc.stderr
    assert "==========" not in proc.stdout
    return proc


@pytest.mark.parametrize("value", ["0", "-2", "100000"])
def test_num_draft_tokens_out_of_range(tiny_model, value):
    expect_error(["--model", tiny_model, "--draft-model", tiny_model, "--prompt-tokens", "1,2,3",
                  "--num-draft-tokens", value], "--num-draft-tokens", value)


def test_missing_draft_directory(tiny_model, tmp_path):
    expect_error(["--model", tiny_model, "--draft-model", tmp_path / "nowhere", "--prompt-tokens", "1,2,3"],
                 "--draft-model", "does not exist")


def test_unlimited_max_tokens(tiny_model):
    """mlx-lm's speculative loop fails on max_tokens -1 (it drafts a negative number of tokens)."""
    expect_error(["--model", tiny_model, "--draft-model", tiny_model, "--prompt-tokens", "1,2,3", "-m", "-1"],
                 "--max-tokens")


def test_prompt_cache_file(chat_model, tmp_path):
    expect_error(["--model", chat_model, "--draft-model", chat_model, "--prompt", "hi",
                  "--prompt-cache-file", tmp_path / "c.safetensors"], "--prompt-cache-file", "--draft-model")


def test_draft_with_another_tokenizer(chat_model, tmp_path):
    """mlx_lm.generate: "Draft model tokenizer does not match model tokenizer." (vocab_size differs)."""
    draft = tmp_path / "draft"
    draft.mkdir()
    for f in chat_model.iterdir():
        if f.suffix in (".safetensors", ".json") and not f.name.startswith(("tokenizer", "vocab", "special")):
            (draft / f.name).symlink_to(f)
    for f in (TOKENIZERS / "gpt2").iterdir():
        shutil.copy(f, draft / f.name)
    expect_error(["--model", chat_model, "--draft-model", draft, "--prompt", "hi"],
                 "--draft-model", "tokenizer does not match")


def test_draft_with_another_vocabulary(tiny_model):
    """Token ids only (no tokenizers to compare): the two models' vocabularies must have one size."""
    expect_error(["--model", tiny_model, "--draft-model", make_fixture("qwen3_vocab640_draft"),
                  "--prompt-tokens", "1,2,3"], "--draft-model", "vocabulary (640 tokens)", "(512)")


def test_untrimmable_main_cache():
    """lfm2's conv layers keep an ArraysCache: mlx-lm refuses with the classes that cannot trim."""
    main, draft = make_fixture("lfm2_bf16"), make_fixture("qwen3_bf16")
    expect_error(["--model", main, "--draft-model", draft, "--prompt-tokens", "1,2,3"],
                 "Speculative decoding requires a trimmable prompt cache (got {'ArraysCache'})")
    from mlx_lm.generate import speculative_generate_step
    from mlx_lm.utils import load_model

    m, _ = load_model(main)
    d, _ = load_model(draft)
    with pytest.raises(ValueError) as refused:
        next(speculative_generate_step(mx.array([1, 2, 3]), m, d))
    assert "Speculative decoding requires a trimmable prompt cache (got {'ArraysCache'})" in str(refused.value)
