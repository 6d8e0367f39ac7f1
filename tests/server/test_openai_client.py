"""The official OpenAI Python client against `mlxrt server` on the tiny scripted qwen3 model: chat
and completions, streaming and not, stop strings, logprobs, seed, tool calls, usage and the
prompt cache's cached_tokens."""
import openai
import pytest

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture(scope="module")
def client(mlxrt_server):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{mlxrt_server.port}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def model_name(model_dir):
    return str(model_dir)


def chat(client, model, content, **kw):
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": content}], **kw)


def test_chat_completion(client, model_name):
    r = chat(client, model_name, "Hello there", max_tokens=12, temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    choice = r.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.role == "assistant" and choice.message.content
    assert r.usage.completion_tokens == 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + 12
    assert r.usage.prompt_tokens_details.cached_tokens >= 0
    # greedy is deterministic
    again = chat(client, model_name, "Hello there", max_tokens=12, temperature=0)
    assert again.choices[0].message.content == choice.message.content


def test_chat_stream_matches_whole(client, model_name):
    whole = chat(client, model_name, "Tell me a story", max_tokens=16)
    stream = chat(client, model_name, "Tell me a story", max_tokens=16, stream=True,
                  stream_options={"include_usage": True})
    text, finish, usage = "", None, None
    for chunk in stream:
        assert chunk.object in ("chat.completion.chunk", "chat.completion")
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    assert text == whole.choices[0].message.content
    assert finish == "length"
    assert usage.completion_tokens == 16 and usage.prompt_tokens == whole.usage.prompt_tokens


def test_text_completion_and_stream(client, model_name):
    r = client.completions.create(model=model_name, prompt="Once upon a time", max_tokens=10)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 10
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=model_name, prompt="Once upon a time", max_tokens=10, stream=True) if c.choices)
    assert streamed == r.choices[0].text


def stop_word_from(ids, tokenizer_path):
    """Two tokens in the middle of a continuation whose text encodes back to exactly them."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(tokenizer_path))
    for k in range(3, len(ids) - 2):
        word = tok.decode(ids[k:k + 2])
        if word.strip() and tok.encode(word, add_special_tokens=False).ids == ids[k:k + 2]:
            return k, word
    raise AssertionError(f"no usable stop word in {ids}")


def test_stop_string_ends_generation(client, model_name, mlxrt_server, model_dir):
    # Pick the stop word from the greedy continuation itself (ids come back with logprobs).
    status, full = mlxrt_server.post_json("/v1/completions", {"prompt": "The list:", "max_tokens": 12, "logprobs": True})
    assert status == 200
    ids = [entry["id"] for entry in full["choices"][0]["logprobs"]["content"]]
    assert len(ids) == 12
    k, word = stop_word_from(ids, model_dir / "tokenizer.json")
    r = client.completions.create(model=model_name, prompt="The list:", max_tokens=12, stop=[word])
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == k + 2
    assert word not in r.choices[0].text
    assert full["choices"][0]["text"].startswith(r.choices[0].text)


def test_eos_finish_reason_stop(client, model_name):
    r = chat(client, model_name, "Hi", max_tokens=20, logit_bias={"151645": 100})
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content is None
    assert r.usage.completion_tokens == 1


def test_logprobs_and_top_logprobs(client, model_name):
    r = chat(client, model_name, "Count", max_tokens=4, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == 4
    for entry in content:
        # mlx_lm.server's shape: the entry is the first of the top list, which holds distinct ids.
        tops = entry.top_logprobs
        assert len(tops) == 3 and len({t.model_extra["id"] for t in tops}) == 3
        assert (entry.token, entry.logprob) == (tops[0].token, tops[0].logprob)
        assert all(t.logprob <= 0 for t in tops)


def test_seed_reproducible_sampling(client, model_name):
    kw = dict(max_tokens=12, temperature=1.0, seed=1234)
    a = chat(client, model_name, "Random words", **kw).choices[0].message.content
    b = chat(client, model_name, "Random words", **kw).choices[0].message.content
    c = chat(client, model_name, "Random words", **{**kw, "seed": 99}).choices[0].message.content
    assert a == b and a != c


def test_tool_call_round_trip(client, model_name, script):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model=model_name, messages=messages, tools=[WEATHER_TOOL],
                                       max_tokens=40, extra_body=NO_THINKING)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert __import__("json").loads(call.function.arguments) == {"city": "Paris"}
    # Send the call and its result back: the template renders them and the model answers.
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 18}'}]
    r2 = client.chat.completions.create(model=model_name, messages=messages, tools=[WEATHER_TOOL], max_tokens=8)
    assert r2.choices[0].finish_reason == "length" and r2.choices[0].message.content


def test_tool_call_streaming(client, model_name):
    stream = client.chat.completions.create(
        model=model_name, messages=[{"role": "user", "content": "Weather?"}], tools=[WEATHER_TOOL],
        max_tokens=40, stream=True, extra_body=NO_THINKING)
    calls, finish, text = [], None, ""
    for chunk in stream:
        delta = chunk.choices[0].delta
        calls += delta.tool_calls or []
        text += delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and text == ""
    assert len(calls) == 1 and calls[0].index == 0 and calls[0].function.name == "get_weather"


def test_cached_tokens_reported_on_shared_prefix(client, model_name):
    system = {"role": "system", "content": "You are a terse assistant. " * 20}
    first = client.chat.completions.create(model=model_name, max_tokens=2,
                                           messages=[system, {"role": "user", "content": "one"}])
    second = client.chat.completions.create(model=model_name, max_tokens=2,
                                            messages=[system, {"role": "user", "content": "two"}])
    assert second.usage.prompt_tokens_details.cached_tokens > 100
    assert second.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens
    # Reuse never changes the result: the same request again gives the same text.
    third = client.chat.completions.create(model=model_name, max_tokens=2,
                                           messages=[system, {"role": "user", "content": "one"}])
    assert third.choices[0].message.content == first.choices[0].message.content


def test_models_and_health(client, model_name, mlxrt_server):
    ids = [m.id for m in client.models.list().data]
    # The served directory is listed by its name (mlx_lm.server shows its absolute path), last.
    assert ids[-1] == __import__("pathlib").Path(model_name).resolve().name and "/" not in ids[-1]
    assert client.chat.completions.create(model=ids[-1], max_tokens=1, messages=[{"role": "user", "content": "hi"}])
    status, _, body = mlxrt_server.request("GET", "/health")
    assert status == 200 and body == b'{"status": "ok"}'


def test_client_errors_are_openai_shaped(client, model_name):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, model_name, "x", max_tokens=0)
    assert "max_tokens" in str(e.value)
    with pytest.raises(openai.NotFoundError):
        chat(client, "some-other-model", "x", max_tokens=1)
