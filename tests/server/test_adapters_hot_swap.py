"""`--adapters NAME=DIR ...`: several mlx_lm.lora adapters preloaded beside the model, chosen per
request by the `adapters` field or a model name "<model>@<name>". Each request, alternating between
adapters and the plain model, gives the tokens and logprobs of `mlxrt generate --adapter-path DIR`
for the same prompt (generate is byte-equal to mlx-lm with the adapter); the prompt cache never
hands one adapter's KV to another. Concurrent requests for different adapters share one batch. An unknown adapter is a 4xx in the API's own shape, and an
adapter trained on another base model stops the server at start with an error naming it."""
import json
import subprocess
import sys
import threading
import time

import mlx.core as mx
import numpy as np
import pytest

from conftest import FIXTURES, MLXRT_BIN, SOURCE, free_port, start_mlxrt, stop

sys.path.insert(0, str(SOURCE / "tools"))

TEXT = "/v1/completions"
# Two adapters of the server fixture: LoRA on every layer, DoRA on the last one.
SPECS = {"alpha": {"type": "lora", "num_layers": -1, "seed": 21, "lr": 5e-2},
         "beta": {"type": "dora", "num_layers": 1, "seed": 22, "lr": 5e-2}}
PROMPTS = ["Once upon a time", "In the beginning there was"]
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def adapters(model_dir):
    import make_fixtures
    from mlx_lm.utils import load_model

    out = {}
    for name, spec in SPECS.items():
        path = FIXTURES / "server_adapters" / name
        stamp = path / "adapter-fixture.json"
        want = json.dumps({**spec, "model": str(model_dir)}, sort_keys=True)
        if not (stamp.exists() and stamp.read_text() == want):
            model, config = load_model(model_dir)
            make_fixtures.train_adapter(model, config, path, spec)
            stamp.write_text(want)
        out[name] = path
    return out


@pytest.fixture(scope="module")
def server(model_dir, adapters, tmp_path_factory):
    running = start_mlxrt(model_dir, tmp_path_factory,
                          extra=["--adapters", *(f"{name}={path}" for name, path in adapters.items())])
    yield running
    stop(running)


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def reference(model_dir, adapters, tokenizer, tmp_path_factory):
    """(tokens, logprobs [T, vocab]) of `mlxrt generate --temp 0` on the prompt's tokens, per adapter
    (None: the plain model)."""
    work = tmp_path_factory.mktemp("generate")
    memo = {}

    def get(adapter, prompt):
        if (adapter, prompt) not in memo:
            out = work / f"{adapter}-{len(memo)}.safetensors"
            ids = tokenizer.encode(prompt)
            cmd = [MLXRT_BIN, "generate", "--model", str(model_dir), "--prompt-tokens", ",".join(map(str, ids)),
                   "-m", str(MAX_TOKENS), "--temp", "0", "--logprobs-file", str(out)]
            if adapter:
                cmd += ["--adapter-path", str(adapters[adapter])]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr
            logprobs = mx.load(str(out))["logprobs"]
            # Greedy: each generated token is its row's argmax (what the sampler took).
            memo[(adapter, prompt)] = mx.argmax(logprobs, axis=-1).tolist(), logprobs
        return memo[(adapter, prompt)]
    return get


# (adapter, prompt index, how the request names it)
ORDER = [("alpha", 0, "field"), ("beta", 0, "model"), (None, 0, None), ("alpha", 0, "model"),
         ("beta", 1, "field"), ("alpha", 1, "field"), (None, 1, None), ("beta", 0, "field")]


def test_alternating_adapters_equal_generate(server, model_dir, reference):
    answers = {}
    for adapter, p, how in ORDER:
        body = {"prompt": PROMPTS[p], "max_tokens": MAX_TOKENS, "temperature": 0.0, "logprobs": True}
        if how == "field":
            body["adapters"] = adapter
        elif how == "model":
            body["model"] = f"{model_dir}@{adapter}"
        status, got = server.post_json(TEXT, body)
        assert status == 200, got
        content = got["choices"][0]["logprobs"]["content"]
        tokens = [c["id"] for c in content]
        want_tokens, want_logprobs = reference(adapter, PROMPTS[p])
        if got["choices"][0]["finish_reason"] == "stop" and len(tokens) == len(want_tokens) + 1:
            # The answer ended on an end-of-sequence token: the server lists it with its logprob (as
            # mlx_lm.server does), generate stops before it.
            tokens, content = tokens[:-1], content[:-1]
        assert tokens == want_tokens, (adapter, p, how)
        rows = np.array(want_logprobs.astype(mx.float32))
        want = np.array([rows[i, t] for i, t in enumerate(want_tokens)], dtype=np.float32)
        assert np.array([c["logprob"] for c in content], dtype=np.float64).astype(np.float32).tobytes() == want.tobytes()
        answers.setdefault(p, {})[adapter] = tokens
    # The adapters change the answers (so equality above tells them apart).
    for by_adapter in answers.values():
        assert len({tuple(t) for t in by_adapter.values()}) == len(by_adapter), by_adapter


