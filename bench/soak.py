#!/usr/bin/env python3
"""Soak: many clients against one `mlxrt server` for minutes, some of them misbehaving.

Each of --clients threads sends requests back to back until --duration seconds have passed.
A request is, at random:
  - well formed (completions or chat, streamed or not, 4 to 48 tokens): it must come back 200 with
    its whole answer (the stream ends in `data: [DONE]`); anything else is an error;
  - a disconnect (--disconnect-rate): a stream the client closes after its first events;
  - malformed (--malformed-rate): a body that is not JSON, or a field of the wrong type: it must get
    a 4xx with an OpenAI-shaped error body, else it is an error;
  - slow (--slow-rate): a well-formed stream read a few bytes at a time with pauses.
The server's resident memory and its /metrics memory gauges (MLX's live arrays, the freed buffers
its allocator keeps, the prompt cache) are sampled every few seconds; reported: requests by kind,
errors (must be 0), generated tok/s, RSS at start and end, each series' slope over the second half
(MB/min; flat is what a server without leaks shows), and /health afterwards.

The model defaults to the server tests' tiny scripted qwen3 (real Qwen3 tokenizer).

Usage: bench/soak.py [--model DIR] [--clients 64] [--duration 600] [--disconnect-rate 0.1]
                     [--malformed-rate 0.05] [--slow-rate 0.05] [--seed 0] [--json OUT]
"""
import argparse
import http.client
import json
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from server_bench import BIN, Server, free_port, tiny_server_model

PROMPTS = ["the quick brown fox", "tell me about the sea", "one two three four five six",
           "a longer prompt " * 12, "hello"]


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {"ok": 0, "disconnect": 0, "malformed": 0, "slow": 0}
        self.errors = []
        self.tokens = 0

    def add(self, kind, tokens=0):
        with self.lock:
            self.counts[kind] += 1
            self.tokens += tokens

    def error(self, what):
        with self.lock:
            self.errors.append(what)


def request_body(rng, stream):
    n = rng.randint(4, 48)
    if rng.random() < 0.5:
        return "/v1/completions", {"prompt": rng.choice(PROMPTS), "max_tokens": n, "stream": stream}
    return "/v1/chat/completions", {"messages": [{"role": "user", "content": rng.choice(PROMPTS)}],
                                    "max_tokens": n, "stream": stream}


def open_request(port, path, body_bytes):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", path, body=body_bytes, headers={"Content-Type": "application/json"})
    return conn


def count_events(data):
    return sum(1 for line in data.split(b"\n") if line.startswith(b"data: {"))


def well_formed(port, rng, tally, slow=False):
    stream = slow or rng.random() < 0.7
    path, body = request_body(rng, stream)
    conn = open_request(port, path, json.dumps(body).encode())
    resp = conn.getresponse()
    if resp.status != 200:
        tally.error(f"{path} {resp.status}: {resp.read()[:200]!r}")
        conn.close()
        return
    if not stream:
        doc = json.loads(resp.read())
        if not doc.get("choices"):
            tally.error(f"{path}: no choices in {str(doc)[:200]}")
        else:
            tally.add("ok", doc.get("usage", {}).get("completion_tokens", 0))
        conn.close()
        return
    data = b""
    while True:
        chunk = resp.read1(7 if slow else 65536)
        if not chunk:
            break
        data += chunk
        if slow:
            time.sleep(rng.uniform(0.005, 0.05))
    conn.close()
    if not data.rstrip().endswith(b"data: [DONE]"):
        tally.error(f"{path}: stream did not end with [DONE]: {data[-200:]!r}")
        return
    tally.add("slow" if slow else "ok", count_events(data))


def disconnect(port, rng, tally):
    path, body = request_body(rng, True)
    body["max_tokens"] = 200
    conn = open_request(port, path, json.dumps(body).encode())
    resp = conn.getresponse()
    if resp.status != 200:
        tally.error(f"disconnect {path} {resp.status}")
        conn.close()
        return
    resp.read1(rng.choice([1, 64, 512]))
    # Close without reading the rest: the server must notice and free the row.
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    tally.add("disconnect")


