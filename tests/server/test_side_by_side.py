"""The same requests, greedy, to mlx_lm.server and to mlxrt server on the same model: the same
content, finish_reason, token counts, tool calls, logprobs and streamed chunks, and the same JSON
keys everywhere (ids, timestamps and fingerprints differ by nature)."""
import pytest

from conftest import start_mlx_lm, start_mlxrt, stop

CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


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


def msgs(*contents):
    roles = ["user", "assistant"]
    return [{"role": roles[i % 2], "content": c} for i, c in enumerate(contents)]


CASES = [
    ("chat", CHAT, {"messages": msgs("Hello there"), "max_tokens": 10}),
    ("chat multi-turn with system", CHAT, {"messages": [{"role": "system", "content": "Be brief."}]
                                           + msgs("Hi", "Hello!", "What now?"), "max_tokens": 12}),
    ("chat eos first", CHAT, {"messages": msgs("Stop"), "max_tokens": 10, "logit_bias": {"151645": 100}}),
    ("chat logprobs", CHAT, {"messages": msgs("Numbers"), "max_tokens": 5, "logprobs": True}),
    ("chat top logprobs", CHAT, {"messages": msgs("Numbers"), "max_tokens": 5, "logprobs": True, "top_logprobs": 4}),
    ("chat tool call", CHAT, {"messages": msgs("Weather in Paris?"), "max_tokens": 40, "tools": TOOLS,
                              "chat_template_kwargs": {"enable_thinking": False}}),
    ("chat tool call without tools", CHAT, {"messages": msgs("Plain"), "max_tokens": 40,
                                            "chat_template_kwargs": {"enable_thinking": False}}),
    ("chat tool call cut off", CHAT, {"messages": msgs("Plain"), "max_tokens": 6,
                                      "chat_template_kwargs": {"enable_thinking": False}}),
    ("completion", TEXT, {"prompt": "Once upon a time", "max_tokens": 10}),
    ("completion max_completion_tokens", TEXT, {"prompt": "In the beginning", "max_completion_tokens": 7}),
    ("completion tool script", TEXT, {"prompt": "Call it:\n\n", "max_tokens": 30}),
    ("completion repetition penalty", TEXT, {"prompt": "la la la", "max_tokens": 8, "repetition_penalty": 1.3}),
]


def key_shape(value):
    """The keys of every object, recursively; lists by position."""
    if isinstance(value, dict):
        return {k: key_shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [key_shape(v) for v in value]
    return type(value).__name__ if value is not None else "null"


def comparable(r):
    choice = r["choices"][0]
    out = {"finish_reason": choice["finish_reason"], "usage": {k: r["usage"][k] for k in
                                                               ("prompt_tokens", "completion_tokens", "total_tokens")}}
    if "message" in choice:
        message = dict(choice["message"])
        for call in message.get("tool_calls", []):
            call.pop("id")
        out["message"] = message
    else:
        out["text"] = choice["text"]
    if "logprobs" in choice:
        out["logprobs"] = choice["logprobs"]
    return out


@pytest.mark.parametrize("name,path,body", CASES, ids=[c[0] for c in CASES])
def test_same_response(servers, model_dir, name, path, body):
    ref, ours = servers
    body = {"model": str(model_dir), **body}
    s1, a = ref.post_json(path, body)
    s2, b = ours.post_json(path, body)
    assert s1 == s2 == 200, (a, b)
    assert comparable(b) == comparable(a)
    assert key_shape(b) == key_shape(a)
    assert b["object"] == a["object"] and b["model"] == a["model"]
    assert b["id"].split("-")[0] == a["id"].split("-")[0]


STREAM_CASES = [c for c in CASES if c[0] in ("chat", "chat tool call", "completion", "chat eos first")]


@pytest.mark.parametrize("name,path,body", STREAM_CASES, ids=[c[0] for c in STREAM_CASES])
def test_same_stream(servers, model_dir, name, path, body):
    ref, ours = servers
    body = {"model": str(model_dir), **body, "stream": True, "stream_options": {"include_usage": True}}
    a, _ = ref.stream(path, body)
    b, _ = ours.stream(path, body)
    assert a[-1] == b[-1] == "[DONE]"
    assert len(a) == len(b)

    def strip(events):
        out = []
        for e in events[:-1]:
            e = dict(e)
            for k in ("id", "created", "system_fingerprint"):
                e.pop(k)
            # Both report cached_tokens; how much each cache kept depends on its own policy.
            e.get("usage", {}).get("prompt_tokens_details", {}).pop("cached_tokens", None)
            for choice in e["choices"]:
                for call in choice.get("delta", {}).get("tool_calls", []):
                    call.pop("id")
            out.append(e)
        return out

    assert strip(b) == strip(a)
    assert [key_shape(e) for e in b[:-1]] == [key_shape(e) for e in a[:-1]]


@pytest.mark.parametrize("seed", [None, 3])
def test_same_keepalive_comments(servers, model_dir, seed):
    """The SSE comments a stream carries before its first chunk: mlx_lm.server's batched path
    (no seed) reports prompt progress only after a chunk, its one-at-a-time path (a seed) from 0."""
    ref, ours = servers
    prompt = f"A prompt of its own for the keepalive comments, seed {seed}, " + "more words " * 20
    body = {"model": str(model_dir), "prompt": prompt, "max_tokens": 3, "stream": True}
    if seed is not None:
        body["seed"] = seed

    def comments(raw):
        return [block for block in raw.decode().split("\n\n") if block.startswith(":")]

    _, a = ref.stream(TEXT, body)
    _, b = ours.stream(TEXT, body)
    assert comments(b) == comments(a) and comments(a), (comments(a), comments(b))


def test_models_list_keys(servers):
    ref, ours = servers
    _, _, a = ref.request("GET", "/v1/models")
    _, _, b = ours.request("GET", "/v1/models")
    import json
    a, b = json.loads(a), json.loads(b)
    # mlx_lm.server lists the served directory by its absolute path; this server by the directory's
    # name (it does not show where the model is), which requests may name too.
    from pathlib import Path
    assert [(m["id"], m["object"], sorted(m)) for m in b["data"]] == [
        (Path(m["id"]).name, m["object"], sorted(m)) for m in a["data"]]
    assert sorted(b) == sorted(a) and b["object"] == a["object"] == "list"
    assert all("/" not in m["id"] for m in b["data"])
    model = b["data"][-1]["id"]
    status, body = ours.post_json(TEXT, {"model": model, "prompt": "Once", "max_tokens": 2})
    assert status == 200 and body["model"] == model, body
