"""`--batch-invariant` (ours): each request of a batch gives the tokens and logprobs of its solo
`mlxrt generate` run, whatever it was batched with.

The requests differ in prompt length and max_tokens, and the batch is narrower than the request
list (--completion-batch-size 3, --prefill-batch-size 2), so rows join at different steps as others
leave. Prompts are longer than --prefill-step-size: the solo run's chunked prefill must be the one
the batched row gets. What is guaranteed: greedy rows, and sampled rows that carry their own
"seed" (their sampler then draws from its own PRNG, seeded as `mlxrt generate --seed` seeds it).
Sampled rows without a seed share the generator's PRNG, so their draws depend on their batch-mates:
no guarantee there (mlx-lm's batch has no per-request seed at all).

The logprob compared is the sampled token's, as batch-generate prints it (the model's dtype read
exactly as float32), against the same entry of the solo run's --logprobs-file row."""
import json

import mlx.core as mx
import pytest
from conftest import make_fixture, run_mlxrt

STEP = 16  # --prefill-step-size: the longer prompts below are prefilled in several chunks


def prompt(n, k):
    return [1] + [10 + (31 * k + 7 * j) % 500 for j in range(n - 1)]


# Greedy rows of different lengths. (On MLX's CPU backend mlx-lm's batch of these, which the default
# mode equals, happens to give the solo rows too: what tells the modes apart on the CPU is the seeded
# rows below, and on a GPU also these, where a batched matmul row differs from a 1-row one.)
GREEDY = [
    {"prompt_tokens": prompt(45, 1), "max_tokens": 21},
    {"prompt_tokens": [1, 44], "max_tokens": 9},
    {"prompt_tokens": [3], "max_tokens": 14},
    {"prompt_tokens": prompt(100, 2), "max_tokens": 26},
    {"prompt_tokens": prompt(70, 3), "max_tokens": 12},
    {"prompt_tokens": prompt(130, 4), "max_tokens": 17},
]
# Sampled rows with their own seeds (one with a logits processor), joining last.
SEEDED = [
    {"prompt_tokens": prompt(60, 5), "max_tokens": 15, "seed": 11, "sampler": {"temp": 0.8, "top_p": 0.9}},
    {"prompt_tokens": prompt(20, 6), "max_tokens": 19, "seed": 5, "sampler": {"temp": 1.0, "top_k": 20},
     "logits_processors": {"repetition_penalty": 1.3}},
]
REQUESTS = GREEDY + SEEDED


def solo_flags(r):
    """`mlxrt generate` flags equal to a request's settings."""
    flags = ["-m", r["max_tokens"], "--prefill-step-size", STEP]
    if "seed" in r:
        flags += ["--seed", r["seed"]]
    names = {"temp": "--temp", "top_p": "--top-p", "top_k": "--top-k", "min_p": "--min-p",
             "repetition_penalty": "--repetition-penalty"}
    for k, v in {**r.get("sampler", {}), **r.get("logits_processors", {})}.items():
        flags += [names[k], v]
    return flags


def solo(model, r, tmp_path):
    out = tmp_path / "solo.safetensors"
    proc = run_mlxrt("generate", "--model", model, "--prompt-tokens", ",".join(map(str, r["prompt_tokens"])),
                     "--logprobs-file", out, *solo_flags(r))
    tokens = [int(t) for t in proc.stdout.split("==========\n")[1].split()]
    rows = mx.load(str(out))["logprobs"].astype(mx.float32)
    return tokens, [rows[i, t].item() for i, t in enumerate(tokens)]


def batched(model, requests, tmp_path, *flags):
    path = tmp_path / "requests.json"
    path.write_text(json.dumps({"requests": requests}))
    proc = run_mlxrt("batch-generate", "--model", model, "--requests", path, "--prefill-step-size", STEP,
                     "--completion-batch-size", 3, "--prefill-batch-size", 2, *flags)
    return [json.loads(line) for line in proc.stdout.splitlines()]


@pytest.mark.parametrize("fixture", ["qwen3_bf16", "llama_bf16"])
def test_each_row_equals_its_solo_run(fixture, tmp_path):
    model = make_fixture(fixture)
    rows = batched(model, REQUESTS, tmp_path, "--batch-invariant")
    assert len(rows) == len(REQUESTS)
    for r, row in zip(REQUESTS, rows):
        tokens, logprobs = solo(model, r, tmp_path)
        assert tokens, "the solo run generated nothing: the comparison would be empty"
        assert row["tokens"] == tokens, r
        assert row["logprobs"] == logprobs, r


def test_rows_do_not_depend_on_their_batch(tmp_path):
    """The same request batched with other requests (in another position) gives the same row."""
    model = make_fixture("qwen3_bf16")
    first = batched(model, REQUESTS, tmp_path, "--batch-invariant")
    other = [REQUESTS[6], {"prompt_tokens": prompt(200, 9), "max_tokens": 40}, REQUESTS[3]]
    second = batched(model, other, tmp_path, "--batch-invariant")
    assert second[0] == first[6]
    assert second[2] == first[3]


def test_request_seed_needs_batch_invariant(tmp_path):
    path = tmp_path / "requests.json"
    path.write_text(json.dumps({"requests": [{"prompt_tokens": [1, 2], "seed": 3}]}))
    proc = run_mlxrt("batch-generate", "--model", make_fixture("qwen3_bf16"), "--requests", path, check=False)
    assert proc.returncode != 0
    assert "requests[0].seed" in proc.stderr and "--batch-invariant" in proc.stderr


def test_request_seed_must_be_a_non_negative_integer(tmp_path):
    path = tmp_path / "requests.json"
    path.write_text(json.dumps({"requests": [{"prompt_tokens": [1, 2], "seed": -1}]}))
    proc = run_mlxrt("batch-generate", "--model", make_fixture("qwen3_bf16"), "--requests", path,
                     "--batch-invariant", check=False)
    assert proc.returncode != 0
    assert "requests[0].seed: expected a non-negative integer" in proc.stderr
