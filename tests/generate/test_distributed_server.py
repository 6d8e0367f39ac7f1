"""`mlxrt server` as two ring ranks on the CPU (`mlxrt launch -n 2 -- server`) against mlx_lm.server
as two ring ranks (started as mlx.launch starts them), tensor parallel and pipeline: rank 0 serves
HTTP, the other rank runs rank 0's requests on its part of the model. The same answers (content,
finish reason, token counts, logprobs, streamed chunks); concurrent requests batched, and a client
that leaves mid-stream, without the ranks falling out of step; a rank that dies ends the server with
an error naming it; what a distributed server cannot do is refused clearly. Every process runs
under a timeout."""
import http.client
import json
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import BIN, PY, _chat_fixture
from ring_ports import free_port, free_port_pair

MLX_LAUNCH = str(Path(PY).parent / "mlx.launch")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
PROBE = {"prompt": "hi", "max_tokens": 1}

CASES = [
    ("chat", CHAT, {"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 10}),
    ("chat top logprobs", CHAT, {"messages": [{"role": "user", "content": "Numbers"}], "max_tokens": 5,
                                 "logprobs": True, "top_logprobs": 3}),
    ("completion", TEXT, {"prompt": "Once upon a time", "max_tokens": 12}),
    ("completion repetition penalty", TEXT, {"prompt": "la la la", "max_tokens": 8, "repetition_penalty": 1.3}),
    # A seed: served alone (mlx_lm.server's _serve_single), the same draws on every rank.
    ("completion sampled with a seed", TEXT, {"prompt": "Pick a word", "max_tokens": 10, "temperature": 0.9,
                                              "seed": 7}),
]


class Served:
    def __init__(self, proc, port, log_path):
        self.proc, self.port, self.log_path = proc, port, log_path

    def log(self):
        return Path(self.log_path).read_text(errors="replace")


def post(port, path, body, timeout=120):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    return resp.status, json.loads(raw)


def stream(port, path, body, timeout=120):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, body=json.dumps({**body, "stream": True}), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    raw = resp.read().decode()
    conn.close()
    return [b[6:] if b[6:] == "[DONE]" else json.loads(b[6:]) for b in raw.split("\n\n") if b.startswith("data: ")]


def start(cmd, port, work, name):
    log_path = work / f"{name}.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(list(map(str, cmd)), stdout=log, stderr=subprocess.STDOUT, env=ENV,
                            start_new_session=True)
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            # mlx_lm.server answers /health before its model is loaded: wait for a real completion.
            if post(port, TEXT, PROBE, timeout=30)[0] == 200:
                return Served(proc, port, log_path)
        except OSError:
            pass
        time.sleep(0.2)
    stop(Served(proc, port, log_path))
    raise RuntimeError(f"{name} not ready:\n{log_path.read_text()[-3000:]}")


def stop(served):
    try:
        os.killpg(served.proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        served.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(served.proc.pid, signal.SIGKILL)
        served.proc.wait()


def ring_ranks(cmd, work):
    """`cmd` as two ring ranks started by hand with the environment mlx.launch gives each (MLX_RANK,
    MLX_HOSTFILE), without mlx.launch itself: its relay of the ranks' output polls without a pause,
    a core busy for as long as the ranks run. Rank 1 starts in the background of a shell that then
    becomes rank 0; both write to the one log and stop with its process group."""
    ports = [free_port(), free_port()]
    while ports[0] == ports[1]:
        ports[1] = free_port()
    hostfile = work / "hosts.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{p}"] for p in ports]) + "\n")
    line = shlex.join(map(str, cmd))
    return ["sh", "-c", f"export MLX_HOSTFILE={shlex.quote(str(hostfile))}; MLX_RANK=1 {line} & "
                        f"export MLX_RANK=0; exec {line}"]


def mlx_lm_server(model, port, flags, work):
    return ring_ranks([PY, "-m", "mlx_lm", "server", "--model", model, "--host", "127.0.0.1", "--port", port, *flags],
                      work)


def mlxrt_server(model, port, flags):
    return [BIN, "launch", "-n", 2, "--", "server", "--model", model, "--host", "127.0.0.1", "--port", port, *flags]


