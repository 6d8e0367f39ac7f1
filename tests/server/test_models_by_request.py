"""Models by request, as mlx_lm.server loads them: a request's `model` names a local model directory
or an `org/name` id of the Hugging Face cache, and the server loads it. Two tiny qwen3 models
(tools/make_server_fixture.py, seeds 40 and 41) sit in a temporary cache (models--org--name/
snapshots/<sha>/ + refs/main). Greedy requests alternate between them, by cache id and by snapshot
path, on three servers started with the first model: mlx_lm.server (the reference), mlxrt server
(one model resident: each switch reloads) and mlxrt server --max-models 2 (both stay). Every
answer equals mlx_lm.server's; /metrics counts the loads; /v1/models lists what can be served
(without paths); a model that cannot be served is a 404 in each API's own shape, and the server
and its resident models carry on."""
import hashlib
import json
import sys

import pytest

from conftest import MLXRT_BIN, FIXTURES, SOURCE, free_port, start, stop

sys.path.insert(0, str(SOURCE / "tools"))
import make_server_fixture  # noqa: E402

CHAT, TEXT = "/v1/chat/completions", "/v1/completions"
A_ID, B_ID, UNSUPPORTED_ID = "test-org/tiny-a", "test-org/tiny-b", "test-org/tiny-unsupported"


def put_in_cache(cache, repo_id, files):
    """A cache entry for `repo_id` whose snapshot links to `files` ({name: path or text})."""
    sha = hashlib.sha1(repo_id.encode()).hexdigest()
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / sha
    snapshot.mkdir(parents=True)
    for name, src in files.items():
        if isinstance(src, str):
            (snapshot / name).write_text(src)
        else:
            (snapshot / name).symlink_to(src.resolve())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    return snapshot


@pytest.fixture(scope="module")
def setup(model_dir, tmp_path_factory):
    b_dir = make_server_fixture.ensure(FIXTURES, name="server_qwen3_seed41", seed=41)
    work = tmp_path_factory.mktemp("models_by_request")
    cache = work / "hub"
    a = put_in_cache(cache, A_ID, {f.name: f for f in model_dir.iterdir() if f.is_file()})
    b = put_in_cache(cache, B_ID, {f.name: f for f in b_dir.iterdir() if f.is_file()})
    # Listed by mlx_lm.server's cache scan (it has the three files), but of no family either runs.
    config = json.loads((model_dir / "config.json").read_text())
    put_in_cache(cache, UNSUPPORTED_ID, {
        "config.json": json.dumps({**config, "model_type": "no_such_family"}),
        "model.safetensors.index.json": model_dir / "model.safetensors.index.json",
        "tokenizer_config.json": model_dir / "tokenizer_config.json"})
    not_a_model = work / "not-a-model"
    not_a_model.mkdir()
    (not_a_model / "README.md").write_text("no config.json here\n")
    return {"cache": cache, "a": a, "b": b, "not_a_model": not_a_model}


