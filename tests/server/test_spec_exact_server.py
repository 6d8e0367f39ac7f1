"""`mlxrt server --spec-exact`: each request's tokens and logprobs (greedy) equal decoding it alone one
token at a time (`mlxrt generate --prefill-step-size 1` on the same prompt tokens), served alone,
after a prompt-cache hit on an earlier request's prefix, and batched with other requests. On a
float32 copy of the server model, whose matmuls (the BLAS's) depend on the row count: there the
server without the flag gives other bytes."""
import shutil
import threading

import mlx.core as mx
import pytest
from conftest import one_token_greedy, MLXRT_BIN, start_mlxrt, stop

TEXT = "/v1/completions"
MAX_TOKENS = 24
PROMPTS = [
    "The quick brown fox jumps over the lazy dog",
    "The quick brown fox jumps over the lazy dog and then runs into the forest",  # a prefix of the first
    "Numbers: one, two, three",
    "A short one",
    "Another prompt, of another length, that shares nothing with the rest of them at all",
]


@pytest.fixture(scope="module")
def fp32_model(model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("server_qwen3_fp32")
    for f in model_dir.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, out / f.name)
    weights = mx.load(str(model_dir / "model.safetensors"))
    mx.save_safetensors(str(out / "model.safetensors"), {k: v.astype(mx.float32) for k, v in weights.items()},
                        metadata={"format": "mlx"})
    return out


@pytest.fixture(scope="module")
def server(fp32_model, tmp_path_factory):
    running = start_mlxrt(fp32_model, tmp_path_factory, extra=["--spec-exact"])
    yield running
    stop(running)


@pytest.fixture(scope="module")
def one_token_runs(fp32_model, tmp_path_factory):
    return one_token_greedy(fp32_model, PROMPTS, MAX_TOKENS, tmp_path_factory)


def served(server, prompt):
    status, r = server.post_json(TEXT, {"prompt": prompt, "max_tokens": MAX_TOKENS, "logprobs": True})
    assert status == 200, r
    return [(e["id"], e["logprob"]) for e in r["choices"][0]["logprobs"]["content"]], r["usage"]


def test_alone_and_after_a_prompt_cache_hit(server, one_token_runs):
    for prompt in PROMPTS[:2]:
        got, usage = served(server, prompt)
        assert got == one_token_runs[prompt][:len(got)] and len(got) == len(one_token_runs[prompt]), prompt
    # The second prompt extends the first: the server reused the first request's cache.
    assert usage.get("prompt_tokens_details", {}).get("cached_tokens", 0) > 0


def batched(server):
    results = {}

    def ask(prompt):
        results[prompt] = served(server, prompt)[0]

    threads = [threading.Thread(target=ask, args=(p,)) for p in PROMPTS[2:] * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def test_batched_requests(server, one_token_runs):
    results = batched(server)
    for prompt in PROMPTS[2:]:
        assert results[prompt] == one_token_runs[prompt], prompt


def test_without_the_flag_the_bytes_differ(fp32_model, one_token_runs, tmp_path_factory):
    """That the comparisons above can fail: the plain server's chunked prefill and batches do not
    give a float32 model's one-token bytes."""
    plain = start_mlxrt(fp32_model, tmp_path_factory)
    try:
        results = batched(plain)
    finally:
        stop(plain)
    assert any(results[p] != one_token_runs[p] for p in PROMPTS[2:])