@pytest.fixture(scope="module")
def models(chat_model):
    """The chat llama (tensor parallel) and a qwen2 of the same size, whose family pipelines in mlx-lm."""
    import make_fixtures

    config = {**make_fixtures.QWEN2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 3, "vocab_size": 151936, "tie_word_embeddings": True,
              "bos_token_id": None, "eos_token_id": 151645}
    return {"tensor": chat_model, "pipeline": _chat_fixture("qwen2_qwen3_tokenizer", "qwen3", config)}


def reference_answers(port):
    """mlx_lm.server's answers to what the tests compare, asked in the order the tests ask: each
    case, then the first streamed. An answer that fails is kept as its exception, for its test."""
    answers = {}
    for key, ask, path, body in [*((name, post, path, body) for name, path, body in CASES),
                                 ("stream", stream, CASES[0][1], CASES[0][2])]:
        try:
            answers[key] = ask(port, path, body)
        except Exception as e:
            answers[key] = e
    return answers


def answer(answers, key):
    if isinstance(answers[key], Exception):
        raise answers[key]
    return answers[key]


@pytest.fixture(scope="module", params=["tensor", "pipeline"])
def servers(request, models, tmp_path_factory):
    """(mlx_lm.server's answers, mlxrt's running server, model). One pair of ranks runs at a time:
    mlx_lm.server's follower waits for the next request in MLX's ring and keeps a core busy, so
    mlx_lm.server answers everything first and stops before mlxrt's starts."""
    work = tmp_path_factory.mktemp(request.param)
    flags = ["--pipeline"] if request.param == "pipeline" else []
    model = models[request.param]
    port = free_port()
    ref = start(mlx_lm_server(model, port, flags, work), port, work, "mlx_lm")
    try:
        answers = reference_answers(port)
    finally:
        stop(ref)
    port = free_port()
    ours = start(mlxrt_server(model, port, flags), port, work, "mlxrt")
    yield answers, ours, model
    stop(ours)


