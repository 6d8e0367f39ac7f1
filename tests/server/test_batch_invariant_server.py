"""`mlxrt server --batch-invariant` (ours): requests that arrive together, and so are decoded in one
batch, get the answers (text, logprobs, finish reason, usage) that each gets when it is sent alone.

The prompt cache is off (--prompt-cache-size 0) so that a request's answer cannot depend on what
an earlier request left cached; --prefill-step-size 16 makes the longer prompts (60 to 130 tokens) prefill in chunks."""
import http.client
import json
import threading
import time

import pytest

from conftest import start_mlxrt, stop

TEXT = "/v1/completions"
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    running = start_mlxrt(model_dir, tmp_path_factory,
                          extra=("--batch-invariant", "--prompt-cache-size", "0", "--prefill-step-size", "16"))
    yield running
    stop(running)


def requests_for(model_dir):
    words = "the quick brown fox jumps over the lazy dog "
    bodies = [
        (TEXT, {"prompt": "Once upon a time", "max_tokens": 24, "logprobs": True, "top_logprobs": 3}),
        (TEXT, {"prompt": words * 14, "max_tokens": 9, "logprobs": True}),
        (CHAT, {"messages": [{"role": "user", "content": "Hello there. " + words * 7}], "max_tokens": 30, "logprobs": True,
                "top_logprobs": 2}),
        (TEXT, {"prompt": "In the beginning " + words * 9, "max_tokens": 40, "repetition_penalty": 1.3,
                "logprobs": True}),
        (TEXT, {"prompt": "A", "max_tokens": 16, "stop": [" the", "."], "logprobs": True}),
    ]
    return [(path, {"model": str(model_dir), **b}) for path, b in bodies]


def post(port, path, body, timeout=120):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def answer(path, raw):
    r = json.loads(raw)
    c = r["choices"][0]
    text = c["text"] if path == TEXT else c["message"]["content"]
    return text, c["finish_reason"], c.get("logprobs"), r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"]


def batch_size(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        for line in conn.getresponse().read().decode().splitlines():
            if line.startswith("mlxrt_batch_size "):
                return float(line.split()[1])
    finally:
        conn.close()
    return 0.0


def test_concurrent_answers_equal_answers_alone(server, model_dir):
    reqs = requests_for(model_dir)
    alone = []
    for path, body in reqs:
        status, raw = post(server.port, path, body)
        assert status == 200, raw
        alone.append(answer(path, raw))
    assert all(a[2] for a in alone)  # logprobs were returned: they are compared too

    together, errors = {}, []

    def one(i, path, body):
        try:
            status, raw = post(server.port, path, body)
            assert status == 200, raw
            together[i] = answer(path, raw)
        except Exception as e:  # reported below
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=one, args=(i, p, b)) for i, (p, b) in enumerate(reqs)]
    for t in threads:
        t.start()
    peak = 0.0
    while any(t.is_alive() for t in threads):
        peak = max(peak, batch_size(server.port))
        time.sleep(0.005)
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors
    assert peak > 1  # the requests were decoded together
    assert [together[i] for i in range(len(reqs))] == alone
