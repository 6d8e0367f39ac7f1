#!/usr/bin/env python3
"""Continuous batching throughput: mlxrt server vs mlx_lm.server on the same model, in one run.
For each client count (default 8 and 32), that many streaming clients send a completion at once;
reported per program: aggregate generated tok/s (all tokens over the wall time of the round) and
time to first token p50 / p99 over the clients, and the clients whose connection failed (errors;
their tokens do not count). Ratios are mlxrt / mlx_lm (higher is better for
tok/s, lower for TTFT). Each program gets a warm-up request first, then its solo TTFT (one client)
and, per count, a short unmeasured round at that count and --runs measured rounds: the median of
the aggregate tok/s and the TTFTs of all rounds pooled; p99/solo is TTFT p99 over the solo TTFT.
Every request's prompt is one no earlier request began with (a tag in front of the words), so none
finds its prefix in a server's prompt cache: the solo TTFT is the same work as a request under load
(its prompt's prefill and first token). ttft_solo_cached is one prompt sent again and again, each
after the first a prompt-cache hit (one token to process): what a repeated request waits.
Those rounds are bursts (every client's request at once: the last first token waits for every
prompt's prefill). --steady N adds a round per count where the clients arrive one by one over a
burst round's wall time and each sends N requests back to back, so requests join a running batch
as they would under a steady load; its TTFTs (each client's first left out) give steady p99/solo.
--variant LABEL=SPEC (repeatable) adds another mlxrt server to the same run, with SPEC's
environment (leading NAME=VALUE words) and options (the rest) on top of --mlxrt-args: settings of
mlxrt side by side, each with its own column and ratio to mlx_lm.

The model defaults to the server tests' tiny scripted qwen3 (real Qwen3 tokenizer); --model DIR
for another model directory.

Usage: bench/batch_bench.py [--model DIR] [--clients 8 32] [--gen-tokens 64] [--prompt-words 60] [--runs 2] [--steady N]
                            [--temperature T] [--top-p P] [--top-k K]
                            [--mlxrt-args "--log-level DEBUG"] [--mlxrt-env NAME=VALUE] [--log-dir DIR]
                            [--variant 'LABEL=[NAME=VALUE ...] [OPTIONS]' ...]
"""
import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from server_bench import BIN, PY, Server, free_port, post, tiny_server_model


def stream_one(port, prompt, n, out, i, sampling):
    try:
        stream_timed(port, prompt, n, out, i, sampling)
    except OSError as e:  # counted as an error of the round
        out[i] = e


def stream_timed(port, prompt, n, out, i, sampling):
    body = {"prompt": prompt, "max_tokens": n, "stream": True, "logit_bias": {"151645": -100}, **sampling}
    t0 = time.perf_counter()
    conn = post(port, body)
    resp = conn.getresponse()
    first = None
    tokens = 0
    buf = b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if event.startswith(b"data: {"):
                e = json.loads(event[6:])
                if e.get("choices") and e["choices"][0].get("text"):
                    first = first or time.perf_counter()
                if e.get("choices"):
                    tokens += 1
    conn.close()
    # Each event carries one token; the last one may be only the finish reason.
    out[i] = ((first or time.perf_counter()) - t0, tokens)


def run_together(threads):
    """Starts the threads, waits for all of them; returns the wall time."""
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def round_of(port, prompt, n, clients, sampling, tag):
    """`clients` requests at once, client i's prompt `{tag}{i}: {prompt}` (a tag no other round uses
    keeps them out of the servers' prompt caches)."""
    out = {}
    wall = run_together([threading.Thread(target=stream_one, args=(port, f"{tag}{i}: {prompt}", n, out, i, sampling))
                         for i in range(clients)])
    ok = [v for v in out.values() if not isinstance(v, OSError)]
    return sum(tok for _, tok in ok) / wall, [ttft for ttft, _ in ok], clients - len(ok)