def check_answer(got, adapter, p, reference):
    content = got["choices"][0]["logprobs"]["content"]
    tokens = [c["id"] for c in content]
    want_tokens, want_logprobs = reference(adapter, PROMPTS[p])
    if got["choices"][0]["finish_reason"] == "stop" and len(tokens) == len(want_tokens) + 1:
        tokens, content = tokens[:-1], content[:-1]
    assert tokens == want_tokens, (adapter, p)
    rows = np.array(want_logprobs.astype(mx.float32))
    want = np.array([rows[i, t] for i, t in enumerate(want_tokens)], dtype=np.float32)
    assert np.array([c["logprob"] for c in content], dtype=np.float64).astype(np.float32).tobytes() == want.tobytes()


def test_concurrent_requests_share_one_batch_across_adapters(server, reference, tokenizer):
    """Requests for several adapters at once share one batch: each row computes with its own
    request's adapter (or none); every answer still equals `generate --adapter-path` of its own
    adapter. A long request of the plain model holds the batch open while the others arrive, so
    that they join it (one model per batch would make them wait for it to drain)."""
    jobs = [(adapter, p) for adapter in ("alpha", None, "beta") for p in (0, 1, 0, 1)]
    results, errors = {}, []

    def joins():
        _, _, raw = server.request("GET", "/metrics")
        return sum(float(line.split()[1]) for line in raw.decode().splitlines()
                   if line.startswith("mlxrt_mixed_adapter_joins_total "))

    def one(i, adapter, p, max_tokens=MAX_TOKENS, **extra):
        body = {"prompt": PROMPTS[p], "max_tokens": max_tokens, "temperature": 0.0, "logprobs": True, **extra}
        if adapter:
            body["adapters"] = adapter
        try:
            results[i] = server.post_json(TEXT, body, timeout=120)
        except Exception as e:  # reported below
            errors.append(repr(e))

    before = joins()
    holder = threading.Thread(target=one, args=(-1, None, 0, 400),
                              kwargs={"logit_bias": {str(tokenizer.eos_token_id): -100}})
    holder.start()
    deadline = time.time() + 60
    while time.time() < deadline:  # until the holder is on the model
        _, _, raw = server.request("GET", "/metrics")
        if any(line.startswith("mlxrt_batch_size ") and float(line.split()[1]) >= 1
               for line in raw.decode().splitlines()):
            break
        time.sleep(0.005)
    threads = [threading.Thread(target=one, args=(i, a, p)) for i, (a, p) in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads + [holder]:
        t.join(timeout=180)
    assert not errors, errors
    for i, (adapter, p) in enumerate(jobs):
        status, got = results[i]
        assert status == 200, got
        check_answer(got, adapter, p, reference)
    # Every adapter request joined a batch holding another adapter's rows (the holder's at least).
    assert joins() - before >= 8


def test_prompt_cache_is_per_adapter(server):
    prompt = "A prompt long enough to be cached, then asked again with another adapter"
    body = {"prompt": prompt, "max_tokens": 2, "temperature": 0.0}
    cached = {}
    for adapter in ("alpha", "beta", "alpha"):
        status, got = server.post_json(TEXT, {**body, "adapters": adapter})
        assert status == 200, got
        cached.setdefault(adapter, []).append(got["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0))
    assert cached["beta"] == [0]  # alpha's entry for the same prompt is not reused
    assert cached["alpha"][0] == 0 and cached["alpha"][1] > 0


@pytest.mark.parametrize("body,status,param", [
    ({"adapters": "gamma"}, 400, "adapters"),
    ({"adapters": 3}, 400, "adapters"),
    ({"model": "default_model@gamma"}, 404, "model"),
    ({"adapters": "alpha", "model": "default_model@beta"}, 400, "adapters"),
])
def test_unknown_adapter_openai_shape(server, body, status, param):
    got_status, err = server.post_json(TEXT, {"prompt": "hi", "max_tokens": 1, **body})
    assert got_status == status, err
    assert err["error"]["param"] == param and err["error"]["message"], err


def test_anthropic_api_picks_adapter(server):
    body = {"max_tokens": 2, "messages": [{"role": "user", "content": "Hello"}]}
    status, ok = server.post_json("/v1/messages", {**body, "model": "default_model@alpha"})
    assert status == 200 and ok["type"] == "message", ok
    status, err = server.post_json("/v1/messages", {**body, "model": "default_model@gamma"})
    assert status == 404 and err["type"] == "error" and "gamma" in err["error"]["message"], err


def test_adapter_of_another_base_refused_at_start(model_dir):
    import fixture_dirs
    other = fixture_dirs.fixture_dir("qwen3_bf16_lora") / "adapter"  # hidden size 128, the server's is 64
    proc = subprocess.run([MLXRT_BIN, "server", "--model", str(model_dir), "--port", str(free_port()),
                           "--adapters", f"wide={other}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "adapter 'wide'" in proc.stderr and "does not fit the model" in proc.stderr, proc.stderr


@pytest.mark.parametrize("spec,message", [("noequals", "expected NAME=DIR"), ("a@b=x", "not a usable adapter name")])
def test_bad_adapters_flag(model_dir, spec, message):
    proc = subprocess.run([MLXRT_BIN, "server", "--model", str(model_dir), "--port", str(free_port()),
                           "--adapters", spec], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
