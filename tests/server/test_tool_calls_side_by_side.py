"""Each tool-call format of mlx-lm, end to end against mlx_lm.server: per format a tiny scripted
model (tools/make_server_fixture.py) whose chat template selects the format as the real models'
templates do (the format's markers in a template comment, or tokenizer_config's tool_parser_type
where mlx-lm reads it from there) and whose greedy output after the chat prompt is a tool call in
that format, with content around it. The same requests to both servers, plain and streamed: the
same content, tool_calls (name, arguments text, model-given ids), finish_reason, usage and chunks.
Cut off at several lengths, and scripted malformed calls, must come back as mlx_lm.server returns
them (never a server error)."""
import http.client
import os
import re
import sys

import pytest

from conftest import FIXTURES, SOURCE, start_mlx_lm, start_mlxrt, stop

sys.path.insert(0, str(SOURCE / "tools"))
import make_server_fixture  # noqa: E402

CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}]

# format: (template comment, tokenizer_config keys, the scripted output)
FORMATS = {
    "qwen3_coder": ("<tool_call>\n<function=", None,
                    "Checking.<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"),
    "mistral": ("[TOOL_CALLS]", None, 'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}'),
    "gemma4": ("<|tool_call> <tool_call|>", None,
               'On it.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>'),
    "function_gemma": ("<start_function_call>", None,
                       "<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}<end_function_call>"),
    "pythonic": ("<|tool_call_start|>", None,
                 '<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|>Done.'),
    "glm47": ("<arg_key>", None,
              "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
              "<arg_value>3</arg_value></tool_call>"),
    "kimi_k2": ("<|tool_calls_section_begin|>", None,
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
                '{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'),
    "minimax_m2": ("<minimax:tool_call>", None,
                   '<minimax:tool_call><invoke name="get_weather"><parameter name="city">Paris</parameter>'
                   '<parameter name="days">3</parameter></invoke></minimax:tool_call>'),
    "minicpm5": ('<function name=" <param name="', None,
                 'Yes.<function name="get_weather"><param name="city">Paris</param><param name="days">3</param>'
                 "</function>"),
    "longcat": ("<longcat_tool_call>", None,
                "<longcat_tool_call>get_weather<longcat_arg_key>city</longcat_arg_key><longcat_arg_value>Paris"
                "</longcat_arg_value></longcat_tool_call>"),
    "muse_spark": ("<atem:function_calls>", None,
                   '<atem:function_calls><atem:invoke name="get_weather"><atem:parameter name="city">"Paris"'
                   "</atem:parameter></atem:invoke></atem:function_calls>"),
    "kimi_k3": (None, {"tool_parser_type": "kimi_k3"},
                '<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" '
                'type="string"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>'),
    "laguna": (None, {"tool_parser_type": "laguna"},
               "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"),
}

