"""The OpenAI Responses API (/v1/responses) of `mlxrt server`, through the official `openai` SDK's
`client.responses`, on the tiny scripted qwen3 model (its greedy output after a prompt with thinking
off is a get_weather tool call). Fidelity with /v1/chat/completions for the same conversation: the
same prompt (token count, and the prompt cache reusing all of the chat request's prompt) and, with
the same seed, the same text. previous_response_id, instructions, bad input in OpenAI's shape."""
import json
import uuid

import openai
import pytest

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CHAT_WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                                 "parameters": WEATHER["parameters"]}}
NO_THINKING = {"effort": "none"}


@pytest.fixture(scope="module")
def client(mlxrt_server):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{mlxrt_server.port}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def model(model_dir):
    return str(model_dir)


def chat(server, messages, **fields):
    status, body = server.post_json("/v1/chat/completions", {"messages": messages, **fields})
    assert status == 200, body
    return body


def user(text):
    return [{"role": "user", "content": text}]


def test_plain_response(client, model, mlxrt_server):
    r = client.responses.create(model=model, input="Hello there", max_output_tokens=8)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == model
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    (item,) = r.output
    assert item.type == "message" and item.role == "assistant" and item.status == "incomplete"
    assert r.output_text and item.content[0].text == r.output_text
    assert r.usage.output_tokens == 8 and r.usage.total_tokens == r.usage.input_tokens + 8
    c = chat(mlxrt_server, user("Hello there"), max_tokens=8)
    assert r.usage.input_tokens == c["usage"]["prompt_tokens"]
    assert r.output_text == c["choices"][0]["message"]["content"]  # greedy by default


