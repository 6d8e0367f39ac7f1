#!/usr/bin/env python3
"""Time to first token at prompt lengths a process has not run before (issue 14), mlxrt beside
mlx-lm in one run, on one model.

Both sides get the same token ids: each prompt is one single-token word repeated (" a a a ...",
then " b b b ..."), a new word for every request, so no prompt shares a prefix with an earlier one
(the server's prompt cache finds nothing to reuse). Each length runs twice in a row: "new" (first
time in the process) and "again" (same length, other word). A 300-token prompt first takes the
process's one-time costs (kernel modules, library handles) out of the figures.

- mlx-lm: one process, stream_generate(max_tokens=1) on the token ids, wall time to the first
  response (prefill + first token), as mlx_lm.generate computes its prompt figure.
- mlxrt: `mlxrt server` on the same model, POST /v1/completions with max_tokens 1 and a seed (a
  seeded request is served alone, the one-sequence path), wall time of the request; with
  --unseeded, without a seed (the batched path, a batch of one, as a default client's request
  is served). Configurations
  (one server each): `before` (MLXRT_PAD_PREFILL_ATTENTION=0: unpadded attention, no warm-up, what
  mlx-lm does), `after` (the default padded attention and `--warm-up`; the warm-up's own time is
  read from the server's log and reported apart).

`--stream`: the time a streaming client waits for its first token instead (mlxrt: the first SSE
event with a choice; mlx-lm: stream_generate's first response), what a chat client sees.

`--config 'LABEL=NAME=VALUE ARGS'` (repeatable) adds an `after` server of the same build with those
environment variables and server arguments (e.g. `--fidelity l3`).

`--compare-bin LABEL=BIN` (repeatable) adds an `after` server of another build, labelled `after
LABEL`, for a before/after of a change in the same run.

Usage: ttft_bench.py --bin BIN --model DIR [--lengths 512 500 520 777 1000 1500 64] [--unseeded] [--stream] [--out DIR]
                     [--compare-bin LABEL=BIN] [--config 'LABEL=[NAME=VALUE ...] [ARGS ...]'] [--skip-before]
"""
import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

WORDS = [" " + c for c in "abcdefghijklmnopqrstuvwxyz"]

MLX_LM = r"""
import json, sys, time
import mlx.core as mx
from mlx_lm import load, stream_generate
model, tok = load(sys.argv[1])
first_only = sys.argv[3] == "stream"
out = []
for ids in json.loads(sys.argv[2]):
    t0 = time.perf_counter()
    t = None
    for r in stream_generate(model, tok, ids, max_tokens=1):
        t = t or time.perf_counter()
    out.append((t if first_only else time.perf_counter()) - t0)
    mx.clear_cache()
print("RESULT " + json.dumps(out))
"""


def plan(lengths):
    """(label, length) per request: the one-time 300, then each length new and again."""
    seq = [("first", 300)]
    for n in lengths:
        seq += [("new", n), ("again", n)]
    return seq