def comparable(r):
    choice = r["choices"][0]
    out = {"finish_reason": choice["finish_reason"],
           "usage": {k: r["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}}
    out["content"] = choice["message"] if "message" in choice else choice["text"]
    if "logprobs" in choice:
        out["logprobs"] = choice["logprobs"]
    return out


@pytest.mark.parametrize("name,path,body", CASES, ids=[c[0] for c in CASES])
def test_same_answers_as_mlx_lm_server(servers, name, path, body):
    answers, ours, _ = servers
    s1, a = answer(answers, name)
    s2, b = post(ours.port, path, body)
    assert s1 == s2 == 200, (a, b)
    assert comparable(b) == comparable(a)


def test_same_stream_as_mlx_lm_server(servers):
    answers, ours, _ = servers
    _, path, body = CASES[0]

    def strip(events):
        out = []
        for e in events[:-1]:
            e = dict(e)
            for k in ("id", "created", "system_fingerprint"):
                e.pop(k)
            out.append(e)
        return out

    a, b = answer(answers, "stream"), stream(ours.port, path, body)
    assert a[-1] == b[-1] == "[DONE]"
    assert strip(b) == strip(a)


def test_concurrent_requests_and_a_leaving_client_keep_the_ranks_in_step(servers):
    """Requests arriving together share a batch on both ranks; a streaming client that leaves is
    stopped on both ranks at the same step. Afterwards the server still gives its first answer."""
    _, ours, _ = servers
    _, path, body = CASES[0]
    status, want = post(ours.port, path, body)
    assert status == 200

    def leave_mid_stream():
        with socket.create_connection(("127.0.0.1", ours.port), timeout=60) as s:
            payload = json.dumps({"prompt": "A long story: " * 20, "max_tokens": 400, "stream": True}).encode()
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
            got = b""
            while got.count(b"data: ") < 3:
                chunk = s.recv(4096)
                assert chunk, "the stream ended before three chunks"
                got += chunk

    results = {}

    def ask(i):
        results[i] = post(ours.port, TEXT, {"prompt": f"Request number {i} says", "max_tokens": 6 + i})

    threads = [threading.Thread(target=leave_mid_stream)] + [threading.Thread(target=ask, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert sorted(results) == list(range(5))
    for i, (status, r) in results.items():
        assert status == 200, r
        assert r["usage"]["completion_tokens"] == 6 + i or r["choices"][0]["finish_reason"] == "stop"
    status, again = post(ours.port, path, body)
    assert status == 200 and comparable(again) == comparable(want)
    conn = http.client.HTTPConnection("127.0.0.1", ours.port, timeout=30)
    conn.request("GET", "/health")
    assert conn.getresponse().status == 200


def test_another_model_is_refused_with_404(servers, models):
    _, ours, model = servers
    other = next(m for m in models.values() if m != model)
    status, r = post(ours.port, TEXT, {"model": str(other), "prompt": "hi", "max_tokens": 2})
    assert status == 404
    assert "distributed over 2 processes" in r["error"]["message"]


def rank_pid(launcher_pid, rank):
    """The process of `rank` among the launcher's descendants (mlx.launch sets MLX_RANK)."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(launcher_pid)], capture_output=True, text=True).stdout
    for pid in map(int, out.split()):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"MLX_RANK={rank}".encode() in env and b"mlxrt" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
        found = rank_pid(pid, rank)
        if found:
            return found
    return None


def cpu_seconds(pid):
    """User and system CPU time of process `pid` so far (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_idle_ranks_sleep(servers):
    """Between requests the follower waits for rank 0's next exchange (every tenth of a second)
    asleep, not inside MLX's ring backend, which polls its sockets without pause while a receive
    is pending (the follower of mlx_lm.server, and of mlxrt before, kept a core busy)."""
    _, ours, _ = servers
    assert post(ours.port, TEXT, PROBE)[0] == 200
    pids = {rank: rank_pid(ours.proc.pid, rank) for rank in (0, 1)}
    assert all(pids.values()), ours.log()
    before = {rank: cpu_seconds(pid) for rank, pid in pids.items()}
    time.sleep(2.0)
    used = {rank: cpu_seconds(pid) - before[rank] for rank, pid in pids.items()}
    assert all(u < 0.5 for u in used.values()), f"CPU seconds over 2 s idle, by rank: {used}"
    assert post(ours.port, TEXT, PROBE)[0] == 200  # and it still serves


def test_a_rank_that_dies_ends_the_server_with_an_error(models, tmp_path):
    """mlx.launch leaves rank 0 running when rank 1 dies: rank 0 itself notices, at the next
    collective (it polls its queue every tenth of a second), and exits naming the cause. Which of
    its two ends names it is a matter of timing: the collective fails and the server stops with
    its rank, or the collective queued behind the failed one waits on the lost peer and the peer
    watch (dist/peer_watch.h) ends the rank with its own message."""
    endings = ("rank 0 of 2 stopped serving", "the connection to a peer of this distributed run was lost")
    port = free_port()
    cmd = [MLX_LAUNCH, "--backend", "ring", "-n", 2, "-p", free_port_pair(), "--", BIN, "server", "--model",
           models["tensor"], "--host", "127.0.0.1", "--port", port]
    served = start(cmd, port, tmp_path, "mlxrt")
    try:
        follower = rank_pid(served.proc.pid, 1)
        assert follower, served.log()
        os.kill(follower, signal.SIGKILL)
        deadline = time.time() + 30
        while time.time() < deadline and not any(e in served.log() for e in endings):
            time.sleep(0.2)
        assert any(e in served.log() for e in endings), served.log()[-3000:]
        served.proc.wait(timeout=30)  # (mlx.launch's own status does not carry its ranks')
    finally:
        stop(served)


def test_draft_models_and_adapters_are_refused_on_every_rank(models):
    model = models["tensor"]
    proc = subprocess.run(list(map(str, [BIN, "launch", "-n", 2, "--", "server", "--model", model, "--draft-model",
                                         model, "--port", free_port()])),
                          capture_output=True, text=True, timeout=120, env=ENV)
    assert proc.returncode != 0
    assert "cannot be used when the server runs distributed" in proc.stderr