def start_server(setup, tmp_path_factory, name, cmd, probe=None):
    env = {"HF_HUB_CACHE": str(setup["cache"]), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    port = free_port()
    return start([*cmd, "--model", A_ID, "--host", "127.0.0.1", "--port", str(port)], port, tmp_path_factory, name,
                 probe=probe, env=env)


@pytest.fixture(scope="module")
def servers(setup, tmp_path_factory):
    started = []
    try:
        started.append(start_server(setup, tmp_path_factory, "mlx_lm", [sys.executable, "-m", "mlx_lm", "server"],
                                    probe={"prompt": "hi", "max_tokens": 1}))
        started.append(start_server(setup, tmp_path_factory, "mlxrt_one", [MLXRT_BIN, "server"]))
        started.append(start_server(setup, tmp_path_factory, "mlxrt_lru", [MLXRT_BIN, "server", "--max-models", "2"]))
    except Exception:
        for s in started:
            stop(s)
        raise
    yield dict(zip(("ref", "one", "lru"), started))
    for s in started:
        stop(s)


def names(setup):
    """The alternation: A resident at start, then B, A, B, A, B, each by cache id or snapshot path."""
    return [("a", str(setup["a"])), ("b", B_ID), ("a", A_ID), ("b", str(setup["b"])), ("a", "default_model"),
            ("b", B_ID)]


def requests(model):
    return [(CHAT, {"model": model, "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 12,
                    "temperature": 0.0}),
            (TEXT, {"model": model, "prompt": "Once upon a time", "max_tokens": 10, "temperature": 0.0})]


def essence(path, body):
    choice = body["choices"][0]
    text = choice["message"]["content"] if path == CHAT else choice["text"]
    return (text, choice["finish_reason"], body["usage"]["prompt_tokens"], body["usage"]["completion_tokens"])


def loads(server):
    """mlxrt_model_loads_total and mlxrt_models_resident from /metrics."""
    _, _, raw = server.request("GET", "/metrics")
    values = dict(line.split() for line in raw.decode().splitlines() if line.startswith("mlxrt_model"))
    return int(float(values["mlxrt_model_loads_total"])), int(float(values["mlxrt_models_resident"]))


@pytest.fixture(scope="module")
def answers(servers, setup):
    """(which model, path, {server: essence}) for each request of the alternation, in order."""
    out = []
    for which, model in names(setup):
        for path, body in requests(model):
            got = {}
            for key, server in servers.items():
                status, reply = server.post_json(path, body)
                assert status == 200, (key, model, reply)
                assert reply["model"] == model
                got[key] = essence(path, reply)
            out.append((which, path, got))
    return out


def test_alternating_answers_equal_mlx_lm(answers):
    for which, path, got in answers:
        assert got["one"] == got["ref"] and got["lru"] == got["ref"], (which, path, got)
    # The two models do answer differently: the switches were real.
    first = {(which, path): got["ref"][0] for which, path, got in answers}
    assert first[("a", CHAT)] != first[("b", CHAT)] and first[("a", TEXT)] != first[("b", TEXT)]


def test_max_models_keeps_both_and_default_replaces(answers, servers):
    # The start-up model, then B once: the second request of each model reused it.
    assert loads(servers["lru"]) == (2, 2)
    # One resident: the start-up model, then each of the five switches loaded again.
    assert loads(servers["one"]) == (6, 1)
    log = open(servers["one"].log).read()
    assert log.count(f"loaded model '{B_ID}'") == 2 and "loaded model 'default_model'" in log


def test_concurrent_requests_of_two_models(answers, servers, setup):
    """Requests of both models at once: a batch holds one model's requests, the other's wait for it
    to drain; every answer is still mlx_lm.server's for its model."""
    from concurrent.futures import ThreadPoolExecutor
    want = {(which, path): got["ref"] for which, path, got in answers}
    jobs = [(which, model, path, body) for which, model in [("a", A_ID), ("b", B_ID)] * 3
            for path, body in requests(model)]
    for key in ("lru", "one"):
        with ThreadPoolExecutor(len(jobs)) as pool:
            replies = list(pool.map(lambda j: servers[key].post_json(j[2], j[3]), jobs))
        for (which, model, path, _), (status, reply) in zip(jobs, replies):
            assert status == 200 and essence(path, reply) == want[(which, path)], (key, model, path, reply)


def test_models_list(servers, setup):
    _, _, raw_ref = servers["ref"].request("GET", "/v1/models")
    ref = json.loads(raw_ref)
    for key in ("one", "lru"):
        _, _, raw = servers[key].request("GET", "/v1/models")
        ours = json.loads(raw)
        assert sorted(ours) == sorted(ref) == ["data", "object"] and ours["object"] == "list"
        # mlx_lm.server lists every mlx-looking cache entry; this server only what it can run,
        # its start-up model last.
        assert sorted(m["id"] for m in ref["data"]) == [A_ID, B_ID, UNSUPPORTED_ID]
        assert [m["id"] for m in ours["data"]] == [B_ID, A_ID]
        assert [sorted(m) for m in ours["data"]] == [sorted(ref["data"][0])] * 2
        assert all(m["object"] == "model" and isinstance(m["created"], int) for m in ours["data"])
        assert str(setup["cache"]) not in raw.decode()
        _, _, one = servers[key].request("GET", f"/v1/models/{B_ID}")
        assert [m["id"] for m in json.loads(one)["data"]] == [B_ID]


def bad_models(setup):
    return {"unknown id": "test-org/no-such-model", "unknown path": str(setup["cache"] / "missing"),
            "not a model": str(setup["not_a_model"]), "unsupported model_type": UNSUPPORTED_ID}


@pytest.mark.parametrize("case", ["unknown id", "unknown path", "not a model", "unsupported model_type"])
def test_bad_model_is_404_in_every_api(servers, setup, case):
    model = bad_models(setup)[case]
    status, ref = servers["ref"].post_json(CHAT, requests(model)[0][1])
    assert status == 404, ref  # mlx_lm.server: 404 with the load error
    server = servers["lru"]
    before = loads(server)
    bodies = {
        CHAT: requests(model)[0][1],
        TEXT: requests(model)[1][1],
        "/v1/messages": {"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]},
        "/v1/messages/count_tokens": {"model": model, "messages": [{"role": "user", "content": "Hi"}]},
        "/v1/responses": {"model": model, "input": "Hi", "max_output_tokens": 8},
        "/v1/embeddings": {"model": model, "input": "Hi"},
    }
    for path, body in bodies.items():
        status, err = server.post_json(path, body)
        assert status == 404, (path, err)
        if path.startswith("/v1/messages"):
            assert err["type"] == "error" and err["error"]["type"] == "not_found_error", err
        else:
            assert err["error"]["type"] == "not_found_error" and err["error"]["param"] == "model", err
        assert model in err["error"]["message"], err
        if case == "unknown id":
            assert str(setup["cache"]) not in err["error"]["message"]
    # Nothing was loaded or dropped: both models still answer without a reload.
    for model in (A_ID, B_ID):
        status, _ = server.post_json(TEXT, requests(model)[1][1])
        assert status == 200
    assert loads(server) == before
    assert server.request("GET", "/health")[0] == 200


def test_other_apis_take_the_model(servers, setup):
    server = servers["lru"]
    prompt = [{"role": "user", "content": "Hello there"}]
    for model in (B_ID, str(setup["a"]), A_ID):
        status, chat = server.post_json(CHAT, {"model": model, "messages": prompt, "max_tokens": 12})
        assert status == 200
        text = chat["choices"][0]["message"]["content"]
        status, msg = server.post_json("/v1/messages", {"model": model, "max_tokens": 12, "messages": prompt})
        assert status == 200 and msg["model"] == model and msg["content"][0]["text"] == text, msg
        status, resp = server.post_json("/v1/responses", {"model": model, "input": "Hello there",
                                                          "max_output_tokens": 12})
        parts = [c["text"] for item in resp["output"] if item["type"] == "message" for c in item["content"]]
        assert status == 200 and parts == [text], resp
    vectors = {}
    for model in (B_ID, str(setup["b"]), A_ID, "default_model"):
        status, emb = server.post_json("/v1/embeddings", {"model": model, "input": [[1, 17, 300, 42]]})
        assert status == 200 and emb["model"] == model, emb
        vectors[model] = emb["data"][0]["embedding"]
    assert vectors[B_ID] == vectors[str(setup["b"])] and vectors[A_ID] == vectors["default_model"]
    assert vectors[B_ID] != vectors[A_ID]
    # Adapters apply to the start-up model only.
    status, err = server.post_json(TEXT, {**requests(B_ID)[1][1], "adapters": str(setup["a"])})
    assert status == 400 and err["error"]["param"] == "adapters", err
    assert loads(server) == (2, 2)


def test_help_shows_max_models(setup):
    import subprocess
    out = subprocess.run([MLXRT_BIN, "server", "--help"], capture_output=True, text=True, check=True).stdout
    assert "--max-models" in out
    bad = subprocess.run([MLXRT_BIN, "server", "--model", str(setup["a"]), "--max-models", "0"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and "--max-models" in bad.stderr