def steady_round(port, prompt, n, clients, sampling, per_client, spread):
    """Clients that arrive one by one over `spread` seconds (client i at i * spread / clients), each
    sending `per_client` requests back to back: a server under a steady load of `clients` streams,
    where requests start and end at different steps. Returns the aggregate tok/s over the round's
    wall time, the TTFTs of every request after each client's first (the load ramps up during the
    first ones), and the failed connections."""
    results = {}

    def client(i):
        time.sleep(i * spread / clients)
        for r in range(per_client):
            out = {}
            stream_one(port, f"s{clients}.{i}.{r}: {prompt}", n, out, 0, sampling)
            results[(i, r)] = out[0]

    wall = run_together([threading.Thread(target=client, args=(i,)) for i in range(clients)])
    ok = {k: v for k, v in results.items() if not isinstance(v, OSError)}
    return (sum(tok for _, tok in ok.values()) / wall, [ttft for (i, r), (ttft, _) in ok.items() if r > 0],
            len(results) - len(ok))


def pct(xs, p):
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[k]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--clients", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--prompt-words", type=int, default=60)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--temperature", type=float,
                    help="each request's temperature (default: none sent, so greedy); a sampled request draws "
                         "each token from the distribution, a cost greedy requests do not pay")
    ap.add_argument("--top-p", type=float, help="each request's top_p (with --temperature)")
    ap.add_argument("--top-k", type=int, help="each request's top_k (with --temperature)")
    ap.add_argument("--mlxrt-args", action="append", default=[],
                    help="more options for `mlxrt server` (e.g. --log-level DEBUG); may be repeated")
    ap.add_argument("--mlxrt-env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for `mlxrt server` alone (e.g. MLX_USE_CUDA_GRAPHS=0); may be repeated")
    ap.add_argument("--server-args", default="",
                    help="options for both servers (flags they share, e.g. --prompt-concurrency 32)")
    ap.add_argument("--steady", type=int, default=0, metavar="N",
                    help="after the rounds at each client count, a steady round: the clients arrive one by one "
                         "over one round's wall time, each sending N requests back to back (TTFTs of all but "
                         "each client's first are pooled: steady_ttft_p50/p99, steady_tok_s)")
    ap.add_argument("--no-mlx-lm", action="store_true",
                    help="leave mlx_lm.server out (mlxrt's settings alone, e.g. to read their logs); no ratios then")
    ap.add_argument("--log-dir", help="keep both servers' logs here (default: a temporary folder, removed)")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=SPEC",
                    help="another mlxrt server: SPEC's leading NAME=VALUE words are its environment, the rest "
                         "options added to --mlxrt-args (e.g. 'mlx-order=--batch-order mlx-lm'); may be repeated")
    args = ap.parse_args()
    if args.steady == 1:
        ap.error("--steady N: N must be at least 2 (each client's first request is left out)")

    work = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="batch-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    model = Path(args.model) if args.model else tiny_server_model()
    prompt = " ".join(["the quick brown fox jumps over the lazy dog"] * (args.prompt_words // 9 + 1))
    def mlxrt(env, extra):
        return [*(["env", *env] if env else []), BIN, "server", "--model", str(model), *args.server_args.split(),
                *" ".join(args.mlxrt_args).split(), *extra]

    programs = {"mlx_lm": [PY, "-m", "mlx_lm", "server", "--model", str(model), *args.server_args.split()],
                "mlxrt": mlxrt(args.mlxrt_env, [])}
    if args.no_mlx_lm:
        del programs["mlx_lm"]
    for v in args.variant:
        label, sep, spec = v.partition("=")
        if not sep or not label or label in programs:
            ap.error(f"--variant {v!r}: expected LABEL=SPEC with a new label")
        words = spec.split()
        env = []
        while words and "=" in words[0] and not words[0].startswith("-"):
            env.append(words.pop(0))
        programs[label] = mlxrt(args.mlxrt_env + env, words)
    sampling = {k: v for k, v in (("temperature", args.temperature), ("top_p", args.top_p), ("top_k", args.top_k))
                if v is not None}
    results = {}
    for name, cmd in programs.items():
        port = free_port()
        srv = Server(name, cmd + ["--host", "127.0.0.1", "--port", str(port)], port, work)
        try:
            round_of(port, prompt, 8, 2, sampling, "warm")  # warm-up
            # Solo time to first token: the bound for TTFT p99 under load is twice this. Each
            # a new prompt, as every request under load is; then one prompt again and again.
            solo, cached = [], []
            for k in range(max(3, args.runs)):
                solo += round_of(port, prompt, 8, 1, sampling, f"solo{k}.")[1]
            for _ in range(max(3, args.runs) + 1):
                cached += round_of(port, prompt, 8, 1, sampling, "again")[1]
            results[(name, 1)] = {"ttft_p50": pct(solo, 50), "ttft_cached_p50": pct(cached[1:], 50)}
            for c in args.clients:
                # A short round at this client count first: a GPU backend compiles kernels for each
                # new batch shape, which would otherwise land in the first measured round's TTFTs.
                round_of(port, prompt, 8, c, sampling, f"w{c}.")
                tps, ttfts, errors = [], [], 0
                walls = []
                for run in range(args.runs):
                    t0 = time.perf_counter()
                    t, f, e = round_of(port, prompt, args.gen_tokens, c, sampling, f"r{c}.{run}.")
                    walls.append(time.perf_counter() - t0)
                    tps.append(t)
                    ttfts += f
                    errors += e
                results[(name, c)] = {"tok_s": statistics.median(tps), "ttft_p50": pct(ttfts, 50),
                                      "ttft_p99": pct(ttfts, 99), "errors": errors}
                if args.steady:
                    t, f, e = steady_round(port, prompt, args.gen_tokens, c, sampling, args.steady,
                                           statistics.median(walls))
                    results[(name, c)].update({"steady_tok_s": t, "steady_ttft_p50": pct(f, 50),
                                               "steady_ttft_p99": pct(f, 99), "steady_errors": e})
        finally:
            srv.stop()
    print(f"model: {model}  gen tokens: {args.gen_tokens}  prompt words: {args.prompt_words}  runs: {args.runs}"
          f"  sampling: {sampling or 'none sent (greedy)'}")
    ours = [n for n in programs if n != "mlx_lm"] if "mlx_lm" in programs else []
    widths = [max(12, len(n) + 2) for n in programs]
    ratio_widths = [max(14, len(n) + 10) for n in ours]
    print(f"{'clients':<9}{'metric':<16}" + "".join(f"{n:>{w}}" for n, w in zip(programs, widths))
          + "".join(f"{n + '/mlx_lm':>{w}}" for n, w in zip(ours, ratio_widths)))

    def row(c, k, values, ratios=True):
        line = f"{c:<9}{k:<16}" + "".join(f"{v:>{w}.3f}" for v, w in zip(values, widths))
        if ratios and "mlx_lm" in programs:
            a = values[0]
            line += "".join(f"{v / a:>{w}.2f}" if a else f"{'-':>{w}}" for v, w in zip(values[1:], ratio_widths))
        print(line)

    row(1, "ttft_solo", [results[(n, 1)]["ttft_p50"] for n in programs])
    row(1, "ttft_solo_cached", [results[(n, 1)]["ttft_cached_p50"] for n in programs])
    for c in args.clients:
        keys = ["tok_s", "ttft_p50", "ttft_p99", "errors"]
        if args.steady:
            keys += ["steady_tok_s", "steady_ttft_p50", "steady_ttft_p99", "steady_errors"]
        for k in keys:
            row(c, k, [results[(n, c)][k] for n in programs])
        # The latency bound: TTFT p99 under load over the same program's solo TTFT.
        row(c, "p99/solo", [results[(n, c)]["ttft_p99"] / results[(n, 1)]["ttft_p50"] for n in programs], False)
        if args.steady:
            row(c, "steady p99/solo",
                [results[(n, c)]["steady_ttft_p99"] / results[(n, 1)]["ttft_p50"] for n in programs], False)
    print(json.dumps({f"{n}@{c}": v for (n, c), v in results.items()}))
    if not args.log_dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
