"""The Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) of `mlxrt server`, through the
official `anthropic` Python SDK, on the tiny scripted qwen3 model (its greedy output after a prompt
with thinking off is a get_weather tool call). Fidelity with /v1/chat/completions for the same
conversation: the same prompt (the same token count, and the prompt cache reusing all of the chat
request's prompt) and, with the same seed, the same text. Bad input: 400 in Anthropic's shape."""
import json
import uuid

import anthropic
import jsonschema
import pytest

from test_openai_client import stop_word_from

WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CHAT_WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                                 "parameters": WEATHER["input_schema"]}}
NO_THINKING = {"type": "disabled"}


@pytest.fixture(scope="module")
def client(mlxrt_server):
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{mlxrt_server.port}", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def model(model_dir):
    return str(model_dir)


def chat(server, messages, **fields):
    status, body = server.post_json("/v1/chat/completions", {"messages": messages, **fields})
    assert status == 200, body
    return body


def user(text):
    return [{"role": "user", "content": text}]


def test_plain_message(client, model):
    m = client.messages.create(model=model, max_tokens=8, messages=user("Hello there"))
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_") and m.model == model
    assert m.stop_reason == "max_tokens" and m.stop_sequence is None
    assert [b.type for b in m.content] == ["text"] and m.content[0].text
    assert m.usage.output_tokens == 8
    again = client.messages.create(model=model, max_tokens=8, messages=user("Hello there"))
    assert again.content[0].text == m.content[0].text  # greedy by default