def malformed(port, rng, tally):
    path, body = request_body(rng, rng.random() < 0.5)
    choice = rng.randrange(3)
    if choice == 0:
        raw = json.dumps(body).encode()[:-3]  # cut short: not JSON
    elif choice == 1:
        body["max_tokens"] = "many"
        raw = json.dumps(body).encode()
    else:
        body["temperature"] = [1]
        raw = json.dumps(body).encode()
    conn = open_request(port, path, raw)
    resp = conn.getresponse()
    payload = resp.read()
    conn.close()
    if not 400 <= resp.status < 500:
        tally.error(f"malformed {path} got {resp.status}: {payload[:200]!r}")
        return
    try:
        if "error" not in json.loads(payload):
            raise ValueError("no error object")
    except ValueError as e:
        tally.error(f"malformed {path}: {e}: {payload[:200]!r}")
        return
    tally.add("malformed")


def client(port, seed, deadline, rates, tally):
    rng = random.Random(seed)
    while time.time() < deadline:
        r = rng.random()
        try:
            if r < rates.disconnect_rate:
                disconnect(port, rng, tally)
            elif r < rates.disconnect_rate + rates.malformed_rate:
                malformed(port, rng, tally)
            elif r < rates.disconnect_rate + rates.malformed_rate + rates.slow_rate:
                well_formed(port, rng, tally, slow=True)
            else:
                well_formed(port, rng, tally)
        except (OSError, http.client.HTTPException, json.JSONDecodeError) as e:
            tally.error(f"{type(e).__name__}: {e}")


def rss_mb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


GAUGES = {"mlx_active_mb": "mlxrt_mlx_active_memory_bytes", "mlx_cache_mb": "mlxrt_mlx_cache_memory_bytes",
          "prompt_cache_mb": "mlxrt_kv_cache_bytes"}


def gauges_mb(port):
    """The server's memory gauges from /metrics, in MB (what a growing RSS is made of)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for key, name in GAUGES.items():
        for line in text.splitlines():
            if line.startswith(name + " "):
                out[key] = float(line.split()[1]) / 2**20
    return out


def slope_mb_per_min(samples):
    """Least-squares slope of (seconds, MB) samples, in MB per minute."""
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mr = sum(r for _, r in samples) / n
    den = sum((t - mt) ** 2 for t, _ in samples)
    return 60 * sum((t - mt) * (r - mr) for t, r in samples) / den if den else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--disconnect-rate", type=float, default=0.1)
    ap.add_argument("--malformed-rate", type=float, default=0.05)
    ap.add_argument("--slow-rate", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the summary here")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="soak-"))
    model = Path(args.model) if args.model else tiny_server_model()
    port = free_port()
    srv = Server("mlxrt", [BIN, "server", "--model", str(model), "--host", "127.0.0.1", "--port", str(port)],
                 port, work)
    tally = Tally()
    samples = []
    t0 = time.time()
    deadline = t0 + args.duration
    threads = [threading.Thread(target=client, args=(port, args.seed * 1000 + i, deadline, args, tally))
               for i in range(args.clients)]
    for t in threads:
        t.start()
    gauge_samples = []
    while any(t.is_alive() for t in threads):
        now = time.time() - t0
        samples.append((now, rss_mb(srv.proc.pid)))
        gauge_samples.append((now, gauges_mb(port)))
        time.sleep(5)
    wall = time.time() - t0
    samples.append((wall, rss_mb(srv.proc.pid)))
    gauge_samples.append((wall, gauges_mb(port)))
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/health")
    health = conn.getresponse().status
    alive = srv.proc.poll() is None
    srv.stop()

    second_half = [s for s in samples if s[0] >= wall / 2]
    summary = {
        "clients": args.clients, "seconds": round(wall, 1), **tally.counts, "errors": len(tally.errors),
        "tok_s": round(tally.tokens / wall, 1), "rss_start_mb": round(samples[0][1], 1),
        "rss_end_mb": round(samples[-1][1], 1), "rss_slope_second_half_mb_per_min": round(slope_mb_per_min(second_half), 2),
        "health_after": health, "server_alive": alive,
    }
    for key in GAUGES:
        series = [(t, g[key]) for t, g in gauge_samples if key in g]
        if series:
            summary[f"{key}_end"] = round(series[-1][1], 1)
            summary[f"{key}_slope_second_half_mb_per_min"] = round(
                slope_mb_per_min([x for x in series if x[0] >= wall / 2]), 2)
    print(json.dumps(summary, indent=1))
    for e in tally.errors[:20]:
        print("error:", e, file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(summary) + "\n")
    if not tally.errors:
        shutil.rmtree(work, ignore_errors=True)  # the server's log stays when something failed
    return 0 if not tally.errors and health == 200 and alive else 1


if __name__ == "__main__":
    sys.exit(main())
