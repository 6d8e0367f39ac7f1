"""`--adapter-path` on the server: mlx_lm.server and mlxrt server started with the same mlx_lm.lora
adapter answer the same greedy requests with the same content; a request's `adapters` may name the
server's adapter only (400 in OpenAI's shape otherwise)."""
import json
import sys

import pytest

from conftest import FIXTURES, SOURCE, start_mlx_lm, start_mlxrt, stop

sys.path.insert(0, str(SOURCE / "tools"))

CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"


@pytest.fixture(scope="module")
def adapter(model_dir):
    import make_fixtures
    from mlx_lm.utils import load_model

    spec = {"type": "lora", "num_layers": -1, "seed": 9, "lr": 5e-2}
    out = FIXTURES / "server_adapter"
    stamp = out / "adapter-fixture.json"
    want = json.dumps({**spec, "model": str(model_dir)}, sort_keys=True)
    if not (stamp.exists() and stamp.read_text() == want):
        model, config = load_model(model_dir)
        make_fixtures.train_adapter(model, config, out, spec)
        stamp.write_text(want)
    return out


@pytest.fixture(scope="module")
def servers(model_dir, adapter, tmp_path_factory):
    ref = start_mlx_lm(model_dir, tmp_path_factory, extra=["--adapter-path", str(adapter)])
    try:
        ours = start_mlxrt(model_dir, tmp_path_factory, extra=["--adapter-path", str(adapter)])
    except Exception:
        stop(ref)
        raise
    yield ref, ours
    stop(ours)
    stop(ref)


CASES = [
    (CHAT, {"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 12}),
    (TEXT, {"prompt": "Once upon a time", "max_tokens": 12}),
    (TEXT, {"prompt": "In the beginning", "max_tokens": 8, "repetition_penalty": 1.3}),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_same_answers_with_the_adapter(servers, case):
    ref, ours = servers
    path, body = CASES[case]
    body = {**body, "temperature": 0.0}
    s1, want = ref.post_json(path, body)
    s2, got = ours.post_json(path, body)
    assert s1 == s2 == 200, (want, got)
    pick = (lambda r: r["choices"][0]["message"]["content"]) if path == CHAT else (lambda r: r["choices"][0]["text"])
    assert pick(got) == pick(want)
    assert got["usage"] == want["usage"]


def test_request_adapters_field(servers, adapter, model_dir):
    _, ours = servers
    body = {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0.0}
    status, plain = ours.post_json(TEXT, body)
    status_named, named = ours.post_json(TEXT, {**body, "adapters": str(adapter)})
    assert status == status_named == 200 and named["choices"][0]["text"] == plain["choices"][0]["text"]
    status, err = ours.post_json(TEXT, {**body, "adapters": str(model_dir)})
    assert status == 400 and "adapter" in err["error"]["message"], err
