#!/usr/bin/env python3
"""mlxrt server vs mlx_lm.server on the same model, in one run: start-to-ready, time to first token
over HTTP, decode tok/s over HTTP, server overhead (served decode tok/s over the same program's
direct decode tok/s: `mlxrt generate` / `mlx_lm generate`), and throughput with 8 concurrent
clients. Medians of --runs; ratios are mlxrt / mlx-lm (higher is better for tok/s, lower for times).

The model defaults to the server tests' tiny scripted qwen3 (real Qwen3 tokenizer) grown with
--hidden/--layers; pass --model DIR for any other model directory.

Usage: bench/server_bench.py [--model DIR] [--hidden 512 --layers 8] [--runs 3] [--gen-tokens 128]
       [--clients 8] [--prompt-words 200]
"""
import argparse
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The Python environment holding mlx-lm (MLXRT_VENV, as the Makefile and bench/gpu/run.sh name it).
_VENV = Path(os.environ.get("MLXRT_VENV", ROOT / ".venv"))
PY = str(_VENV / "bin" / "python") if (_VENV / "bin" / "python").exists() else str(_VENV / "bin" / "python3")
BIN = os.environ.get("MLXRT_BIN", str(ROOT / "build" / "mlxrt"))
ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_server_model():
    """The server tests' tiny scripted qwen3 (real Qwen3 tokenizer), made under build/fixtures once."""
    out = subprocess.run([PY, str(ROOT / "tools" / "make_server_fixture.py"), "--out", str(ROOT / "build" / "fixtures")],
                         check=True, capture_output=True, text=True, env=ENV)
    return Path(out.stdout.strip().splitlines()[-1])


def post(port, body, timeout=600):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    return conn


class Server:
    def __init__(self, name, cmd, port, workdir):
        self.name, self.port = name, port
        (workdir / "hf").mkdir(exist_ok=True)
        self.log = open(workdir / f"{name}.log", "w")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(ENV, HF_HUB_CACHE=str(workdir / "hf")))
        # Ready = a completion answered (mlx_lm.server answers /health before loading its model).
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"{name} exited; see {workdir / (name + '.log')}")
            try:
                conn = post(port, {"prompt": "hi", "max_tokens": 1}, timeout=60)
                if conn.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.05)
        self.ready_s = time.perf_counter() - t0

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def stream_timing(port, prompt, n):
    """(seconds to the first token, decode tok/s after it, tokens) of one streamed completion."""
    body = {"prompt": prompt, "max_tokens": n, "stream": True, "logit_bias": {"151645": -100}}
    t0 = time.perf_counter()
    conn = post(port, body)
    resp = conn.getresponse()
    first = last = None
    count = 0
    buf = b""
    while True:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if event.startswith(b"data: {"):
                now = time.perf_counter()
                first = first or now
                last = now
                count += 1
    conn.close()
    # The last event carries the finish reason: count - 1 token intervals after the first.
    decode = (count - 2) / (last - first) if count > 2 and last > first else float("nan")
    return first - t0, decode, count


def concurrent_throughput(port, prompt, n, clients):
    done = []

    def one(i):
        conn = post(port, {"prompt": f"{i}: {prompt}", "max_tokens": n, "logit_bias": {"151645": -100}})
        r = json.loads(conn.getresponse().read())
        done.append(r["usage"]["completion_tokens"])

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.perf_counter() - t0)


GEN_RE = re.compile(r"Generation: (\d+) tokens, ([\d.]+) tokens-per-sec")


def direct_decode(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    m = GEN_RE.search(out.stdout + out.stderr)
    if not m:
        raise SystemExit(f"no generation footer from {cmd[0]}:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return float(m.group(2))


def median(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--prompt-words", type=int, default=200)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="server-bench-"))
    if args.model:
        model = Path(args.model)
    else:
        out = subprocess.run([PY, str(ROOT / "tools" / "make_server_fixture.py"), "--out", str(ROOT / ".cache" / "bench-models"),
                              "--hidden", str(args.hidden), "--layers", str(args.layers),
                              "--name", f"server_qwen3_h{args.hidden}_l{args.layers}"],
                             check=True, capture_output=True, text=True, env=ENV)
        model = Path(out.stdout.strip().splitlines()[-1])
    prompt = " ".join(["the quick brown fox jumps over the lazy dog"] * (args.prompt_words // 9 + 1))
    n = args.gen_tokens

    programs = {
        "mlx_lm": ([PY, "-m", "mlx_lm", "server", "--model", str(model)],
                   [PY, "-m", "mlx_lm", "generate", "--model", str(model), "--prompt", prompt, "--max-tokens", str(n),
                    "--ignore-chat-template"]),
        "mlxrt": ([BIN, "server", "--model", str(model)],
                  [BIN, "generate", "--model", str(model), "--prompt", prompt, "--max-tokens", str(n),
                   "--ignore-chat-template"]),
    }
    results = {name: {"ready_s": [], "ttft_s": [], "decode_tps": [], "direct_tps": [], "concurrent_tps": []}
               for name in programs}
    for run in range(args.runs):
        for name, (serve_cmd, gen_cmd) in programs.items():  # alternate the two programs
            port = free_port()
            srv = Server(name, serve_cmd + ["--host", "127.0.0.1", "--port", str(port)], port, work)
            try:
                r = results[name]
                r["ready_s"].append(srv.ready_s)
                stream_timing(port, prompt, 8)  # warm-up
                ttft, decode, _ = stream_timing(port, f"{run} {prompt}", n)
                r["ttft_s"].append(ttft)
                r["decode_tps"].append(decode)
                r["concurrent_tps"].append(concurrent_throughput(port, prompt, n // 2, args.clients))
            finally:
                srv.stop()
            r["direct_tps"].append(direct_decode(gen_cmd))

    summary = {name: {k: median(v) for k, v in r.items()} for name, r in results.items()}
    for s in summary.values():
        s["served_over_direct"] = s["decode_tps"] / s["direct_tps"]
    print(f"model: {model}  runs: {args.runs}  gen tokens: {n}  clients: {args.clients}")
    print(f"{'metric':<22}{'mlx_lm':>12}{'mlxrt':>12}{'mlxrt/mlx_lm':>14}")
    for k in ("ready_s", "ttft_s", "decode_tps", "direct_tps", "served_over_direct", "concurrent_tps"):
        a, b = summary["mlx_lm"][k], summary["mlxrt"][k]
        print(f"{k:<22}{a:>12.3f}{b:>12.3f}{b / a:>14.2f}")
    print(json.dumps(summary))
    shutil.rmtree(work, ignore_errors=True)  # kept (with the server logs) only when a run fails


if __name__ == "__main__":
    main()
