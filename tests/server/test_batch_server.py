"""Continuous batching in the server: concurrent requests to mlxrt server and to mlx_lm.server (one
start each) give each request the same tokens, text, logprobs and finish reasons, streamed or not,
with per-request stop words, budgets and logprob settings; the requests are on the model together
(the batch grows past one); a request that cannot batch (a seed) waits for the batch to drain and
is served alone. With `--join-prefill beside` (a second mlxrt server), requests that arrive one by
one while a long one decodes are prefilled beside the running batch and merge into it: the same
answers, and the server's log shows they joined that way.

Which requests share a step depends on arrival timing, in mlx_lm.server as in ours. On this CPU
fixture a row's arithmetic does not depend on what it is batched with (tokens and logprobs of
`mlxrt batch-generate` for a batch equal each prompt's solo run, and equal mlx-lm's BatchGenerator:
tests/generate/test_batch_generate.py), so the per-request results are comparable whatever the
composition each server happened to form."""
import http.client
import json
import threading
import time
from pathlib import Path

import pytest

from conftest import start_mlx_lm, start_mlxrt, stop

TEXT = "/v1/completions"
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def servers(model_dir, tmp_path_factory):
    ref = start_mlx_lm(model_dir, tmp_path_factory)
    try:
        ours = start_mlxrt(model_dir, tmp_path_factory)
    except Exception:
        stop(ref)
        raise
    yield ref, ours
    stop(ours)
    stop(ref)


def requests_for(model_dir):
    words = "the quick brown fox jumps over the lazy dog "
    bodies = [
        (TEXT, {"prompt": "Once upon a time", "max_tokens": 24, "logprobs": True, "top_logprobs": 3}),
        (TEXT, {"prompt": words * 6, "max_tokens": 9}),
        (CHAT, {"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 30, "logprobs": True,
                "top_logprobs": 2}),
        (TEXT, {"prompt": "In the beginning " + words, "max_tokens": 40, "repetition_penalty": 1.3}),
        (CHAT, {"messages": [{"role": "user", "content": "Stop early"}], "max_tokens": 20,
                "logit_bias": {"151645": 100}}),
        (TEXT, {"prompt": "A", "max_tokens": 16, "stop": [" the", "."]}),
        # The sampled token's logprob alone (no top list): read from the step's evaluated row.
        (CHAT, {"messages": [{"role": "user", "content": "Only the logprob"}], "max_tokens": 14, "logprobs": True}),
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


def comparable(path, raw, stream):
    """What must match: per choice the text/content, finish reason and logprobs; usage counts."""
    if stream:
        events = [json.loads(b[6:]) for b in raw.decode().split("\n\n") if b.startswith("data: {")]
        out = []
        for e in events:
            for c in e["choices"]:
                out.append((c.get("text", c.get("delta", {}).get("content")), c["finish_reason"], c.get("logprobs")))
            if e.get("usage"):
                out.append(("usage", e["usage"]["prompt_tokens"], e["usage"]["completion_tokens"]))
        return out
    r = json.loads(raw)
    c = r["choices"][0]
    text = c["text"] if path == TEXT else c["message"]["content"]
    return text, c["finish_reason"], c.get("logprobs"), r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"]


def concurrent(server, reqs, stream, peak=None, gap=0.0):
    """Each request on its own thread, request i sent i * gap seconds after the first."""
    out, errors = {}, []

    def one(i, path, body):
        time.sleep(i * gap)
        try:
            b = {**body, "stream": True, "stream_options": {"include_usage": True}} if stream else body
            status, raw = post(server.port, path, b)
            assert status == 200, raw
            out[i] = comparable(path, raw, stream)
        except Exception as e:  # reported below
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=one, args=(i, p, b)) for i, (p, b) in enumerate(reqs)]
    for t in threads:
        t.start()
    if peak is not None:
        while any(t.is_alive() for t in threads):
            status, raw = post_metrics(server.port)
            for line in raw.decode().splitlines():
                if line.startswith("mlxrt_batch_size "):
                    peak.append(float(line.split()[1]))
            time.sleep(0.005)
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors
    return [out[i] for i in range(len(reqs))]


def post_metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_concurrent_requests_equal_mlx_lm_server(servers, model_dir, stream):
    ref, ours = servers
    reqs = requests_for(model_dir)
    peak = []
    got = concurrent(ours, reqs, stream, peak=peak)
    want = concurrent(ref, reqs, stream)
    assert got == want
    assert max(peak) > 1  # the requests were on the model together


@pytest.fixture(scope="module", params=["beside", "interleaved"])
def beside(model_dir, tmp_path_factory, request):
    running = start_mlxrt(model_dir, tmp_path_factory, extra=("--join-prefill", request.param, "--log-level", "DEBUG"))
    yield running
    stop(running)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_requests_joining_beside_a_running_batch(servers, beside, model_dir, stream):
    """A long request decodes; the others arrive one by one while it does, so each is prefilled
    beside the batch (on a second stream, or interleaved with the pieces of the batch's steps on
    its own) and merges into it. Their answers equal mlx_lm.server's."""
    ref, _ = servers
    long = (TEXT, {"model": str(model_dir), "prompt": "Keep going", "max_tokens": 150, "logit_bias": {"151645": -100}})
    reqs = [long] + requests_for(model_dir)
    log = Path(beside.log)
    before = log.read_text().count("joined beside")
    peak = []
    got = concurrent(beside, reqs, stream, peak=peak, gap=0.04)
    want = concurrent(ref, reqs, stream)
    assert got == want
    assert max(peak) > 1
    assert log.read_text().count("joined beside") > before, log.read_text()[-3000:]


def test_unbatchable_request_waits_for_the_batch(servers, model_dir):
    """A seeded request arriving while a batch runs is served alone after it, as mlx_lm.server
    drains its batch first; both answers are whole."""
    ref, ours = servers
    reqs = requests_for(model_dir)[:3]
    seeded = (TEXT, {"model": str(model_dir), "prompt": "Seeded", "max_tokens": 12, "seed": 5, "temperature": 0.0})
    got = concurrent(ours, reqs + [seeded], stream=False)
    want = concurrent(ref, reqs + [seeded], stream=False)
    assert got == want
    assert got[-1][4] == 12


def test_sampled_requests_batch_together(servers, model_dir):
    """Unseeded sampled requests, each with its own sampler, share the batch (on the CPU their rows
    are drawn on more than one thread, BatchGeneratorOptions::sample_streams): every one is answered
    whole, the batch grows past one, and a second round on the same server works too."""
    _, ours = servers
    settings = [{"temperature": 0.7}, {"temperature": 1.0, "top_p": 0.9}, {"temperature": 0.8, "top_k": 20},
                {"temperature": 0.9, "min_p": 0.05}, {"temperature": 0.6, "top_p": 0.8, "top_k": 40}, {}]
    reqs = [(TEXT, {"model": str(model_dir), "prompt": f"Story {i}: once", "max_tokens": 12,
                    "logit_bias": {"151645": -100}, **s}) for i, s in enumerate(settings)]
    for _ in range(2):
        peak = []
        got = concurrent(ours, reqs, stream=False, peak=peak)
        assert [g[1] for g in got] == ["length"] * len(reqs)
        assert [g[4] for g in got] == [12] * len(reqs)
        assert max(peak) > 1