def test_streamed_events(client, model):
    whole = client.responses.create(model=model, input="Tell me a story", max_output_tokens=10)
    events = list(client.responses.create(model=model, input="Tell me a story", max_output_tokens=10, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete"]
    assert set(types[4:-4]) == {"response.output_text.delta"}
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text == events[-4].text
    final = events[-1].response
    assert final.status == "incomplete" and final.output_text == text and final.usage.output_tokens == 10
    assert final.output[0].id == events[2].item.id


def test_instructions(client, model, mlxrt_server):
    tag = uuid.uuid4().hex
    instructions, question = f"Session {tag}: be terse.", f"What is {tag}?"
    c = chat(mlxrt_server, [{"role": "system", "content": instructions}, *user(question)], max_tokens=1)
    n = c["usage"]["prompt_tokens"]
    r = client.responses.create(model=model, instructions=instructions, input=question, max_output_tokens=1)
    # The prompt cache reuses all of the chat request's prompt but the last token: the same tokens.
    assert r.usage.input_tokens == n and r.usage.input_tokens_details.cached_tokens == n - 1
    assert r.instructions == instructions
    items = client.responses.create(model=model, max_output_tokens=1, input=[
        {"role": "developer", "content": instructions},
        {"role": "user", "content": [{"type": "input_text", "text": question}]}])
    assert items.usage.input_tokens == n


def test_seeded_text_equals_chat(client, model, mlxrt_server):
    kw = dict(temperature=1.0)
    c = chat(mlxrt_server, user("Random words please"), max_tokens=12, seed=1234, **kw)
    r = client.responses.create(model=model, input="Random words please", max_output_tokens=12,
                                extra_body={"seed": 1234}, **kw)
    assert r.output_text == c["choices"][0]["message"]["content"]
    other = client.responses.create(model=model, input="Random words please", max_output_tokens=12,
                                    extra_body={"seed": 99}, **kw)
    assert other.output_text != r.output_text


def test_function_call_round_trip(client, model, mlxrt_server):
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.responses.create(model=model, input=question, tools=[WEATHER], max_output_tokens=40,
                                reasoning=NO_THINKING)
    assert r.status == "completed"
    (call,) = r.output
    assert call.type == "function_call" and call.name == "get_weather" and call.id.startswith("fc_")
    assert json.loads(call.arguments) == {"city": "Paris"} and call.call_id
    follow = question + [item.model_dump(exclude_none=True) for item in r.output] + [
        {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp_c": 18}'}]
    r2 = client.responses.create(model=model, input=follow, tools=[WEATHER], max_output_tokens=6)
    assert r2.output[0].type == "message" and r2.output_text
    c = chat(mlxrt_server, [*question,
                            {"role": "assistant", "content": None, "tool_calls": [{"id": call.call_id, "type": "function",
                                                                                   "function": {"name": "get_weather",
                                                                                                "arguments": call.arguments}}]},
                            {"role": "tool", "tool_call_id": call.call_id, "content": '{"temp_c": 18}'}],
             tools=[CHAT_WEATHER], max_tokens=6)
    assert r2.usage.input_tokens == c["usage"]["prompt_tokens"]
    assert r2.output_text == c["choices"][0]["message"]["content"]
    # The same turn through previous_response_id: the stored conversation holds the call.
    r3 = client.responses.create(model=model, previous_response_id=r.id, tools=[WEATHER], max_output_tokens=6,
                                 input=[{"type": "function_call_output", "call_id": call.call_id,
                                         "output": '{"temp_c": 18}'}])
    assert r3.usage.input_tokens == r2.usage.input_tokens and r3.output_text == r2.output_text


def test_function_call_streamed(client, model):
    events = list(client.responses.create(model=model, input="Weather in Paris?", tools=[WEATHER],
                                          max_output_tokens=40, reasoning=NO_THINKING, stream=True))
    types = [e.type for e in events]
    assert types == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.function_call_arguments.delta", "response.function_call_arguments.done",
                     "response.output_item.done", "response.completed"]
    added, delta, done, item_done, completed = events[2:]
    assert added.item.type == "function_call" and added.item.name == "get_weather" and added.item.arguments == ""
    assert json.loads(delta.delta) == {"city": "Paris"} and done.arguments == delta.delta
    assert item_done.item.arguments == delta.delta and item_done.item.status == "completed"
    assert completed.response.output[0].call_id == added.item.call_id


def test_previous_response_id(client, model, mlxrt_server):
    first = client.responses.create(model=model, instructions="Be nice.", input="My name is Ann.", max_output_tokens=5)
    second = client.responses.create(model=model, previous_response_id=first.id, input="What is my name?",
                                     max_output_tokens=5)
    assert second.previous_response_id == first.id
    # The instructions of the earlier response are not carried over (as OpenAI's API does).
    c = chat(mlxrt_server, [*user("My name is Ann."), {"role": "assistant", "content": first.output_text},
                            *user("What is my name?")], max_tokens=5)
    assert second.usage.input_tokens == c["usage"]["prompt_tokens"]
    assert second.output_text == c["choices"][0]["message"]["content"]
    third = client.responses.create(model=model, previous_response_id=second.id, input="Thanks.", max_output_tokens=2)
    c3 = chat(mlxrt_server, [*user("My name is Ann."), {"role": "assistant", "content": first.output_text},
                             *user("What is my name?"), {"role": "assistant", "content": second.output_text},
                             *user("Thanks.")], max_tokens=2)
    assert third.usage.input_tokens == c3["usage"]["prompt_tokens"]
    unstored = client.responses.create(model=model, input="Forget me.", max_output_tokens=2, store=False)
    for missing in (unstored.id, "resp_unknown"):
        with pytest.raises(openai.BadRequestError) as e:
            client.responses.create(model=model, previous_response_id=missing, input="Hi", max_output_tokens=2)
        assert e.value.body["param"] == "previous_response_id" and missing in e.value.body["message"]


BAD = [
    ("input_image part", {"input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]}, "input[0].content[0].type"),
    ("input_file part", {"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "a"}, {"type": "input_file", "file_id": "f"}]}]}, "input[0].content[1].type"),
    ("unknown item", {"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
    ("missing input", {"input": None}, "input"),
    ("input a number", {"input": 5}, "input"),
    ("empty input", {"input": []}, "input"),
    ("bad role", {"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ("function_call arguments not JSON", {"input": [
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{oops"}]}, "input[0].arguments"),
    ("function_call_output without call_id", {"input": [{"type": "function_call_output", "output": "x"}]},
     "input[0].call_id"),
    ("web search tool", {"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ("tool_choice of an unknown function", {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "x"}},
     "tool_choice.name"),
    ("unknown text format", {"text": {"format": {"type": "grammar", "grammar": "root ::= \"x\""}}},
     "text.format.type"),
    ("max_output_tokens zero", {"max_output_tokens": 0}, "max_output_tokens"),
    ("instructions a list", {"instructions": ["x"]}, "instructions"),
    ("temperature negative", {"temperature": -1}, "temperature"),
    ("background", {"background": True}, "background"),
]


@pytest.mark.parametrize("name,fields,field", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_openai_shaped(mlxrt_server, model, name, fields, field):
    body = {"model": model, "input": "hi", "max_output_tokens": 4, **fields}
    body = {k: v for k, v in body.items() if v is not None}
    status, err = mlxrt_server.post_json("/v1/responses", body)
    assert status == 400, err
    assert err["error"]["type"] == "invalid_request_error" and err["error"]["param"] == field
    assert field in err["error"]["message"]


def test_errors_through_the_sdk(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=model, max_output_tokens=4, input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}])
    assert "input_image" in e.value.message
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="some-other-model", input="hi", max_output_tokens=1)
    assert client.responses.create(model=model, input="still fine", max_output_tokens=1).usage.output_tokens == 1
