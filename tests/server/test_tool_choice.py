"""tool_choice that requires a call, enforced by constrained decoding (ours; mlx_lm.server reads no
tool_choice): on the tiny qwen3 model with the real Qwen3 vocabulary and chat template (tool-call
format json_tools), at temperature 1 with a seed, the reply is always one call of an offered tool
whose arguments validate against its parameters: chat completions with "required" and with a named
function (streamed too), the Anthropic API's any / tool, the Responses API's required. Requests that
cannot be honoured are 400s naming the field."""
import json

import jsonschema
import pytest

NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}

WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo", "Lima"]},
                                            "days": {"type": "integer", "enum": [1, 2, 3]}},
           "required": ["city", "days"], "additionalProperties": False}
CLOCK = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}, "seconds": {"type": "boolean"}},
         "required": ["zone", "seconds"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Time", "parameters": CLOCK}}]
SCHEMA_OF = {"get_weather": WEATHER, "get_time": CLOCK}


def chat(server, model_dir, seed, **kw):
    body = {"model": str(model_dir), "messages": [{"role": "user", "content": "What is the weather?"}],
            "max_tokens": 200, "temperature": 1.0, "seed": seed, "tools": TOOLS, **NO_THINKING, **kw}
    return server.post_json("/v1/chat/completions", body, timeout=300)


def check_call(name, arguments):
    assert name in SCHEMA_OF, name
    jsonschema.validate(json.loads(arguments) if isinstance(arguments, str) else arguments, SCHEMA_OF[name])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_required_gives_one_valid_call(mlxrt_server, model_dir, seed):
    status, r = chat(mlxrt_server, model_dir, seed, tool_choice="required")
    assert status == 200, r
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    calls = choice["message"]["tool_calls"]
    assert len(calls) == 1, calls
    check_call(calls[0]["function"]["name"], calls[0]["function"]["arguments"])


def test_named_function_is_the_one_called(mlxrt_server, model_dir):
    for seed in (4, 5):
        status, r = chat(mlxrt_server, model_dir, seed,
                         tool_choice={"type": "function", "function": {"name": "get_time"}})
        assert status == 200, r
        call = r["choices"][0]["message"]["tool_calls"][0]["function"]
        assert call["name"] == "get_time"
        check_call(call["name"], call["arguments"])


def test_streamed_required_call(mlxrt_server, model_dir):
    events, _ = mlxrt_server.stream("/v1/chat/completions", {
        "model": str(model_dir), "messages": [{"role": "user", "content": "hi"}], "stream": True, "tools": TOOLS,
        "tool_choice": "required", "max_tokens": 200, "temperature": 1.0, "seed": 6, **NO_THINKING}, timeout=300)
    events = [e for e in events if isinstance(e, dict) and e.get("choices")]
    calls = [c for e in events for c in e["choices"][0]["delta"].get("tool_calls") or []]
    assert calls, events
    check_call(calls[0]["function"]["name"], "".join(c["function"].get("arguments") or "" for c in calls))
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"][0].get("finish_reason")] == ["tool_calls"]


def test_anthropic_any_and_tool(mlxrt_server, model_dir):
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    for choice, want in (({"type": "any"}, None), ({"type": "tool", "name": "get_weather"}, "get_weather")):
        status, r = mlxrt_server.post_json("/v1/messages", {
            "model": str(model_dir), "max_tokens": 200, "temperature": 1.0, "tools": tools, "tool_choice": choice,
            "messages": [{"role": "user", "content": "Weather in Oslo?"}], **NO_THINKING}, timeout=300)
        assert status == 200, r
        uses = [b for b in r["content"] if b["type"] == "tool_use"]
        assert r["stop_reason"] == "tool_use" and len(uses) == 1, r
        check_call(uses[0]["name"], uses[0]["input"])
        if want:
            assert uses[0]["name"] == want


def test_responses_required(mlxrt_server, model_dir):
    tools = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]}
             for t in TOOLS]
    status, r = mlxrt_server.post_json("/v1/responses", {
        "model": str(model_dir), "input": "Time in CET?", "tools": tools, "tool_choice": "required",
        "temperature": 1.0, "seed": 7, "max_output_tokens": 200, "reasoning": {"effort": "none"}}, timeout=300)
    assert status == 200, r
    calls = [item for item in r["output"] if item["type"] == "function_call"]
    assert len(calls) == 1, r
    check_call(calls[0]["name"], calls[0]["arguments"])


@pytest.mark.parametrize("extra, field", [
    ({"tool_choice": "required", "tools": None}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice.function.name"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
    ({"tool_choice": "required", "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"x": {"not": {"type": "null"}}}}}}]},
     "tools"),
])
def test_bad_tool_choice_is_a_400(mlxrt_server, model_dir, extra, field):
    body = {"model": str(model_dir), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
            "tools": TOOLS, **extra}
    if body["tools"] is None:
        del body["tools"]
    status, r = mlxrt_server.post_json("/v1/chat/completions", body)
    assert status == 400, r
    # Errors found while the request is checked carry the field as `param`; those found when its
    # constraint is compiled name it in the message.
    assert r["error"]["param"] == field or r["error"]["message"].startswith(field), r
