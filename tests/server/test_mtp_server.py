"""`mlxrt server --mtp --spec-exact`: each request drafts with the model's own multi-token-prediction
head, and its tokens and logprobs (greedy) equal decoding it alone one token at a time
(`mlxrt generate --prefill-step-size 1`). The model is the tiny qwen3_5 fixture whose head agrees
often (tools/mtp_reference.py's "bigram" head) with the Qwen3 tokenizer copied in; the prompts
tokenize to ids inside its 512-token vocabulary. A request that continues a cached prompt (its
entry carries the head's state) gets the same bytes and drafts as a fresh run; a request with
logits processors, or no drafts, is refused."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import one_token_greedy, FIXTURES, MLXRT_BIN, SOURCE, start_mlxrt, stop

TEXT = "/v1/completions"
MAX_TOKENS = 24
PROMPTS = ["a b c d e f g", "in the", "a b c d e f g in the"]
SHARED = os.environ.get("MLXRT_SHARED_DIR", str(SOURCE.parent / "shared"))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    sys.path.insert(0, str(SOURCE / "tools"))
    import make_fixtures

    make_fixtures.ensure(FIXTURES, ["qwen3_5_mtp_bigram_bf16"])
    out = tmp_path_factory.mktemp("qwen3_5_mtp_tokenizer")
    for f in (FIXTURES / "qwen3_5_mtp_bigram_bf16").iterdir():
        shutil.copy(f, out / f.name)
    for f in (Path(SHARED) / "data" / "tokenizers" / "qwen3").iterdir():
        shutil.copy(f, out / f.name)
    return out


@pytest.fixture(scope="module")
def one_token_runs(model, tmp_path_factory):
    return one_token_greedy(model, PROMPTS, MAX_TOKENS, tmp_path_factory)


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    running = start_mlxrt(model, tmp_path_factory, extra=["--mtp", "--spec-exact", "--num-draft-tokens", "3"])
    yield running
    stop(running)


def served(server, prompt, **extra):
    status, r = server.post_json(TEXT, {"prompt": prompt, "max_tokens": MAX_TOKENS, "logprobs": True, **extra})
    assert status == 200, r
    return [(e["id"], e["logprob"]) for e in r["choices"][0]["logprobs"]["content"]], r["usage"]


def test_requests_equal_one_token_decoding(server, one_token_runs):
    for prompt in PROMPTS:
        got, usage = served(server, prompt)
        want = one_token_runs[prompt]
        assert got == want[:len(got)] and len(got) == len(want), prompt
        # The third prompt extends the first's text, but the first's entry also holds its reply, and
        # a hybrid model's cache cannot be trimmed back: nothing is reused.
        assert usage.get("prompt_tokens_details", {}).get("cached_tokens", 0) == 0
    # Each reply's entry is kept (with the head's pending entries entered): none reused, none lost.
    _, _, raw = server.request("GET", "/metrics")
    assert re.search(r"^mlxrt_prompt_cache_entries 3$", raw.decode(), re.M), raw.decode()


def test_a_request_may_draft_another_count(server, one_token_runs):
    got, _ = served(server, PROMPTS[0], num_draft_tokens=1)
    assert got == one_token_runs[PROMPTS[0]][:len(got)] and len(got) == len(one_token_runs[PROMPTS[0]])


@pytest.mark.parametrize("extra,message", [
    ({"num_draft_tokens": 0}, "num_draft_tokens must be between 1 and 64"),
    ({"repetition_penalty": 1.2}, "runs no logits processors"),
])
def test_refused_requests(server, extra, message):
    status, r = server.post_json(TEXT, {"prompt": PROMPTS[0], "max_tokens": 4, **extra})
    assert status == 400, r
    assert message in r["error"]["message"]


def spec_counters(server):
    _, _, raw = server.request("GET", "/metrics")
    text = raw.decode()
    return [int(re.search(rf"^mlxrt_spec_decode_{name}_tokens_total (\d+)$", text, re.M).group(1))
            for name in ("draft", "accepted")]


def test_a_cached_prompt_continues_with_drafts(server, model, tmp_path_factory):
    # The first request's prompt is cached with the head's state (one token: the entry is the
    # prompt itself, as its reply would not tokenize back to the same ids); the second continues it,
    # so its prompt comes mostly from the cache.
    first = "a b c d e f g in the a b c d e f g"
    status, r = server.post_json(TEXT, {"prompt": first, "max_tokens": 1})
    assert status == 200, r
    second = first + " in the a b"
    before = spec_counters(server)
    got, usage = served(server, second)
    drafted, accepted = (b - a for a, b in zip(before, spec_counters(server)))
    assert usage["prompt_tokens_details"]["cached_tokens"] >= usage["prompt_tokens"] // 2, usage
    assert one_token_greedy(model, [second], MAX_TOKENS, tmp_path_factory)[second] == got
    # A fresh run of the same prompt accepts as many drafts: the head's cache holds every cached
    # position (the bigram head drafts from the token, so both runs draft the same tokens).
    path = tmp_path_factory.mktemp("fresh") / "logprobs.safetensors"
    stdout = subprocess.run([MLXRT_BIN, "generate", "--model", str(model), "--ignore-chat-template", "--prompt",
                             second, "-m", str(MAX_TOKENS), "--mtp", "--num-draft-tokens", "3", "--logprobs-file",
                             str(path)], check=True, capture_output=True, text=True).stdout
    import mlx.core as mx
    want = int(mx.load(str(path))["from_draft"].astype(mx.int32).sum().item())
    assert f"MTP: {want} of {drafted} drafted tokens accepted" in stdout
    assert accepted == want and 0 < accepted < drafted