def test_stream_events_and_text(client, model, mlxrt_server):
    whole = client.messages.create(model=model, max_tokens=10, messages=user("Tell me a story"))
    with client.messages.stream(model=model, max_tokens=10, messages=user("Tell me a story")) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == whole.content[0].text == final.content[0].text
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 10
    # The raw event sequence, pings included.
    status, headers, raw = mlxrt_server.request("POST", "/v1/messages", {
        "model": model, "max_tokens": 4, "stream": True, "messages": user("Tell me a story")})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = []
    for block in raw.decode().strip().split("\n\n"):
        name, data = block.split("\n", 1)
        assert name.startswith("event: ") and data.startswith("data: ")
        payload = json.loads(data[6:])
        assert payload["type"] == name[7:]
        events.append(payload)
    types = [e["type"] for e in events]
    assert types[:2] == ["message_start", "ping"]
    body = [t for t in types[2:] if t != "ping"]
    assert body[0] == "content_block_start" and body[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(body[1:-3]) == {"content_block_delta"}
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["output_tokens"] == 0
    delta = next(e for e in events if e["type"] == "message_delta")
    assert delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 4


def test_system_prompt(client, model, mlxrt_server):
    system = "You are a terse assistant."
    a = client.messages.count_tokens(model=model, system=system, messages=user("Hi"))
    b = client.messages.count_tokens(model=model, system=[{"type": "text", "text": "You are a terse "},
                                                          {"type": "text", "text": "assistant."}], messages=user("Hi"))
    plain = client.messages.count_tokens(model=model, messages=user("Hi"))
    c = chat(mlxrt_server, [{"role": "system", "content": system}, *user("Hi")], max_tokens=1)
    assert a.input_tokens == b.input_tokens == c["usage"]["prompt_tokens"] > plain.input_tokens
    m = client.messages.create(model=model, max_tokens=3, system=system, messages=user("Hi"))
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == c["usage"]["prompt_tokens"]


def test_prompt_is_the_chat_prompt(client, model, mlxrt_server):
    """A chat request first, then the same conversation as an Anthropic request: the prompt cache
    reuses all of the chat request's prompt but the last token (which is always recomputed), so
    the Anthropic prompt holds the same tokens."""
    tag = uuid.uuid4().hex
    system, question = f"Session {tag}.", f"What is {tag}?"
    messages = [{"role": "user", "content": question},
                {"role": "assistant", "content": "It is an id."},
                {"role": "user", "content": "Thanks."}]
    c = chat(mlxrt_server, [{"role": "system", "content": system}, *messages], max_tokens=1)
    n = c["usage"]["prompt_tokens"]
    m = client.messages.create(model=model, max_tokens=1, system=system, messages=messages)
    assert m.usage.cache_read_input_tokens == n - 1 and m.usage.input_tokens == 1


def test_seeded_text_equals_chat(client, model, mlxrt_server):
    messages = user("Random words please")
    # This SDK release takes the sampling parameters (temperature, top_p, top_k) through extra_body.
    c = chat(mlxrt_server, messages, max_tokens=12, temperature=1.0, top_k=50, seed=1234)
    m = client.messages.create(model=model, messages=messages, max_tokens=12,
                               extra_body={"temperature": 1.0, "top_k": 50, "seed": 1234})
    assert m.content[0].text == c["choices"][0]["message"]["content"]
    assert m.usage.output_tokens == c["usage"]["completion_tokens"]
    other = client.messages.create(model=model, messages=messages, max_tokens=12,
                                   extra_body={"temperature": 1.0, "top_k": 50, "seed": 99})
    assert other.content[0].text != m.content[0].text


def test_stop_sequences(client, model, mlxrt_server, model_dir):
    status, full = mlxrt_server.post_json("/v1/chat/completions", {
        "messages": user("The list:"), "max_tokens": 12, "logprobs": True})
    assert status == 200
    ids = [entry["id"] for entry in full["choices"][0]["logprobs"]["content"]]
    k, word = stop_word_from(ids, model_dir / "tokenizer.json")
    m = client.messages.create(model=model, max_tokens=12, messages=user("The list:"), stop_sequences=["zzzq", word])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == word
    assert m.usage.output_tokens == k + 2
    assert word not in m.content[0].text and full["choices"][0]["message"]["content"].startswith(m.content[0].text)
    with client.messages.stream(model=model, max_tokens=12, messages=user("The list:"), stop_sequences=[word]) as s:
        final = s.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == word
    assert final.content[0].text == m.content[0].text


def test_tool_use_round_trip(client, model, mlxrt_server):
    messages = user("What is the weather in Paris?")
    m = client.messages.create(model=model, max_tokens=40, messages=messages, tools=[WEATHER], thinking=NO_THINKING)
    assert m.stop_reason == "tool_use"
    (call,) = m.content
    assert call.type == "tool_use" and call.name == "get_weather" and call.input == {"city": "Paris"} and call.id
    # The call and its result go back; the template renders them as it renders the chat request's.
    messages = messages + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": '{"temp_c": 18}'}]}]
    r = client.messages.create(model=model, max_tokens=6, messages=messages, tools=[WEATHER])
    assert r.stop_reason == "max_tokens" and r.content[0].type == "text"
    chat_messages = [user("What is the weather in Paris?")[0],
                     {"role": "assistant", "content": None, "tool_calls": [{"id": call.id, "type": "function", "function": {
                         "name": "get_weather", "arguments": json.dumps(call.input)}}]},
                     {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 18}'}]
    c = chat(mlxrt_server, chat_messages, tools=[CHAT_WEATHER], max_tokens=6)
    assert r.usage.input_tokens + r.usage.cache_read_input_tokens == c["usage"]["prompt_tokens"]
    assert r.content[0].text == c["choices"][0]["message"]["content"]
    counted = client.messages.count_tokens(model=model, messages=messages, tools=[WEATHER])
    assert counted.input_tokens == c["usage"]["prompt_tokens"]


def test_tool_use_streamed(client, model, mlxrt_server):
    with client.messages.stream(model=model, max_tokens=40, messages=user("Weather in Paris?"), tools=[WEATHER],
                                thinking=NO_THINKING) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    (call,) = final.content
    assert call.type == "tool_use" and call.name == "get_weather" and call.input == {"city": "Paris"}
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert [d.type for d in deltas] == ["input_json_delta"]
    assert json.loads(deltas[0].partial_json) == {"city": "Paris"}


def test_tool_choice(client, model, mlxrt_server):
    other = {"name": "get_time", "description": "The time", "input_schema": {"type": "object", "properties": {}}}
    both = client.messages.count_tokens(model=model, messages=user("Hi"), tools=[WEATHER, other])
    named = client.messages.count_tokens(model=model, messages=user("Hi"), tools=[WEATHER, other],
                                         tool_choice={"type": "tool", "name": "get_weather"})
    none = client.messages.count_tokens(model=model, messages=user("Hi"), tools=[WEATHER, other],
                                        tool_choice={"type": "none"})
    only = client.messages.count_tokens(model=model, messages=user("Hi"), tools=[WEATHER])
    bare = client.messages.count_tokens(model=model, messages=user("Hi"))
    assert named.input_tokens == only.input_tokens < both.input_tokens
    assert none.input_tokens == bare.input_tokens
    m = client.messages.create(model=model, max_tokens=40, messages=user("Weather?"), tools=[WEATHER],
                               tool_choice={"type": "any"}, thinking=NO_THINKING)
    assert m.stop_reason == "tool_use"


def test_count_tokens(client, model, mlxrt_server):
    messages = [*user("One"), {"role": "assistant", "content": [{"type": "text", "text": "Two"}]}, *user("Three")]
    counted = client.messages.count_tokens(model=model, messages=messages)
    c = chat(mlxrt_server, [*user("One"), {"role": "assistant", "content": "Two"}, *user("Three")], max_tokens=1)
    assert counted.input_tokens == c["usage"]["prompt_tokens"]
    status, body = mlxrt_server.post_json("/v1/messages/count_tokens", {"model": model, "messages": messages})
    assert status == 200 and body == {"input_tokens": counted.input_tokens}


BAD = [
    ("image block", {"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]},
     "messages[0].content[0].type"),
    ("document in a tool result", {"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "image", "source": {}}]}]}]},
     "messages[0].content[0].content[0].type"),
    ("missing max_tokens", {"max_tokens": None}, "max_tokens"),
    ("max_tokens zero", {"max_tokens": 0}, "max_tokens"),
    ("missing messages", {"messages": None}, "messages"),
    ("empty messages", {"messages": []}, "messages"),
    ("bad role", {"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ("content a number", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ("content an empty list", {"messages": [{"role": "user", "content": []}]}, "messages[0].content"),
    ("tool_use input not an object", {"messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": "x"}]}]}, "messages[0].content[0].input"),
    ("server tool", {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    ("tool without schema", {"tools": [{"name": "f"}]}, "tools[0].input_schema"),
    ("tool_choice of an unknown tool", {"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}},
     "tool_choice.name"),
    ("stop_sequences a string", {"stop_sequences": "x"}, "stop_sequences"),
    ("empty stop sequence", {"stop_sequences": [""]}, "stop_sequences[0]"),
    ("thinking type", {"thinking": {"type": "sometimes"}}, "thinking.type"),
    ("temperature negative", {"temperature": -1}, "temperature"),
    ("top_k a float", {"top_k": 1.5}, "top_k"),
    ("system image", {"system": [{"type": "image", "source": {}}]}, "system[0].type"),
    ("output format of another type", {"output_config": {"format": {"type": "json_object"}}},
     "output_config.format.type"),
    ("output format without a schema", {"output_config": {"format": {"type": "json_schema"}}},
     "output_config.format.schema"),
    ("output schema with an unenforced keyword", {"output_config": {"format": {"type": "json_schema", "schema": {
        "type": "array", "items": {"type": "integer"}, "uniqueItems": True}}}}, "output_config.format.schema"),
    ("output format given twice", {"output_config": {"format": {"type": "json_schema", "schema": {}}},
                                   "output_format": {"type": "json_schema", "schema": {}}}, "output_format"),
]


@pytest.mark.parametrize("name,fields,field", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_anthropic_shaped(mlxrt_server, model, name, fields, field):
    body = {"model": model, "max_tokens": 4, "messages": user("hi"), **fields}
    body = {k: v for k, v in body.items() if v is not None}
    status, err = mlxrt_server.post_json("/v1/messages", body)
    assert status == 400, err
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert field in err["error"]["message"]


def test_errors_through_the_sdk(client, model):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=model, max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
    assert e.value.body["error"]["type"] == "invalid_request_error" and "image" in e.value.message
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="claude-other", max_tokens=4, messages=user("hi"))
    assert e.value.body["error"]["type"] == "not_found_error"
    status_ok = client.messages.create(model=model, max_tokens=1, messages=user("still fine"))
    assert status_ok.usage.output_tokens == 1


POINT = {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9},
                                          "label": {"enum": ["near", "far"]}},
         "required": ["x", "label"], "additionalProperties": False}


def test_structured_output_equals_chat(client, model, mlxrt_server):
    """output_config.format (json_schema, strict as Anthropic's structured outputs are) constrains
    the reply as response_format does in /v1/chat/completions: with the same seed, the same text;
    it parses and validates. The beta's top-level output_format is the same request."""
    messages = user("A point, please.")
    sampling = {"temperature": 1.0, "seed": 7}
    c = chat(mlxrt_server, messages, max_tokens=200, chat_template_kwargs={"enable_thinking": False}, **sampling,
             response_format={"type": "json_schema", "json_schema": {"name": "point", "schema": POINT, "strict": True}})
    want = c["choices"][0]["message"]["content"]
    m = client.messages.create(model=model, max_tokens=200, messages=messages, thinking=NO_THINKING,
                               output_config={"format": {"type": "json_schema", "schema": POINT}}, extra_body=sampling)
    assert m.stop_reason == "end_turn" and m.content[0].text == want
    value = json.loads(want)
    jsonschema.validate(value, POINT)
    status, raw = mlxrt_server.post_json("/v1/messages", {
        "model": model, "max_tokens": 200, "messages": messages, "thinking": NO_THINKING, **sampling,
        "output_format": {"type": "json_schema", "schema": POINT}})
    assert status == 200 and raw["content"][0]["text"] == want