# Calls the format's parser rejects (ValueError in mlx-lm: the call is left out, the text is not
# content either): (the format, template comment, tokenizer_config keys, the scripted output).
MALFORMED = {
    "qwen3_coder_bad_integer": ("<tool_call>\n<function=", None,
                                "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                                "<parameter=days>\n3.5\n</parameter>\n</function>\n</tool_call>Then."),
    "mistral_bad_json": ("[TOOL_CALLS]", None, 'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": Paris}'),
    "gemma4_bad_arguments": ("<|tool_call> <tool_call|>", None,
                             "On it.<|tool_call>call:get_weather{city:Paris}<tool_call|>And more."),
    "function_gemma_no_colon": ("<start_function_call>", None,
                                "<start_function_call>call:get_weather{Paris}<end_function_call>"),
    "pythonic_no_call": ("<|tool_call_start|>", None, "<|tool_call_start|>get_weather with Paris<|tool_call_end|>ok"),
    "kimi_k2_no_name": ("<|tool_calls_section_begin|>", None,
                        "<|tool_calls_section_begin|><|tool_call_begin|>get_weather<|tool_call_end|>"
                        "<|tool_calls_section_end|>"),
    "minimax_m2_no_invoke": ("<minimax:tool_call>", None, "<minimax:tool_call>get_weather(Paris)</minimax:tool_call>"),
    "kimi_k3_json_list": (None, {"tool_parser_type": "kimi_k3"},
                          '<|open|>tools<|sep|><|open|>call tool="get_weather"<|sep|><|open|>json<|sep|>[1]'
                          "<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"),
}
ALL_SCRIPTS = {**{k: (*v, True) for k, v in FORMATS.items()}, **{k: (*v, False) for k, v in MALFORMED.items()}}
# Each script starts a pair of servers: `make test` takes three of the most used formats and a malformed
# call (tests/unit/server's parser tests cover every format against mlx-lm's parsers); `make test-long`
# (MLXRT_TOOL_FORMATS=all) serves them all.
QUICK = ["qwen3_coder", "mistral", "gemma4", "mistral_bad_json"]
SCRIPTS = ALL_SCRIPTS if os.environ.get("MLXRT_TOOL_FORMATS") == "all" else {k: ALL_SCRIPTS[k] for k in QUICK}

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


@pytest.fixture(scope="module", params=list(SCRIPTS))
def served(request, tmp_path_factory):
    """(script name, model dir, script length in tokens, mlx_lm.server, mlxrt server)."""
    name = request.param
    comment, config, script, _ = SCRIPTS[name]
    model = make_server_fixture.ensure(FIXTURES, f"server_tools_{name}", script=script, template_comment=comment,
                                       tokenizer_config=config)
    import json
    chain = json.loads((model / "script.json").read_text())["chain"]
    ref = start_mlx_lm(model, tmp_path_factory)
    try:
        ours = start_mlxrt(model, tmp_path_factory)
    except Exception:
        stop(ref)
        raise
    yield name, model, len(chain) - 1, ref, ours
    stop(ours)
    stop(ref)


def no_uuid_ids(calls):
    """Tool calls with server-made (random) ids removed; ids the model wrote stay."""
    out = []
    for call in calls:
        call = dict(call)
        if UUID.match(call.get("id", "")):
            call.pop("id")
        out.append(call)
    return out


def comparable(r):
    choice = r["choices"][0]
    out = {"finish_reason": choice["finish_reason"],
           "usage": {k: r["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}}
    if "message" in choice:
        message = dict(choice["message"])
        if "tool_calls" in message:
            message["tool_calls"] = no_uuid_ids(message["tool_calls"])
        out["message"] = message
    else:
        out["text"] = choice["text"]
    return out


def chat_body(model, tools=True, **extra):
    body = {"model": str(model), "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "max_tokens": 120, "chat_template_kwargs": {"enable_thinking": False}, **extra}
    if tools:
        body["tools"] = TOOLS
    return body


def same_plain(ref, ours, path, body):
    try:
        s1, a = ref.post_json(path, body)
    except http.client.RemoteDisconnected:
        # mlx-lm's parser raised something other than ValueError on the (cut-off) call text, which
        # mlx_lm.server does not catch: it drops the connection. We answer, without that call.
        s2, b = ours.post_json(path, body)
        assert s2 == 200, b
        assert not b["choices"][0].get("message", {}).get("tool_calls"), b
        return None, b
    s2, b = ours.post_json(path, body)
    assert s1 == s2 == 200, (a, b)
    assert comparable(b) == comparable(a)
    return a, b


def same_stream(ref, ours, path, body):
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    a, _ = ref.stream(path, body)
    b, _ = ours.stream(path, body)
    assert b[-1] == "[DONE]"
    if not a or a[-1] != "[DONE]":
        # mlx_lm.server's handler died on the parser's exception (see same_plain): the chunks it
        # sent before are ours too, and ours go on without that call.
        a.append("[DONE]")
        b = b[:len(a) - 1] + ["[DONE]"]

    def strip(events):
        out = []
        for e in events[:-1]:
            e = dict(e)
            for k in ("id", "created", "system_fingerprint"):
                e.pop(k)
            e.get("usage", {}).get("prompt_tokens_details", {}).pop("cached_tokens", None)
            e["choices"] = [dict(c) for c in e["choices"]]
            for choice in e["choices"]:
                if "delta" in choice and "tool_calls" in choice["delta"]:
                    choice["delta"] = dict(choice["delta"], tool_calls=no_uuid_ids(choice["delta"]["tool_calls"]))
            out.append(e)
        return out

    assert strip(b) == strip(a)
    return a, b


def test_tool_call(served):
    name, model, _, ref, ours = served
    a, _ = same_plain(ref, ours, CHAT, chat_body(model))
    calls = a["choices"][0]["message"].get("tool_calls")
    if SCRIPTS[name][3]:  # the script is a real call
        assert calls and calls[0]["function"]["name"] == "get_weather", a
    else:  # mlx-lm's parser rejects it
        assert not calls, a
    assert a["choices"][0]["finish_reason"] == "tool_calls"


def test_tool_call_streamed(served):
    name, model, _, ref, ours = served
    a, _ = same_stream(ref, ours, CHAT, chat_body(model))
    streamed_call = any(c.get("delta", {}).get("tool_calls") for e in a[:-1] for c in e["choices"])
    assert streamed_call == SCRIPTS[name][3], a


def test_tool_call_without_tools(served):
    name, model, _, ref, ours = served
    same_plain(ref, ours, CHAT, chat_body(model, tools=False))


def test_completion_endpoint(served):
    # ":\n\n" is one token, not the script's trigger: the model writes random text, and 40 of its
    # tokens show the endpoint as well as 120 (each costs mlx_lm.server about 20 ms, twice).
    name, model, _, ref, ours = served
    body = {"model": str(model), "prompt": "Call it:\n\n", "max_tokens": 40}
    same_plain(ref, ours, TEXT, body)
    same_stream(ref, ours, TEXT, body)


@pytest.mark.parametrize("fraction", [0.15, 0.4, 0.6, 0.85, 0.97])
def test_cut_off(served, fraction):
    """Generation stops (max_tokens) inside the call: whatever mlx_lm.server makes of the text."""
    name, model, n, ref, ours = served
    body = chat_body(model, max_tokens=max(1, int(n * fraction)))
    same_plain(ref, ours, CHAT, body)
    same_stream(ref, ours, CHAT, body)
