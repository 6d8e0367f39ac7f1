"""Shared helpers for the server tests: the tiny scripted qwen3 model (made at test time), free
ports, and servers (mlxrt server, mlx_lm.server) started per test module and always stopped."""
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SOURCE = Path(os.environ.get("MLXRT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
FIXTURES = Path(os.environ.get("MLXRT_FIXTURES", SOURCE / "build" / "fixtures"))
MLXRT_BIN = os.environ.get("MLXRT_BIN", str(SOURCE / "build" / "mlxrt"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def model_dir():
    out = subprocess.run(
        [sys.executable, str(SOURCE / "tools" / "make_server_fixture.py"), "--out", str(FIXTURES)],
        check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def script(model_dir):
    return json.loads((model_dir / "script.json").read_text())


class Running:
    def __init__(self, proc, port, log):
        self.proc, self.port, self.log = proc, port, log

    def request(self, method, path, body=None, headers=None, timeout=60):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            hdrs = {"Content-Type": "application/json"}
            hdrs.update(headers or {})
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def post_json(self, path, body, timeout=60):
        status, headers, raw = self.request("POST", path, body, timeout=timeout)
        return status, json.loads(raw) if raw else None

    def stream(self, path, body, timeout=60):
        """The SSE events of a streamed request: a list of parsed JSON chunks ending with "[DONE]"."""
        status, headers, raw = self.request("POST", path, body, timeout=timeout)
        assert status == 200, raw
        events = []
        for block in raw.decode().split("\n\n"):
            if block.startswith("data: "):
                payload = block[6:]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
        return events, raw


def wait_ready(proc, port, log_path, timeout=180, probe=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{Path(log_path).read_text()[-3000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            if probe is None:
                conn.request("GET", "/health")
            else:
                conn.request("POST", "/v1/completions", body=json.dumps(probe),
                             headers={"Content-Type": "application/json"})
            ok = conn.getresponse().status == 200
            conn.close()
            if ok:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server not ready after {timeout}s:\n{Path(log_path).read_text()[-3000:]}")


def start(cmd, port, tmp_path_factory, name, probe=None, env=None):
    work = tmp_path_factory.mktemp(name)
    log_path = work / "server.log"
    log = open(log_path, "w")
    # An empty Hugging Face cache of its own: /v1/models lists the served model only (and
    # mlx_lm.server fails that endpoint when there is no cache directory at all).
    (work / "hf-cache").mkdir()
    full_env = dict(os.environ, HF_HUB_CACHE=str(work / "hf-cache"))
    full_env.update(env or {})
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env)
    try:
        wait_ready(proc, port, log_path, probe=probe)
    except Exception:
        proc.kill()
        proc.wait()
        raise
    return Running(proc, port, log_path)


def stop(running):
    running.proc.terminate()
    try:
        running.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        running.proc.kill()
        running.proc.wait()


def start_mlxrt(model_dir, tmp_path_factory, extra=()):
    port = free_port()
    cmd = [MLXRT_BIN, "server", "--model", str(model_dir), "--host", "127.0.0.1", "--port", str(port), *extra]
    return start(cmd, port, tmp_path_factory, "mlxrt")


def start_mlx_lm(model_dir, tmp_path_factory, extra=()):
    port = free_port()
    cmd = [sys.executable, "-m", "mlx_lm", "server", "--model", str(model_dir), "--host", "127.0.0.1",
           "--port", str(port), *extra]
    # mlx_lm.server answers /health before its model is loaded: wait for a real completion.
    probe = {"prompt": "hi", "max_tokens": 1}
    return start(cmd, port, tmp_path_factory, "mlx_lm", probe=probe,
                 env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})


@pytest.fixture(scope="module")
def mlxrt_server(model_dir, tmp_path_factory):
    running = start_mlxrt(model_dir, tmp_path_factory)
    yield running
    stop(running)
    assert running.proc.returncode in (0, -15), Path(running.log).read_text()[-3000:]


def one_token_greedy(model, prompts, max_tokens, tmp_path_factory):
    """Each prompt's reference for the exact modes: `mlxrt generate` prefilling one token at a time,
    as (token id, logprob) per step."""
    import mlx.core as mx

    out = {}
    for prompt in prompts:
        path = tmp_path_factory.mktemp("ref") / "logprobs.safetensors"
        subprocess.run([MLXRT_BIN, "generate", "--model", str(model), "--ignore-chat-template", "--prompt", prompt,
                        "-m", str(max_tokens), "--prefill-step-size", "1", "--logprobs-file", str(path)],
                       check=True, capture_output=True, text=True)
        logprobs = mx.load(str(path))["logprobs"]
        ids = mx.argmax(logprobs, axis=-1).tolist()
        out[prompt] = [(t, logprobs[n, t].astype(mx.float32).item()) for n, t in enumerate(ids)]
    return out
