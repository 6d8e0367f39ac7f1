"""Reasoning output through the Anthropic Messages API (thinking blocks) and the OpenAI Responses API
(reasoning items), against /v1/chat/completions on the same tiny scripted qwen3 model: after a
prompt with thinking off it writes a think block, an answer and the end token, so the reply is
split the same way in all three APIs (and ends with end_turn / completed / stop)."""
import json
import sys

import anthropic
import openai
import pytest

from conftest import FIXTURES, SOURCE, start_mlxrt, stop

sys.path.insert(0, str(SOURCE / "tools"))
import make_server_fixture  # noqa: E402

REASONING, ANSWER = "Weighing the sky.", "It is sunny."
QUESTION = [{"role": "user", "content": "Weather?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model_dir = make_server_fixture.ensure(FIXTURES, name="server_qwen3_reasoning",
                                           script=f"<think>{REASONING}</think>{ANSWER}")
    running = start_mlxrt(model_dir, tmp_path_factory)
    running.model = str(model_dir)
    yield running
    stop(running)


@pytest.fixture(scope="module")
def chat_reply(server):
    status, body = server.post_json("/v1/chat/completions", {
        "messages": QUESTION, "max_tokens": 40, "chat_template_kwargs": {"enable_thinking": False}})
    assert status == 200, body
    message = body["choices"][0]["message"]
    assert (message["reasoning"], message["content"], body["choices"][0]["finish_reason"]) == (REASONING, ANSWER, "stop")
    return body


def test_anthropic_thinking_blocks(server, chat_reply):
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{server.port}", api_key="unused", max_retries=0)
    kw = dict(model=server.model, max_tokens=40, messages=QUESTION, thinking={"type": "disabled"})
    m = client.messages.create(**kw)
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[0].thinking == REASONING and m.content[1].text == ANSWER
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    assert m.usage.output_tokens == chat_reply["usage"]["completion_tokens"]
    with client.messages.stream(**kw) as stream:
        events = list(stream)
        final = stream.get_final_message()
    shown = [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in final.content]
    assert shown == [("thinking", REASONING), ("text", ANSWER)] and final.stop_reason == "end_turn"
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert deltas == sorted(deltas, reverse=True) and set(deltas) == {"thinking_delta", "text_delta"}
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["thinking", "text"]
    # The thinking block goes back as the assistant's reasoning_content, as the chat request's would.
    follow = QUESTION + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                         {"role": "user", "content": "And tomorrow?"}]
    counted = client.messages.count_tokens(model=server.model, messages=follow)
    status, c = server.post_json("/v1/chat/completions", {"max_tokens": 1, "messages": QUESTION + [
        {"role": "assistant", "content": ANSWER, "reasoning_content": REASONING},
        {"role": "user", "content": "And tomorrow?"}]})
    assert status == 200 and counted.input_tokens == c["usage"]["prompt_tokens"]


def test_responses_reasoning_items(server, chat_reply):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="unused", max_retries=0)
    kw = dict(model=server.model, input=QUESTION, max_output_tokens=40, reasoning={"effort": "none"})
    r = client.responses.create(**kw)
    assert r.status == "completed" and [item.type for item in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == REASONING and r.output_text == ANSWER
    assert r.usage.output_tokens == chat_reply["usage"]["completion_tokens"]
    assert 0 < r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens
    with client.responses.stream(**kw) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert final.output_text == ANSWER and final.output[0].content[0].text == REASONING
    types = [e.type for e in events]
    assert types.count("response.reasoning_text.delta") >= 1 and types[-1] == "response.completed"
    assert types.index("response.reasoning_text.done") < types.index("response.output_text.delta")
    # previous_response_id: the stored conversation holds the reasoning as the chat request's would.
    again = client.responses.create(model=server.model, previous_response_id=r.id, input="And tomorrow?",
                                    max_output_tokens=1)
    status, c = server.post_json("/v1/chat/completions", {"max_tokens": 1, "messages": QUESTION + [
        {"role": "assistant", "content": ANSWER, "reasoning_content": REASONING},
        {"role": "user", "content": "And tomorrow?"}]})
    assert status == 200 and again.usage.input_tokens == c["usage"]["prompt_tokens"]
    # The same turn sent back as items (reasoning item, then the message) gives the same prompt.
    items = client.responses.create(model=server.model, max_output_tokens=1, input=QUESTION + [
        item.model_dump(exclude_none=True) for item in r.output] + [{"role": "user", "content": "And tomorrow?"}])
    assert items.usage.input_tokens == c["usage"]["prompt_tokens"]
    assert json.loads(r.model_dump_json())["output"][0]["type"] == "reasoning"