def prompts(seq):
    return [WORDS[i % len(WORDS)] * n for i, (_, n) in enumerate(seq)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body, timeout=600):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def first_event_time(port, body, timeout=600):
    """Seconds from sending a streaming request to its first event with a choice; reads the rest."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps({**body, "stream": True}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    first, buf = None, b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        if first is None and b'"choices"' in buf:
            first = time.perf_counter() - t0
    conn.close()
    if first is None:
        raise RuntimeError(f"no token event in the stream: {buf[-300:]!r}")
    return first


def mlxrt_side(binary, model, texts, flags, env, log_path, seeded=True, stream=False):
    port = free_port()
    log = open(log_path, "w")
    t_start = time.perf_counter()
    proc = subprocess.Popen([binary, "server", "--model", str(model), "--port", str(port), *flags],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env})
    try:
        deadline = time.time() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited {proc.returncode}: {Path(log_path).read_text()[-800:]}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
                break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError("server did not start")
                time.sleep(0.2)
        # /health answers before the queued warm-up has run: a one-token request waits behind it.
        extra = {"seed": 0} if seeded else {}
        post(port, {"prompt": " z", "max_tokens": 1, "temperature": 0, **extra})
        ready_s = time.perf_counter() - t_start
        times, counts = [], []
        for text in texts:
            body = {"prompt": text, "max_tokens": 1, "temperature": 0, **extra}
            if stream:
                times.append(first_event_time(port, body))
                counts.append(None)
                continue
            t0 = time.perf_counter()
            r = post(port, body)
            times.append(time.perf_counter() - t0)
            counts.append(r["usage"]["prompt_tokens"])
        return times, counts, ready_s
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 500, 520, 777, 1000, 1500, 64])
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--skip-mlx-lm", action="store_true")
    ap.add_argument("--unseeded", action="store_true", help="requests without a seed: the server's batched path")
    ap.add_argument("--compare-bin", action="append", default=[], metavar="LABEL=BIN",
                    help="also run the `after` configuration with this binary, labelled `after LABEL`")
    ap.add_argument("--config", action="append", default=[], metavar="'LABEL=[NAME=VALUE ...] [SERVER ARGS ...]'",
                    help="also run an `after` server (--warm-up) with these environment variables and arguments, "
                         "labelled `after LABEL`: e.g. 'l3 dense=MLXRT_CUDA_L3_PREFILL_ROWS=64 --fidelity l3'")
    ap.add_argument("--skip-before", action="store_true", help="leave out the `before` configuration")
    ap.add_argument("--stream", action="store_true", help="time to the first streamed token (not to the whole response)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    seq = plan(args.lengths)
    texts = prompts(seq)
    name = args.model.name
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    assert [len(i) for i in ids] == [n for _, n in seq], "a word is not one token"

    results = {}
    configs = [] if args.skip_before else [("before", args.bin, [], {"MLXRT_PAD_PREFILL_ATTENTION": "0"})]
    configs.append(("after", args.bin, ["--warm-up"], {}))
    for spec in args.compare_bin:
        other, _, binary = spec.partition("=")
        if not other or not binary:
            ap.error(f"--compare-bin wants LABEL=BIN, got {spec!r}")
        configs.append((f"after {other}", binary, ["--warm-up"], {}))
    for spec in args.config:
        label, _, rest = spec.partition("=")
        if not label:
            ap.error(f"--config wants 'LABEL=[NAME=VALUE ...] [ARGS ...]', got {spec!r}")
        words = rest.split()
        env = dict(w.split("=", 1) for w in words if re.match(r"[A-Z_][A-Z0-9_]*=", w))
        flags = [w for w in words if not re.match(r"[A-Z_][A-Z0-9_]*=", w)]
        configs.append((f"after {label}", args.bin, ["--warm-up", *flags], env))
    for label, binary, flags, env in configs:
        log_path = args.out / f"server_{name}_{label.replace(' ', '_')}{'_unseeded' if args.unseeded else ''}.log"
        times, counts, ready = mlxrt_side(binary, args.model, texts, flags, env, log_path, not args.unseeded, args.stream)
        assert args.stream or counts == [n for _, n in seq], counts
        warm = [line.strip() for line in log_path.read_text().splitlines() if "warm-up:" in line]
        results["mlxrt " + label] = {"times": times, "ready_s": ready, "warm_up": warm}
        print(f"mlxrt {label}: ready after {ready:.1f} s; {warm[-1] if warm else 'no warm-up'}; ms: "
              + " ".join(f"{n}:{t * 1e3:.1f}" for (_, n), t in zip(seq, times)), flush=True)
    if not args.skip_mlx_lm:
        proc = subprocess.run([sys.executable, "-c", MLX_LM, str(args.model), json.dumps(ids),
                               "stream" if args.stream else "whole"],
                              capture_output=True, text=True)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line:
            results["mlx-lm"] = {"times": json.loads(line[7:])}
        else:
            print("mlx-lm failed: " + proc.stderr[-1500:])

    cols = list(results)
    kind = "unseeded requests (batched path)" if args.unseeded else "seeded requests (served alone)"
    if args.stream:
        kind += "; time to the first streamed token"
    lines = [f"{name}: time to first token, ms (wall; 'new' = first prompt of that length in the process; mlxrt: {kind})",
             f"{'length':>6} " + " ".join(f"{c + ' new':>16} {c + ' again':>18}" for c in cols)
             + "  " + " ".join(f"{c + ' new/again':>20}" for c in cols)]
    for i, (label, n) in enumerate(seq):
        if label != "new":
            continue
        row = [(results[c]["times"][i] * 1e3, results[c]["times"][i + 1] * 1e3) for c in cols]
        lines.append(f"{n:>6} " + " ".join(f"{a:>16.1f} {b:>18.1f}" for a, b in row) + "  "
                     + " ".join(f"{a / b:>19.2f}x" for a, b in row))
    news = {c: [results[c]["times"][i] * 1e3 for i, (l, _) in enumerate(seq) if l == "new"] for c in cols}
    lines.append("median new: " + ", ".join(f"{c} {statistics.median(v):.1f} ms" for c, v in news.items()))
    if "mlx-lm" in results:
        for c in cols:
            if c != "mlx-lm":
                r = [a / b for a, b in zip(news[c], news["mlx-lm"])]
                lines.append(f"{c} / mlx-lm at new lengths: median {statistics.median(r):.2f}x")
    table = "\n".join(lines)
    print(table)
    suffix = ("_unseeded" if args.unseeded else "") + ("_stream" if args.stream else "")
    (args.out / f"ttft_{name}{suffix}.txt").write_text(table + "\n")
    (args.out / f"ttft_{name}{suffix}.json").write_text(json.dumps({"plan": seq, "results": results}, indent=1))


if __name__ == "__main__":
    main()
