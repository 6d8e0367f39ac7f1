"""Load and cancellation: 32 concurrent streaming clients all complete with the right content; a
client that disconnects mid-stream (or mid-wait, not streaming) stops its generation at once, so
the server is free for the next request; hundreds of idle connections holding half a header block
do not keep /health or a request waiting. Every test runs against a server of each --join-prefill
mode: between, beside (a joining request prefilled on a second stream, its rows dropped there when
its client leaves) and interleaved (the same on the batch's stream, between the pieces of its steps;
what the default, auto, is on the CPU)."""
import json
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import start_mlxrt, stop

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module", params=["between", "beside", "interleaved"])
def server(model_dir, tmp_path_factory, request):
    running = start_mlxrt(model_dir, tmp_path_factory, extra=("--join-prefill", request.param))
    yield running
    stop(running)


def body(i, max_tokens=8, stream=True):
    return {"messages": [{"role": "user", "content": f"Client number {i % 4}"}], "max_tokens": max_tokens,
            "stream": stream, "stream_options": {"include_usage": True}}


def streamed_text(events):
    text, finish = "", None
    for e in events:
        if e == "[DONE]" or not e["choices"]:
            continue
        text += e["choices"][0]["delta"].get("content", "")
        finish = e["choices"][0]["finish_reason"] or finish
    return text, finish


def test_32_concurrent_streaming_clients(server):
    # The expected text per prompt, one at a time first.
    expected = {}
    for i in range(4):
        status, r = server.post_json(CHAT, body(i, stream=False))
        assert status == 200
        expected[i] = r["choices"][0]["message"]["content"]
    results, errors = {}, []

    def client(i):
        try:
            events, raw = server.stream(CHAT, body(i), timeout=120)
            assert events[-1] == "[DONE]"
            usage = events[-2]["usage"]
            results[i] = (*streamed_text(events), usage["completion_tokens"])
        except Exception as e:  # collected and reported below
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors
    assert len(results) == 32
    for i, (text, finish, n) in results.items():
        assert text == expected[i % 4], i
        assert finish == "length" and n == 8


def open_stream(port, payload):
    data = json.dumps(payload).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def timed_request(server, max_tokens):
    t0 = time.time()
    status, r = server.post_json(CHAT, body(0, max_tokens=max_tokens, stream=False), timeout=120)
    assert status == 200
    return time.time() - t0


def test_disconnect_stops_streaming_generation(server):
    # How long 2000 tokens take when nobody leaves.
    baseline = timed_request(server, 200) * 10
    s = open_stream(server.port, body(0, max_tokens=2000))
    first = s.recv(4096)
    assert b" 200 " in first.split(b"\r\n")[0]
    s.close()
    # The generation stops: the next request is served right away, not after 2000 tokens.
    t = timed_request(server, 2)
    assert t < baseline / 4, (t, baseline)


def test_disconnect_stops_waiting_request(server):
    baseline = timed_request(server, 200) * 10
    s = open_stream(server.port, body(0, max_tokens=2000, stream=False))
    time.sleep(0.3)  # generation is under way
    s.close()
    t = timed_request(server, 2)
    assert t < baseline / 4, (t, baseline)


def test_queued_requests_all_served_in_order_of_arrival(server):
    # Non-streaming requests queued behind each other all complete.
    out = []

    def one(i):
        status, r = server.post_json(CHAT, body(i, max_tokens=4, stream=False), timeout=120)
        out.append((status, r["usage"]["completion_tokens"]))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert out == [(200, 4)] * 8


def test_request_timeout(model_dir, tmp_path_factory):
    running = start_mlxrt(model_dir, tmp_path_factory, extra=["--request-timeout", "1"])
    try:
        t0 = time.time()
        status, r = running.post_json(CHAT, body(0, max_tokens=100000, stream=False), timeout=60)
        assert status == 504 and r["error"]["code"] == 504
        assert time.time() - t0 < 10
        events, _ = running.stream(CHAT, body(0, max_tokens=100000), timeout=60)
        assert events[-1]["error"]["code"] == 504
        # and the server goes on serving
        status, r = running.post_json(CHAT, body(0, max_tokens=2, stream=False))
        assert status == 200
    finally:
        stop(running)


