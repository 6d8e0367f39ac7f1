"""`server --warm-up` (issue 14): before the first request the generation thread runs one prompt per
256-token bucket alone, and through the batched path (which unseeded requests take) as a batch of
one per bucket and as batches of 2 .. --prompt-concurrency rows of the first bucket. Where MLX's
prefill attention is not padded (this CPU) the log says it skipped. Either way a request's tokens
and logprobs are the bytes of a server without it."""
import os
import re
from pathlib import Path

import pytest

from conftest import start_mlxrt, stop


def cuda_device():
    try:
        import mlx.core as mx
        return mx.cuda.is_available()
    except (ImportError, AttributeError):
        return False


FLAGS = ("--prefill-step-size", "300", "--prompt-concurrency", "3")


@pytest.fixture(scope="module")
def servers(model_dir, tmp_path_factory):
    plain = start_mlxrt(model_dir, tmp_path_factory, FLAGS)
    try:
        warm = start_mlxrt(model_dir, tmp_path_factory, (*FLAGS, "--warm-up"))
    except Exception:
        stop(plain)
        raise
    yield plain, warm
    stop(warm)
    stop(plain)


def completion(server, prompt, **extra):
    status, body = server.post_json("/v1/completions", {"prompt": prompt, "max_tokens": 6, "temperature": 0,
                                                        "logprobs": True, "top_logprobs": 3, **extra})
    assert status == 200, body
    return body["choices"][0]["text"], body["choices"][0]["logprobs"]


def test_warm_up_logs_what_it_ran_and_keeps_the_bytes(servers):
    plain, warm = servers
    words = "one two three four five six seven eight nine ten "
    for prompt in ("Hello", words * 3, words * 9):
        # Unseeded: the batched path; seeded: served alone.
        assert completion(warm, prompt) == completion(plain, prompt)
        assert completion(warm, prompt, seed=3) == completion(plain, prompt, seed=3)
    lines = [line for line in Path(warm.log).read_text().splitlines() if "warm-up: " in line]
    assert len(lines) == 1, lines
    line = lines[0][lines[0].index("warm-up: "):]
    if cuda_device():
        # Alone: buckets 256, 512 (the step, 300, rounded up) and 768; batched: a batch of one per
        # bucket, then batches of 2 and 3 rows of 256 tokens: 3 + 3 + 2 + 3 prompts. Then (the
        # contiguous masked keys, on unless MLXRT_PAD_MASKED_CONTIGUOUS=0) batches of 1, 2 and 3
        # rows continuing a prompt-cache hit of 1 and of 257 tokens, 5 query counts each: 2 x 6 x 5.
        # With the rows padded to powers of two (on unless MLXRT_PAD_MASKED_ROWS=0) the batches are
        # of 2 and 4 rows, and the prompt-cache hits' of 1, 2 and 4: 3 + 3 + 6 + 2 x 7 x 5.
        if os.environ.get("MLXRT_PAD_MASKED_CONTIGUOUS") == "0":
            prompts = 11
        else:
            prompts = 71 if os.environ.get("MLXRT_PAD_MASKED_ROWS") == "0" else 82
        assert re.match(rf"warm-up: {prompts} prompts of 256\.\.768 tokens in [0-9.]+ s$", line), line
    else:
        assert line.startswith("warm-up: skipped: the prefill attention is not padded here"), line
    assert not any("warm-up: " in line for line in Path(plain.log).read_text().splitlines())
