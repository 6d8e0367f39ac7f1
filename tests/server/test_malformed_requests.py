"""Malformed requests: every case gets the status mlx_lm.server would give (or a 4xx where
mlx_lm.server would crash or answer 404 for a bad message), an OpenAI-shaped JSON error body,
and an answer within seconds; the server stays healthy afterwards."""
import json
from pathlib import Path
import socket

import pytest

from conftest import start_mlxrt, stop

CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
MSG = [{"role": "user", "content": "hi"}]


def chat(**fields):
    return {"messages": MSG, "max_tokens": 2, **fields}


# (name, path, body: dict/list/str-as-raw-JSON-text, expected status)
LONG_TEXT = "the quick brown fox jumps over the lazy dog " * 12  # ~110 tokens, over --max-prompt-tokens

JSON_CASES = [
    ("prompt over --max-prompt-tokens", TEXT, {"prompt": LONG_TEXT, "max_tokens": 2}, 400),
    ("chat prompt over --max-prompt-tokens", CHAT, chat(messages=[{"role": "user", "content": LONG_TEXT}]), 400),
    ("truncated json", CHAT, "{", 400),
    ("empty body", CHAT, "", 400),
    ("json array", CHAT, "[]", 400),
    ("json string", CHAT, '"hello"', 400),
    ("json number", CHAT, "5", 400),
    ("json null", CHAT, "null", 400),
    ("trailing garbage", CHAT, '{"messages": []} x', 400),
    ("invalid utf-8", CHAT, b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400),
    ("missing messages", CHAT, {}, 400),
    ("messages not a list", CHAT, {"messages": "hi"}, 400),
    ("messages empty", CHAT, {"messages": []}, 400),
    ("message not an object", CHAT, {"messages": ["hi"]}, 400),
    ("message without role", CHAT, {"messages": [{"content": "x"}]}, 400),
    ("role not a string", CHAT, {"messages": [{"role": 1, "content": "x"}]}, 400),
    ("content a number", CHAT, {"messages": [{"role": "user", "content": 5}]}, 400),
    ("image content part", CHAT, {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}, 400),
    ("text part without text", CHAT, {"messages": [{"role": "user", "content": [{"type": "text"}]}]}, 400),
    ("tool call arguments not json", CHAT, {"messages": [
        {"role": "assistant", "content": None,
         "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]}, 400),
    ("stream a string", CHAT, chat(stream="yes"), 400),
    ("stream an int", CHAT, chat(stream=1), 400),
    ("max_tokens a string", CHAT, chat(max_tokens="10"), 400),
    ("max_tokens zero", CHAT, chat(max_tokens=0), 400),
    ("max_tokens negative", CHAT, chat(max_tokens=-5), 400),
    ("max_tokens a float", CHAT, chat(max_tokens=1.5), 400),
    ("max_tokens a bool", CHAT, chat(max_tokens=True), 400),
    ("max_tokens huge", CHAT, chat(max_tokens=10**30), 400),
    ("max_completion_tokens a string", CHAT, chat(max_completion_tokens="x"), 400),
    ("temperature negative", CHAT, chat(temperature=-1), 400),
    ("temperature a string", CHAT, chat(temperature="hot"), 400),
    ("top_p above 1", CHAT, chat(top_p=1.5), 400),
    ("top_p negative", CHAT, chat(top_p=-0.1), 400),
    ("top_k negative", CHAT, chat(top_k=-1), 400),
    ("top_k a float", CHAT, chat(top_k=2.5), 400),
    ("min_p above 1", CHAT, chat(min_p=2), 400),
    ("repetition_penalty negative", CHAT, chat(repetition_penalty=-1), 400),
    ("repetition_context_size negative", CHAT, chat(repetition_context_size=-1), 400),
    ("presence_penalty a string", CHAT, chat(presence_penalty="x"), 400),
    ("frequency_penalty a list", CHAT, chat(frequency_penalty=[]), 400),
    ("logprobs a string", CHAT, chat(logprobs="true"), 400),
    ("top_logprobs above 11", CHAT, chat(top_logprobs=12), 400),
    ("top_logprobs below -1", CHAT, chat(top_logprobs=-2), 400),
    ("xtc_probability above 1", CHAT, chat(xtc_probability=2), 400),
    ("xtc_threshold negative", CHAT, chat(xtc_threshold=-1), 400),
    ("model a number", CHAT, chat(model=5), 400),
    ("seed a string", CHAT, chat(seed="abc"), 400),
    ("seed a float", CHAT, chat(seed=1.5), 400),
    ("logit_bias a list", CHAT, chat(logit_bias=[]), 400),
    ("logit_bias key not an id", CHAT, chat(logit_bias={"abc": 1}), 400),
    ("logit_bias value a string", CHAT, chat(logit_bias={"5": "x"}), 400),
    ("logit_bias id outside the vocabulary", CHAT, chat(logit_bias={"99999999": 1}), 400),
    ("stop a number", CHAT, chat(stop=5), 400),
    ("stop a list of numbers", CHAT, chat(stop=[1, 2]), 400),
    ("tools a string", CHAT, chat(tools="x"), 400),
    ("role_mapping a string", CHAT, chat(role_mapping="x"), 400),
    ("chat_template_kwargs a string", CHAT, chat(chat_template_kwargs="x"), 400),
    ("stream_options a string", CHAT, chat(stream=True, stream_options="x"), 400),
    ("include_usage a string", CHAT, chat(stream=True, stream_options={"include_usage": "yes"}), 400),
    ("adapters given", CHAT, chat(adapters="some/adapter"), 400),
    ("draft model given", CHAT, chat(draft_model="some/draft"), 400),
    ("model not served", CHAT, chat(model="someone/else"), 404),
    ("missing prompt", TEXT, {"max_tokens": 2}, 400),
    ("prompt a number", TEXT, {"prompt": 5}, 400),
    ("prompt a list", TEXT, {"prompt": ["a"]}, 400),
    ("prompt empty", TEXT, {"prompt": ""}, 400),
    ("deeply nested json", CHAT, "[" * 100000 + "]" * 100000, 400),
    ("a number that overflows", CHAT, json.dumps(chat())[:-1] + ', "temperature": 1e999}', 400),
    ("unknown POST route", "/v1/unknown", chat(), 404),
    ("POST to /health", "/health", chat(), 404),
]


def raw_exchange(port, data, timeout=10):
    """Sends raw bytes; returns (status, header bytes, body bytes). Fails if the server does not answer in time."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        # The requests say "Connection: close"; the client keeps its side open until the answer
        # (a half-closed socket races with the server's own close and can lose the response).
        s.sendall(data)
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                break
            if not b:
                break
            chunks.append(b)
            raw = b"".join(chunks)
            head, sep, body = raw.partition(b"\r\n\r\n")
            if sep:
                length = [l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if length and len(body) >= int(length[0].split(b":")[1]):
                    break
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head, "no response"
    return int(head.split(b" ")[1]), head, body


def request_bytes(method, path, body=b"", headers=None, content_length=True, host="127.0.0.1"):
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: close"]
    if content_length:
        lines.append(f"Content-Length: {len(body)}")
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


# (name, raw request, expected status)
def http_cases():
    ok = json.dumps(chat()).encode()
    return [
        ("POST without Content-Length", request_bytes("POST", CHAT, ok, content_length=False), 411),
        ("Content-Length not a number", request_bytes("POST", CHAT, ok, content_length=False,
                                                      headers={"Content-Length": "abc"}), 400),
        ("Content-Length negative", request_bytes("POST", CHAT, ok, content_length=False,
                                                  headers={"Content-Length": "-1"}), 400),
        ("body over the limit (announced)", request_bytes("POST", CHAT, b"", content_length=False,
                                                          headers={"Content-Length": str(64 << 20)}), 413),
        ("body over the limit (sent)", request_bytes("POST", CHAT, b"{" + b" " * (2 << 20) + b"}"), 413),
        ("too many headers", request_bytes("POST", CHAT, ok, headers={f"X-H{i}": "v" for i in range(200)}), 431),
        ("headers too large", request_bytes("POST", CHAT, ok, headers={f"X-Big{i}": "v" * 4000 for i in range(6)}), 431),
        ("one header line over 8 KiB", request_bytes("POST", CHAT, ok, headers={"X-Big": "v" * 20000}), 400),
        ("request URI over 8 KiB", request_bytes("GET", "/v1/models/" + "a" * 20000, content_length=False), 414),
        ("unknown GET route", request_bytes("GET", "/v2/whatever", content_length=False), 404),
        ("GET / with --no-chat-page", request_bytes("GET", "/", content_length=False), 404),
        ("PUT", request_bytes("PUT", CHAT, ok), 501),
        ("DELETE", request_bytes("DELETE", "/v1/models", b""), 501),
        ("PATCH", request_bytes("PATCH", CHAT, ok), 501),
        # A page on another site reaching the loopback server through DNS rebinding or a simple
        # cross-site request (no preflight for these bodies).
        ("Host of another site", request_bytes("POST", CHAT, ok, host="rebind.example:8080"), 403),
        ("Host of another site (GET)", request_bytes("GET", "/v1/models", content_length=False,
                                                     host="rebind.example"), 403),
        ("text/plain body", request_bytes("POST", CHAT, ok, headers={"Content-Type": "text/plain"}), 415),
        ("form body", request_bytes("POST", CHAT, ok,
                                    headers={"Content-Type": "application/x-www-form-urlencoded"}), 415),
    ]


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    running = start_mlxrt(model_dir, tmp_path_factory,
                          extra=["--max-body-bytes", str(1 << 20), "--no-chat-page", "--max-prompt-tokens", "64"])
    yield running
    stop(running)


def check_error_body(body, status):
    payload = json.loads(body)
    err = payload["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str)
    assert "param" in err and err["code"] == status


def test_case_count():
    assert len(JSON_CASES) + len(http_cases()) >= 45


@pytest.mark.parametrize("name,path,body,expected", JSON_CASES, ids=[c[0] for c in JSON_CASES])
def test_json_case(server, name, path, body, expected):
    data = body if isinstance(body, bytes) else body.encode() if isinstance(body, str) else json.dumps(body).encode()
    status, _, raw = server.request("POST", path, data, timeout=10)
    assert status == expected, raw
    check_error_body(raw, expected)


@pytest.mark.parametrize("case", http_cases(), ids=lambda c: c[0] if isinstance(c, tuple) else str(c))
def test_http_case(server, case):
    name, data, expected = case
    status, head, body = raw_exchange(server.port, data)
    assert status == expected, body
    check_error_body(body, expected)
    assert head.lower().count(b"access-control-allow-origin") == 1


def test_server_still_healthy_and_serving(server):
    status, _, body = server.request("GET", "/health")
    assert status == 200
    status, r = server.post_json(CHAT, chat())
    assert status == 200 and r["usage"]["completion_tokens"] == 2


def test_cors_preflight(server):
    status, headers, _ = server.request("OPTIONS", CHAT, headers={"Origin": "http://example.com"})
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == "*"
    assert headers["Access-Control-Allow-Methods"] == "*"


def test_max_prompt_tokens_names_the_limit_in_each_api(server):
    status, _, raw = server.request("POST", TEXT, {"prompt": LONG_TEXT, "max_tokens": 2})
    err = json.loads(raw)["error"]
    assert status == 400 and err["param"] == "prompt" and "--max-prompt-tokens" in err["message"]
    assert "(64, --max-prompt-tokens)" in err["message"]
    status, _, raw = server.request("POST", "/v1/messages", {"model": "default_model", "max_tokens": 2, "messages": [
        {"role": "user", "content": LONG_TEXT}]})
    body = json.loads(raw)
    assert status == 400 and body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "--max-prompt-tokens" in body["error"]["message"]
    status, r = server.post_json(TEXT, {"prompt": "Hello", "max_tokens": 2})  # a short one still runs
    assert status == 200 and r["usage"]["completion_tokens"] == 2


def test_prompt_over_the_context_runs_with_a_warning(model_dir, tmp_path_factory):
    """A prompt longer than max_position_embeddings runs (as under mlx_lm.server, whose tokenizer
    only warns), and the log says so."""
    short = tmp_path_factory.mktemp("short_context")
    for f in model_dir.iterdir():
        if f.name != "config.json":
            (short / f.name).symlink_to(f.resolve())
    config = json.loads((model_dir / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 32}))
    running = start_mlxrt(short, tmp_path_factory, extra=["--no-chat-page"])
    try:
        status, r = running.post_json(TEXT, {"prompt": LONG_TEXT, "max_tokens": 2})
        assert status == 200 and r["usage"]["completion_tokens"] == 2
        log = Path(running.log).read_text()
        assert "more than the model's context of 32 (max_position_embeddings)" in log
    finally:
        stop(running)