def test_every_mlx_lm_flag_is_accepted():
    import re
    import subprocess
    import sys
    from conftest import MLXRT_BIN
    flags = lambda text: set(re.findall(r"^\s+(--[a-z-]+)", text, re.M))
    ref = subprocess.run([sys.executable, "-m", "mlx_lm", "server", "--help"], capture_output=True, text=True).stdout
    ours = subprocess.run([MLXRT_BIN, "serve", "--help"], capture_output=True, text=True).stdout
    assert len(flags(ref)) > 20
    assert flags(ref) - flags(ours) == set()


@pytest.mark.parametrize("flag", [["--adapter-path", "a"], ["--draft-model", "d"], ["--log-level", "LOUD"],
                                  ["--chat-template-args", "{oops"], ["--prompt-cache-bytes", "lots"],
                                  ["--prefill-buffer-cache", "lots"]])
def test_unsupported_or_bad_flags_fail_cleanly(model_dir, flag):
    import subprocess
    from conftest import MLXRT_BIN
    out = subprocess.run([MLXRT_BIN, "server", "--model", str(model_dir), "--port", "0", *flag],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.startswith("error: ") and flag[0] in out.stderr


def test_bad_batch_order_is_a_clear_parse_error(model_dir):
    import subprocess
    from conftest import MLXRT_BIN
    out = subprocess.run([MLXRT_BIN, "server", "--model", str(model_dir), "--port", "0", "--batch-order", "fifo"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "--batch-order: expected prompts-first or mlx-lm, got 'fifo'" in out.stderr, out.stderr


def test_bad_join_prefill_is_a_clear_parse_error(model_dir):
    import subprocess
    from conftest import MLXRT_BIN
    out = subprocess.run([MLXRT_BIN, "server", "--model", str(model_dir), "--port", "0", "--join-prefill", "aside"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "--join-prefill: expected auto, between, beside or interleaved, got 'aside'" in out.stderr, out.stderr


@pytest.mark.parametrize("flag, mode", [((), "interleaved"), (("--join-prefill", "auto"), "interleaved"),
                                        (("--join-prefill", "between"), "between"),
                                        (("--join-prefill", "interleaved", "--batch-order", "mlx-lm"), "between")])
def test_the_join_prefill_mode_the_server_runs_is_logged(model_dir, tmp_path_factory, flag, mode):
    # auto (and the default) is interleaved on every device; mlx-lm's batch order has no joining path.
    running = start_mlxrt(model_dir, tmp_path_factory, extra=flag)
    try:
        assert f"--join-prefill: {mode}\n" in Path(running.log).read_text()
    finally:
        stop(running)


def test_sigterm_stops_a_busy_server_promptly(model_dir, tmp_path_factory):
    running = start_mlxrt(model_dir, tmp_path_factory)
    answer = {}

    def long_request():
        answer["r"] = running.post_json(CHAT, body(0, max_tokens=100000, stream=False), timeout=60)

    t = threading.Thread(target=long_request)
    t.start()
    time.sleep(1.0)
    t0 = time.time()
    running.proc.terminate()
    running.proc.wait(timeout=30)
    t.join(timeout=30)
    assert time.time() - t0 < 10
    assert running.proc.returncode == 0
    status, r = answer["r"]
    assert status == 503 and r["error"]["code"] == 503


def test_idle_half_header_connections_do_not_starve_the_server(server):
    """200 connections that sent half a header block and went quiet (each holds a thread until the
    read timeout): /health and a completion are still answered at once (threads are added as
    connections arrive, up to --http-threads)."""
    idle = []
    try:
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: applic")
            idle.append(s)
        time.sleep(0.5)  # every one of them is being read now
        t0 = time.monotonic()
        status, _, _ = server.request("GET", "/health", timeout=5)
        assert status == 200 and time.monotonic() - t0 < 2.0
        t0 = time.monotonic()
        status, r = server.post_json(CHAT, body(1, stream=False))
        assert status == 200 and r["usage"]["completion_tokens"] >= 1
        assert time.monotonic() - t0 < 10.0
    finally:
        for s in idle:
            s.close()


def timed_short_request(running):
    """A one-token completion of a one-word prompt: its status and its seconds."""
    t0 = time.monotonic()
    status, _ = running.post_json("/v1/completions", {"prompt": "Hello", "max_tokens": 1}, timeout=300)
    return status, time.monotonic() - t0


def test_long_prompt_does_not_hold_a_short_request_back(model_dir, tmp_path_factory):
    """A long prompt is prefilled a chunk (--prefill-step-size) at a time between the batch's other
    work, as mlx_lm.server's BatchGenerator does: a short request that arrives meanwhile is answered
    after a chunk or two, long before the long prompt's prefill ends."""
    running = start_mlxrt(model_dir, tmp_path_factory, extra=["--prefill-step-size", "256"])
    try:
        done = {}

        def long_request():
            t0 = time.monotonic()
            status, r = running.post_json("/v1/completions", {"prompt": "word " * 6000, "max_tokens": 1}, timeout=300)
            done["long"] = (status, time.monotonic() - t0, r["usage"]["prompt_tokens"])

        t = threading.Thread(target=long_request)
        t.start()
        time.sleep(0.5)
        status, short = timed_short_request(running)
        still_running = t.is_alive()
        t.join(timeout=300)
        assert status == 200 and done["long"][0] == 200 and done["long"][2] > 6000
        assert still_running, done  # answered while the long prompt was still being prefilled
        assert short < done["long"][1] / 3, (short, done)
    finally:
        stop(running)


@pytest.mark.parametrize("mode", ["beside", "interleaved"])
def test_long_prompt_joining_beside_does_not_hold_a_short_request_back(model_dir, tmp_path_factory, mode):
    """With --join-prefill beside (or interleaved), a long prompt that joins a decoding batch is
    prefilled a chunk at a time (the next once the last is done), so a short request that joins
    after it waits for one chunk, not for the whole prefill; the decoding request goes on
    meanwhile."""
    running = start_mlxrt(model_dir, tmp_path_factory,
                          extra=["--prefill-step-size", "256", "--join-prefill", mode, "--log-level", "DEBUG"])
    try:
        done = {}

        def request(name, body):
            t0 = time.monotonic()
            status, r = running.post_json("/v1/completions", body, timeout=300)
            done[name] = (status, time.monotonic() - t0, r["usage"])

        decoding = threading.Thread(target=request, args=(
            "decoding", {"prompt": "Keep going", "max_tokens": 1500, "logit_bias": {"151645": -100}}))
        decoding.start()
        time.sleep(0.5)
        long = threading.Thread(target=request, args=("long", {"prompt": "word " * 6000, "max_tokens": 1}))
        long.start()
        time.sleep(0.5)
        status, short = timed_short_request(running)
        still_prefilling = long.is_alive()
        still_decoding = decoding.is_alive()
        long.join(timeout=300)
        decoding.join(timeout=300)
        assert status == 200 and done["long"][0] == 200 and done["long"][2]["prompt_tokens"] > 6000
        assert done["decoding"][0] == 200 and done["decoding"][2]["completion_tokens"] == 1500
        assert still_prefilling, done  # answered while the long prompt was still being prefilled
        assert still_decoding, done  # ... and the first request decoding, so both joined its batch
        assert short < done["long"][1] / 3, (short, done)
        assert "joined beside" in Path(running.log).read_text()
    finally:
        stop(running)


def test_the_accept_queue_holds_a_burst_of_connections(server):
    """The HTTP library listens with a backlog of 5; the server widens it to 511 once bound, so a few
    hundred clients (re)connecting in the same instant are queued, not dropped and retried by the
    kernel a second later. For a listening socket, ss shows the queue's limit as Send-Q."""
    out = subprocess.run(["ss", "-Hltn", f"sport = :{server.port}"], capture_output=True, text=True,
                         check=True).stdout.split()
    somaxconn = int(open("/proc/sys/net/core/somaxconn").read())  # the kernel's cap on any backlog
    assert out[0] == "LISTEN" and int(out[2]) == min(511, somaxconn) > 5, out


@pytest.mark.parametrize("flag,value,expected", [("--heap-trim-interval", "-1", "a number >= 0"),
                                                  ("--header-timeout", "soon", "a number >= 0"),
                                                  ("--max-prompt-tokens", "0", "a number > 0")])
def test_bad_numbers_are_clear_parse_errors(model_dir, flag, value, expected):
    import subprocess
    from conftest import MLXRT_BIN
    out = subprocess.run([MLXRT_BIN, "server", "--model", str(model_dir), "--port", "0", flag, value],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert f"{flag}: expected {expected}, got '{value}'" in out.stderr, out.stderr
