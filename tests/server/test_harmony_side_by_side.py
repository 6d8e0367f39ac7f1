"""gpt-oss's harmony response format, end to end against mlx_lm.server: a tiny scripted gpt_oss model
(tools/make_server_fixture.py) whose tokenizer has harmony's control tokens as special tokens and
whose chat template writes harmony turns, so its greedy output after the chat prompt
("...<|start|>assistant") is a harmony response: an analysis channel, then the final channel or a
tool call in the commentary channel, ended by <|return|> or <|call|> (both end tokens, as in
gpt-oss's generation config).

mlx-lm 0.32.2 has no harmony parser: `_infer_thinking` knows <think>-style tags, Gemma 4's
"<|channel>thought"/"<channel|>" and the xtml markers, not <|channel|>; `_infer_tool_parser` finds
no marker of its formats in a harmony template; gpt_oss has no TOKENIZER_DEFAULTS (no response
format). So mlx_lm.server returns the whole response, channel headers included, as `content`, with
no `reasoning` and no `tool_calls`. The same requests to both servers, plain and streamed, cut off at
several lengths: the same bytes."""
import sys

import pytest

from conftest import FIXTURES, SOURCE, start_mlx_lm, start_mlxrt, stop

sys.path.insert(0, str(SOURCE / "tools"))
import make_server_fixture  # noqa: E402

CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]

SPECIAL = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"]
# The base tokenizer's thinking and tool-call tokens, which gpt-oss's tokenizer does not have (with
# them mlx-lm would infer a thinking format).
QWEN_ONLY = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# A harmony chat template written for this test (the shape of gpt-oss's turns, not its text):
# system and developer headers, the tools as a functions namespace, earlier assistant turns in the
# final channel, and the generation prompt "<|start|>assistant".
TEMPLATE = (
    "{%- set ns = namespace(system='You are a helpful assistant.') -%}"
    "{%- for m in messages if m.role == 'system' -%}{%- set ns.system = m.content -%}{%- endfor -%}"
    "<|start|>system<|message|>{{ ns.system }}\nReasoning: medium\n\n"
    "# Valid channels: analysis, commentary, final.<|end|>"
    "{%- if tools -%}"
    "<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n"
    "{%- for t in tools %}\n// {{ t.function.description }}\ntype {{ t.function.name }} = (_: "
    "{{ t.function.parameters | tojson }}) => any;\n{%- endfor %}\n} // namespace functions<|end|>"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'user' -%}<|start|>user<|message|>{{ m.content }}<|end|>"
    "{%- elif m.role == 'assistant' -%}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}"
)

# name: (the scripted response, its end token first)
SCRIPTS = {
    "final": ("<|channel|>analysis<|message|>The user says hi. Answer briefly.<|end|>"
              "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?",
              ("<|return|>", "<|call|>")),
    "commentary_call": ("<|channel|>analysis<|message|>Need the weather tool.<|end|>"
                        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
                        '<|message|>{"city":"Paris"}',
                        ("<|call|>", "<|return|>")),
}


@pytest.fixture(scope="module", params=list(SCRIPTS))
def served(request, tmp_path_factory):
    """(script name, model dir, script length in tokens, mlx_lm.server, mlxrt server)."""
    name = request.param
    script, eos = SCRIPTS[name]
    model = make_server_fixture.ensure(FIXTURES, f"server_harmony_{name}", script=script, model_type="gpt_oss",
                                       trigger="assistant", eos=eos, special_tokens=SPECIAL,
                                       drop_tokens=QWEN_ONLY, chat_template=TEMPLATE,
                                       tokenizer_config={"eos_token": "<|return|>"})
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


def comparable(r):
    """The response less what the prompt caches' policies decide (cached_tokens; as the other
    side-by-side tests)."""
    choice = r["choices"][0]
    out = {"finish_reason": choice["finish_reason"],
           "usage": {k: r["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}}
    out.update({"message": choice["message"]} if "message" in choice else {"text": choice["text"]})
    return out


def chat_body(model, tools=True, **extra):
    body = {"model": str(model), "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 120, **extra}
    if tools:
        body["tools"] = TOOLS
    return body


def same_plain(ref, ours, path, body):
    s1, a = ref.post_json(path, body)
    s2, b = ours.post_json(path, body)
    assert s1 == s2 == 200, (a, b)
    assert comparable(b) == comparable(a)
    return a


def same_stream(ref, ours, path, body):
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    a, _ = ref.stream(path, body)
    b, _ = ours.stream(path, body)
    assert a[-1] == b[-1] == "[DONE]"

    def strip(events):
        out = []
        for e in events[:-1]:
            e = {k: v for k, v in e.items() if k not in ("id", "created", "system_fingerprint")}
            e.get("usage", {}).get("prompt_tokens_details", {}).pop("cached_tokens", None)
            out.append(e)
        return out

    assert strip(b) == strip(a)
    return a


def test_harmony_response(served):
    name, model, _, ref, ours = served
    a = same_plain(ref, ours, CHAT, chat_body(model))
    message = a["choices"][0]["message"]
    # What mlx_lm.server 0.32.2 makes of it: every channel in content, the end token stripped.
    assert message == {"role": "assistant", "content": SCRIPTS[name][0]}, a
    assert a["choices"][0]["finish_reason"] == "stop"


def test_harmony_response_streamed(served):
    name, model, _, ref, ours = served
    a = same_stream(ref, ours, CHAT, chat_body(model))
    text = "".join(c["delta"].get("content", "") for e in a[:-1] for c in e["choices"])
    assert text == SCRIPTS[name][0]
    assert not any("reasoning" in c["delta"] or "tool_calls" in c["delta"] for e in a[:-1] for c in e["choices"])


def test_harmony_without_tools(served):
    name, model, _, ref, ours = served
    same_plain(ref, ours, CHAT, chat_body(model, tools=False))
    same_stream(ref, ours, CHAT, chat_body(model, tools=False))


def test_harmony_multi_turn(served):
    name, model, _, ref, ours = served
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Hi again"}]
    same_plain(ref, ours, CHAT, chat_body(model, messages=messages))
    same_stream(ref, ours, CHAT, chat_body(model, messages=messages))


def test_harmony_completion_endpoint(served):
    name, model, _, ref, ours = served
    body = {"model": str(model), "prompt": "<|start|>user<|message|>Hi<|end|><|start|>assistant", "max_tokens": 120}
    a = same_plain(ref, ours, TEXT, body)
    assert a["choices"][0]["text"] == SCRIPTS[name][0]
    same_stream(ref, ours, TEXT, body)


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.5, 0.7, 0.9, 1.0])
def test_harmony_cut_off(served, fraction):
    """Generation stops (max_tokens) inside a channel header, the analysis or the final text."""
    name, model, n, ref, ours = served
    body = chat_body(model, max_tokens=max(1, int(n * fraction)))
    same_plain(ref, ours, CHAT, body)
    same_stream(ref, ours, CHAT, body)
