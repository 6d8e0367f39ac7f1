"""`mlxrt server --max-memory GB`: a request whose KV cache (prompt + max_tokens) could never fit
beside the weights is answered 503 at once (OpenAI's error shape, Anthropic's on /v1/messages);
one that fits runs; one that fits only once another request has finished waits for it, then runs.
A model loaded by request is sized before it loads: beside a model that stays (--max-models 2) it
does not fit and is refused with 503, the resident one carrying on; replacing it (one resident,
mlx_lm.server's way) it loads, and its requests are admitted against its own size."""
import http.client
import json
import subprocess
import threading
import time

import pytest

import sys

from conftest import FIXTURES, MLXRT_BIN, SOURCE, start_mlxrt, stop

sys.path.insert(0, str(SOURCE / "tools"))
import make_server_fixture  # noqa: E402


def fit(model_dir, *args):
    r = subprocess.run([MLXRT_BIN, "fit", "--model", str(model_dir), "--json", *map(str, args)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def sizes(model_dir):
    # Any request of at most 256 positions holds one 256-position KV buffer per layer.
    one = fit(model_dir, "--context", 256, "--prompt-tokens", 8)
    return one["weights_bytes"], one["kv_cache"]["peak_bytes"]


@pytest.fixture(scope="module")
def server(model_dir, sizes, tmp_path_factory):
    weights, kv256 = sizes
    budget = weights + kv256 * 3 // 2  # one short request at a time, never two
    running = start_mlxrt(model_dir, tmp_path_factory, extra=["--max-memory", f"{budget / 1e9:.9f}"])
    yield running
    stop(running)


def metric(server, name):
    status, _, raw = server.request("GET", "/metrics")
    assert status == 200
    for line in raw.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def settled(server, name, want, seconds=10):
    """The metric once it reads `want` (the generation thread releases a finished request's memory
    just after the client has its answer), or its last value."""
    deadline = time.time() + seconds
    while True:
        got = metric(server, name)
        if got == want or time.time() > deadline:
            return got
        time.sleep(0.05)


def test_request_that_never_fits_gets_503(server, sizes, model_dir):
    weights, kv256 = sizes
    assert metric(server, "mlxrt_memory_budget_bytes") == pytest.approx(weights + kv256 * 3 // 2, abs=1)
    assert metric(server, "mlxrt_memory_weights_bytes") == weights
    status, body = server.post_json("/v1/completions", {"prompt": "Hello", "max_tokens": 4000})
    assert status == 503
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert "KV cache" in err["message"] and "--max-memory" in err["message"]
    status, body = server.post_json("/v1/messages", {"model": str(model_dir), "max_tokens": 4000,
                                                     "messages": [{"role": "user", "content": "Hello"}]})
    assert status == 503
    assert body["type"] == "error" and body["error"]["type"] == "overloaded_error"
    assert "--max-memory" in body["error"]["message"]


def test_request_that_fits_runs(server):
    status, body = server.post_json("/v1/completions", {"prompt": "Hello", "max_tokens": 8, "temperature": 0})
    assert status == 200, body
    assert body["usage"]["completion_tokens"] >= 1
    assert settled(server, "mlxrt_admitted_kv_bytes", 0) == 0


def test_second_request_waits_for_the_first(server):
    waits_before = metric(server, "mlxrt_memory_waits_total")
    request = {"prompt": "Hello there", "max_tokens": 200, "temperature": 0, "stream": True}
    results = {}

    def second():
        results["second"] = server.post_json("/v1/completions", {**request, "stream": False}, timeout=120)

    # The first request is on the model (its first token is out) when the second arrives.
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    conn.request("POST", "/v1/completions", body=json.dumps(request), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    line = resp.readline()
    while line and not line.startswith(b"data: "):  # prompt-progress keepalives come first
        line = resp.readline()
    assert line.startswith(b"data: "), line
    t = threading.Thread(target=second)
    t.start()
    rest = resp.read()
    conn.close()
    t.join(timeout=120)
    assert b"[DONE]" in rest
    status, body = results["second"]
    assert status == 200, body
    assert body["usage"]["completion_tokens"] >= 1
    assert metric(server, "mlxrt_memory_waits_total") == waits_before + 1
    assert settled(server, "mlxrt_admitted_kv_bytes", 0) == 0


def test_model_by_request_is_sized_before_it_loads(model_dir, sizes, tmp_path_factory):
    weights, kv256 = sizes
    other = make_server_fixture.ensure(FIXTURES, name="server_qwen3_seed41", seed=41)  # the same dims
    budget = ["--max-memory", f"{(weights + kv256 * 3 // 2) / 1e9:.9f}"]
    short = {"prompt": "Hello", "max_tokens": 4, "temperature": 0}

    both = start_mlxrt(model_dir, tmp_path_factory, extra=[*budget, "--max-models", "2"])
    try:
        status, body = both.post_json("/v1/completions", {**short, "model": str(other)})
        assert status == 503, body
        message = body["error"]["message"]
        assert "weights" in message and "models that stay loaded" in message and "--max-memory" in message
        status, body = both.post_json("/v1/completions", short)
        assert status == 200, body
        assert metric(both, "mlxrt_memory_weights_bytes") == weights
    finally:
        stop(both)

    one = start_mlxrt(model_dir, tmp_path_factory, extra=budget)
    try:
        status, body = one.post_json("/v1/completions", {**short, "model": str(other)})
        assert status == 200, body
        assert metric(one, "mlxrt_memory_weights_bytes") == weights
        status, body = one.post_json("/v1/completions", {**short, "model": str(other), "max_tokens": 4000})
        assert status == 503, body
        assert "KV cache" in body["error"]["message"]
    finally:
        stop(one)
