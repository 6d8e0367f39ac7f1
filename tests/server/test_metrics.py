"""`GET /metrics` of `mlxrt server`: Prometheus' text format (read back by the official
prometheus_client parser), and counters that follow the requests a client makes."""
import sys
import time

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families


def scrape(server):
    status, headers, raw = server.request("GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4"), headers
    families = {f.name: f for f in text_string_to_metric_families(raw.decode())}
    values = {}
    for family in families.values():
        for s in family.samples:
            values[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return families, values


def value(values, name, **labels):
    return values.get((name, tuple(sorted(labels.items()))), 0.0)


def answered(values):
    """Requests counted, besides the scrapes."""
    return sum(v for (name, labels), v in values.items()
               if name == "mlxrt_http_requests_total" and ("endpoint", "/metrics") not in labels)


def scrape_settled(server, requests_before, count):
    """A scrape taken once `count` more requests have been counted: the server counts a request
    just after writing its last byte, so a client can be a moment ahead of the counter."""
    deadline = time.time() + 10
    while True:
        families, values = scrape(server)
        done = answered(values)
        idle = values[("mlxrt_batch_size", ())] == 0 and values[("mlxrt_queue_depth", ())] == 0
        if (done - requests_before >= count and idle) or time.time() > deadline:
            return families, values
        time.sleep(0.05)


@pytest.fixture(scope="module")
def client(mlxrt_server):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{mlxrt_server.port}/v1", api_key="unused", max_retries=0)


def test_counters_follow_the_requests(mlxrt_server, client, model_dir):
    _, before = scrape(mlxrt_server)
    messages = [{"role": "user", "content": "Hello there, how are you today?"}]
    r = client.chat.completions.create(model=str(model_dir), messages=messages, max_tokens=6, temperature=0)
    stream = client.chat.completions.create(model=str(model_dir), messages=messages, max_tokens=5, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert mlxrt_server.request("POST", "/no/such/endpoint", {})[0] == 404
    families, after = scrape_settled(mlxrt_server, answered(before), 3)

    chat = dict(method="POST", endpoint="/v1/chat/completions", status="200")
    assert value(after, "mlxrt_http_requests_total", **chat) - value(before, "mlxrt_http_requests_total", **chat) == 2
    other = dict(method="POST", endpoint="other", status="404")
    assert value(after, "mlxrt_http_requests_total", **other) - value(before, "mlxrt_http_requests_total", **other) == 1
    usage = chunks[-1].usage
    prompt_tokens = r.usage.prompt_tokens + usage.prompt_tokens
    assert after[("mlxrt_prompt_tokens_total", ())] - before[("mlxrt_prompt_tokens_total", ())] == prompt_tokens
    assert after[("mlxrt_generation_tokens_total", ())] - before[("mlxrt_generation_tokens_total", ())] == 6 + 5
    # The second request reused the first one's prompt from the cache.
    cached = usage.prompt_tokens_details.cached_tokens
    assert cached > 0
    assert after[("mlxrt_prompt_cached_tokens_total", ())] - before[("mlxrt_prompt_cached_tokens_total", ())] == cached
    assert after[("mlxrt_prompt_cache_hits_total", ())] - before[("mlxrt_prompt_cache_hits_total", ())] == 1
    # One first token per request; the other tokens each an inter-token latency.
    assert families["mlxrt_time_to_first_token_seconds"].type == "histogram"
    ttft = ("mlxrt_time_to_first_token_seconds_count", ())
    itl = ("mlxrt_inter_token_latency_seconds_count", ())
    assert after[ttft] - before.get(ttft, 0) == 2
    assert after[itl] - before.get(itl, 0) == (6 - 1) + (5 - 1)
    assert after[("mlxrt_kv_cache_bytes", ())] > 0 and after[("mlxrt_prompt_cache_entries", ())] >= 1
    assert after[("mlxrt_queue_depth", ())] == 0 and after[("mlxrt_batch_size", ())] == 0
    # MLX's allocator: the weights and the prompt cache are live arrays; its peak is at least that.
    weights_and_cache = after[("mlxrt_mlx_active_memory_bytes", ())]
    assert weights_and_cache >= after[("mlxrt_kv_cache_bytes", ())] > 0
    assert after[("mlxrt_mlx_peak_memory_bytes", ())] >= weights_and_cache
    assert after[("mlxrt_mlx_cache_memory_bytes", ())] >= 0
    if sys.platform == "linux":  # glibc's arenas: bytes in use (the server's own objects at least), bytes kept free
        assert value(after, "mlxrt_process_heap_bytes", state="in_use") > 0
        assert value(after, "mlxrt_process_heap_bytes", state="free") >= 0


def test_buckets_are_cumulative(mlxrt_server):
    families, _ = scrape(mlxrt_server)
    for name in ("mlxrt_time_to_first_token_seconds", "mlxrt_inter_token_latency_seconds", "mlxrt_queue_wait_seconds"):
        buckets = [s for s in families[name].samples if s.name.endswith("_bucket")]
        counts = [s.value for s in buckets]
        assert counts == sorted(counts) and buckets[-1].labels["le"] == "+Inf"
        count = next(s.value for s in families[name].samples if s.name.endswith("_count"))
        assert counts[-1] == count
