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
Beside them, for the whole run, connections that hold the server's threads without asking anything:
--idle-sockets that never send a byte, and --tricklers that send a header block one byte a second and
never finish it. The server must close both (an idle one after its 5 s keep-alive wait, a trickler at
--header-timeout); each is reopened when it is closed (at most --attack-connect-rate a second), and the
closes are counted, as is how long the server let each stay open. Meanwhile a prober times GET
/health on a fresh connection every --health-interval seconds (connect to the whole response): its
p50/p99/max is the server's responsiveness under attack, and a probe that fails or is not 200 is an
error.
The server's resident memory and its /metrics memory gauges (MLX's live arrays, the freed buffers
its allocator keeps, the prompt cache, the C heap's bytes in use and kept free by malloc's arenas)
are sampled every few seconds; reported: requests by kind,
errors (must be 0), generated tok/s, RSS at start and end, each series' slope over the second half
(MB/min; flat is what a server without leaks shows), the /health latencies, the attackers' closes
(and the server's own count of header timeouts), and /health afterwards.

The model defaults to the server tests' tiny scripted qwen3 (real Qwen3 tokenizer).

Usage: bench/soak.py [--model DIR] [--clients 64] [--duration 600] [--disconnect-rate 0.1]
                     [--malformed-rate 0.05] [--slow-rate 0.05] [--idle-sockets 200] [--tricklers 32]
                     [--attack-connect-rate 100] [--health-interval 0.25] [--seed 0] [--json OUT]
                     [--server-args "--join-prefill between"]
"""
import argparse
import errno
import http.client
import json
import math
import multiprocessing
import random
import selectors
import shlex
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


# A header block that never ends: after the request line and a few headers, one header's value forever.
TRICKLE = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Trickle: "


class Holders:
    """Connections that hold a server thread each without ever completing a request: `idle` never
    send, `trickle` send a header block a byte a second. One selector loop drives them all
    (hundreds of threads would take the two cores from the clients being measured)."""

    def __init__(self, port, idle, tricklers, connect_rate, stop):
        self.port, self.stop, self.connect_rate = port, stop, connect_rate
        self.allowance, self.last_open = 0.0, None
        self.sel = None  # made in run(), in the process that uses it
        self.wanted = {"idle": idle, "trickle": tricklers}
        self.closed = {"idle": 0, "trickle": 0}  # closes by the server, not by us at the end
        self.held_s = {"idle": [], "trickle": []}  # how long the server let each one stay
        self.connect_s = []
        self.connect_failures = 0
        self.rng = random.Random(0)

    def open_missing(self, now):
        """Tops each kind up to its count, at most --attack-connect-rate a second. The server's accept
        queue is only a few deep: a burst of hundreds overflows it, and a connect whose last ACK the
        kernel drops looks established here while the server never sees it (measured: 173 of 200)."""
        elapsed = now - self.last_open if self.last_open is not None else 0.0
        self.allowance = min(2.0, self.allowance + elapsed * self.connect_rate)
        self.last_open = now
        held = {"idle": 0, "trickle": 0}
        for key in self.sel.get_map().values():
            held[key.data["kind"]] += 1
        for kind in ("trickle", "idle"):
            while held[kind] < self.wanted[kind] and self.allowance >= 1:
                self.connect(kind, now)
                held[kind] += 1
                self.allowance -= 1

    def connect(self, kind, now):
        # Not waiting for the connect: a SYN that a full accept queue drops is sent again only a second
        # later, and the other holders' bytes must not wait for it.
        sock = socket.socket()
        sock.setblocking(False)
        err = sock.connect_ex(("127.0.0.1", self.port))
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            self.connect_failures += 1
            return
        self.sel.register(sock, selectors.EVENT_WRITE, {"kind": kind, "started": now, "opened": None, "sent": 0})

    def connected(self, key, now):
        sock, state = key.fileobj, key.data
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            self.drop(key)
            self.connect_failures += 1
            return
        self.connect_s.append(now - state["started"])
        # Tricklers start at random phases so that their bytes do not arrive in one burst.
        state.update(opened=now, next=now + self.rng.random())
        self.sel.modify(sock, selectors.EVENT_READ, state)

    def drop(self, key):
        self.sel.unregister(key.fileobj)
        key.fileobj.close()

    def cut(self, key, now):
        self.drop(key)
        self.closed[key.data["kind"]] += 1
        self.held_s[key.data["kind"]].append(now - key.data["opened"])

    def readable(self, key, now):
        # Nothing was asked, so anything readable is the server's close (a reset counts the same).
        try:
            data = key.fileobj.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.cut(key, now)

    def tick(self, now):
        """Sends each trickler its next byte when due; gives up on a connect pending for 10 s."""
        for key in list(self.sel.get_map().values()):
            state = key.data
            if state["opened"] is None:
                if now - state["started"] > 10:
                    self.drop(key)
                    self.connect_failures += 1
                continue
            if state["kind"] != "trickle" or state["next"] > now:
                continue
            i = state["sent"]
            try:
                state["sent"] += key.fileobj.send(TRICKLE[i:i + 1] or b"a")
            except BlockingIOError:
                pass
            except OSError:  # the server closed it between our reads
                self.cut(key, now)
                continue
            state["next"] = now + 1.0

    def run(self):
        self.sel = selectors.DefaultSelector()
        while not self.stop.is_set():
            self.open_missing(time.time())
            for key, _ in self.sel.select(timeout=0.01):
                (self.connected if key.data["opened"] is None else self.readable)(key, time.time())
            self.tick(time.time())
        for key in list(self.sel.get_map().values()):
            self.drop(key)
        return self.summary()

    def summary(self):
        connect = sorted(self.connect_s)
        out = {"attack_connects": len(connect), "attack_connect_failures": self.connect_failures,
               "attack_connect_p50_ms": round(1000 * percentile(connect, 50), 1),
               "attack_connect_max_ms": round(1000 * connect[-1], 1) if connect else None}
        for kind in ("idle", "trickle"):
            held = sorted(self.held_s[kind])
            out[f"{kind}_closed_by_server"] = self.closed[kind]
            out[f"{kind}_held_p50_s"] = round(percentile(held, 50), 1)
            out[f"{kind}_held_max_s"] = round(held[-1], 1) if held else None
        return out


class HealthProbe:
    """GET /health on a fresh connection every `interval` seconds until `stop`: the latency a load
    balancer's health check sees while the server is busy and attacked."""

    def __init__(self, port, interval, stop):
        self.port, self.interval, self.stop = port, interval, stop
        self.latencies_ms = []
        self.errors = []

    def probe(self):
        t = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", "/health")
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        self.latencies_ms.append(1000 * (time.perf_counter() - t))
        if resp.status != 200:
            raise ValueError(f"status {resp.status}: {body[:200]!r}")

    def run(self):
        # On a fixed schedule, so that a slow probe does not thin out the samples after it.
        next_at = time.time()
        while not self.stop.is_set():
            try:
                self.probe()
            except (OSError, http.client.HTTPException, ValueError) as e:
                self.errors.append(f"health: {type(e).__name__}: {e}")
            next_at += self.interval
            self.stop.wait(max(0.0, next_at - time.time()))
        return self.summary()

    def summary(self):
        xs = sorted(self.latencies_ms)
        return {"health_probes": len(xs) + len(self.errors), "health_failures": len(self.errors),
                "health_p50_ms": round(percentile(xs, 50), 1), "health_p99_ms": round(percentile(xs, 99), 1),
                "health_max_ms": round(xs[-1], 1) if xs else None, "health_errors": self.errors}


# Forked, not spawned: the jobs are objects of this script, which a spawned interpreter re-imports as
# another module. They are forked before any thread of ours starts.
FORK = multiprocessing.get_context("fork")


def report(job, queue):
    queue.put(job.run())


def start_apart(jobs):
    """Each job's run() in a process of its own: the clients' threads hold the GIL so much that a
    thread beside them waits seconds to reconnect a holder or to read a probe's answer (measured: 200
    reconnects took 16 s), which would time this script rather than the server."""
    queue = FORK.Queue()
    procs = [FORK.Process(target=report, args=(job, queue), daemon=True) for job in jobs]
    for proc in procs:
        proc.start()
    return procs, queue


def join_apart(procs, queue):
    """The jobs' summaries merged, once `stop` is set."""
    out = {}
    for _ in procs:
        out.update(queue.get(timeout=120))  # read before join: a child blocks until its summary is taken
    for proc in procs:
        proc.join()
    return out


def percentile(sorted_xs, p):
    """Nearest-rank percentile (a value that was measured, not an interpolation)."""
    if not sorted_xs:
        return float("nan")
    return sorted_xs[max(0, math.ceil(p / 100 * len(sorted_xs)) - 1)]


def rss_mb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def open_sockets(pid):
    """Sockets the server holds (connections, the listener and its own): what the holders really hold."""
    n = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            n += str(fd.readlink()).startswith("socket:")
        except OSError:  # closed while we looked
            pass
    return n


def listen_overflows():
    """Connections the kernel dropped because an accept queue was full (this host, all listeners): a
    dropped SYN is resent a second later, so these are the seconds-long connects a prober may see."""
    lines = [line.split() for line in Path("/proc/net/netstat").read_text().splitlines()
             if line.startswith("TcpExt:")]
    return int(dict(zip(lines[0], lines[1])).get("ListenOverflows", 0)) if len(lines) == 2 else 0


GAUGES = {"mlx_active_mb": "mlxrt_mlx_active_memory_bytes", "mlx_cache_mb": "mlxrt_mlx_cache_memory_bytes",
          "prompt_cache_mb": "mlxrt_kv_cache_bytes", "heap_in_use_mb": 'mlxrt_process_heap_bytes{state="in_use"}',
          "heap_free_mb": 'mlxrt_process_heap_bytes{state="free"}'}


def scrape(port):
    """/metrics as {series (name and labels): value}."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            out[series] = float(value)
    return out


def gauges_mb(port):
    """The server's memory gauges from /metrics, in MB (what a growing RSS is made of)."""
    metrics = scrape(port)
    return {key: metrics[name] / 2**20 for key, name in GAUGES.items() if name in metrics}


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
    ap.add_argument("--idle-sockets", type=int, default=200, help="connections that never send a byte")
    ap.add_argument("--tricklers", type=int, default=32, help="connections sending headers a byte a second")
    ap.add_argument("--attack-connect-rate", type=float, default=100,
                    help="connections a second the idle sockets and tricklers are (re)opened at, at most")
    ap.add_argument("--health-interval", type=float, default=0.25, help="seconds between /health probes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the summary here")
    ap.add_argument("--server-args", default="", help="more options for `mlxrt server` (e.g. '--join-prefill between')")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="soak-"))
    model = Path(args.model) if args.model else tiny_server_model()
    port = free_port()
    srv = Server("mlxrt", [BIN, "server", "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
                           *shlex.split(args.server_args)], port, work)
    tally = Tally()
    samples = []
    overflows0 = listen_overflows()
    t0 = time.time()
    deadline = t0 + args.duration
    threads = [threading.Thread(target=client, args=(port, args.seed * 1000 + i, deadline, args, tally))
               for i in range(args.clients)]
    # The attack and the prober run as long as any client does, so that every request is under both.
    stop = FORK.Event()
    side = start_apart([Holders(port, args.idle_sockets, args.tricklers, args.attack_connect_rate, stop),
                        HealthProbe(port, args.health_interval, stop)])
    for t in threads:
        t.start()
    gauge_samples, sockets = [], []
    while any(t.is_alive() for t in threads):
        now = time.time() - t0
        samples.append((now, rss_mb(srv.proc.pid)))
        sockets.append(open_sockets(srv.proc.pid))
        gauge_samples.append((now, gauges_mb(port)))
        time.sleep(5)
    wall = time.time() - t0
    samples.append((wall, rss_mb(srv.proc.pid)))
    gauge_samples.append((wall, gauges_mb(port)))
    stop.set()
    overflows = listen_overflows() - overflows0
    apart = join_apart(*side)
    for e in apart.pop("health_errors"):
        tally.error(e)
    header_timeouts = scrape(port).get('mlxrt_http_read_timeouts_total{phase="headers"}')
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
        "idle_sockets": args.idle_sockets, "tricklers": args.tricklers, **apart,
        "server_sockets_median": sorted(sockets)[len(sockets) // 2] if sockets else None,
        "server_sockets_max": max(sockets, default=None),
        "server_header_timeouts": header_timeouts, "listen_overflows": overflows,
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
