#!/usr/bin/env python3
"""Which attention shapes a server under load asks of cuDNN that its `--warm-up` did not build, on
any machine (issue 17: time to first token under load).

MLX's CUDA backend keeps one cuDNN graph per attention shape (queries, keys, mask, and the strides
of the KV buffer the keys are read from), and building one costs ~120 ms on an H200. This runs
bench/batch_bench.py (the servers side by side, 32 clients by default) with mlxrt's server under
MLXRT_PAD_PREFILL_ATTENTION=force (the padding the GPU gets, on this machine too) and
MLXRT_ATTENTION_SHAPES=1 (each attention call's shapes on stderr), then sorts the calls whose
shape cuDNN would build a graph for (prefill chunks: more than one query; decode steps only
without a mask array) into those first seen during the warm-up and those first seen after it:
each of the latter is a graph built while a request waits. The model must be bf16 or fp16 with
heads of at most 128 (as cuDNN's attention needs).

Usage: bench/attention_shape_survey.py [--model DIR] [--clients 32] [--gen-tokens 64]
                                       [--mlxrt-env NAME=VALUE ...] [--log-dir DIR]
"""
import argparse
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
LINE = re.compile(r"attention shapes: (.+?) q=\[([\d,]*)\] k=\[([\d,]*)\] mask=(\S+) buffer=(\S+)")


def cudnn_builds(kind, q, k, mask):
    """Whether MLX 0.32.4 would run this call through cuDNN (a graph per shape): a prefill chunk,
    or a one-query step without a mask array over at least 256 keys (use_cudnn_for_decoding)."""
    queries = int(q.split(",")[2])
    if queries > 1:
        return True
    return mask == "-" and int(k.split(",")[2]) >= 256


def survey(log_text):
    first_seen, calls_after = {}, Counter()
    phase = "before the warm-up ended"
    for line in log_text.splitlines():
        if "warm-up:" in line:
            phase = "after the warm-up"
            continue
        m = LINE.search(line)
        if not m:
            continue
        kind, q, k, mask, buffer = m.groups()
        if not cudnn_builds(kind, q, k, mask):
            continue
        key = (kind, q, k, mask, buffer)
        first_seen.setdefault(key, phase)
        if phase == "after the warm-up":
            calls_after[key] += 1
    return first_seen, calls_after


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--clients", default="32")
    ap.add_argument("--gen-tokens", default="64")
    ap.add_argument("--mlxrt-env", action="append", default=[], metavar="NAME=VALUE",
                    help="more environment for mlxrt's server (e.g. MLXRT_PAD_MASKED_CONTIGUOUS=0: "
                         "the keys as a prefix of the batched buffer, as before the contiguous copy)")
    ap.add_argument("--server-args", default="",
                    help="options for both servers (e.g. \"--prompt-concurrency 32\"), passed to batch_bench.py")
    ap.add_argument("--log-dir", help="keep the servers' logs here")
    args = ap.parse_args()
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="shape-survey-"))
    cmd = [sys.executable, str(HERE / "batch_bench.py"), "--clients", args.clients, "--gen-tokens", args.gen_tokens,
           "--runs", "1", "--mlxrt-args=--warm-up", "--log-dir", str(log_dir),
           "--mlxrt-env", "MLXRT_PAD_PREFILL_ATTENTION=force", "--mlxrt-env", "MLXRT_ATTENTION_SHAPES=1"]
    for e in args.mlxrt_env:
        cmd += ["--mlxrt-env", e]
    if args.server_args:
        cmd += [f"--server-args={args.server_args}"]
    if args.model:
        cmd += ["--model", args.model]
    bench = subprocess.run(cmd, capture_output=True, text=True)
    if bench.returncode != 0:
        sys.exit(f"batch_bench.py failed ({bench.returncode}):\n{bench.stderr[-2000:]}")
    first_seen, calls_after = survey((log_dir / "mlxrt.log").read_text())
    if not first_seen:
        sys.exit("no attention call that cuDNN would take was logged (a float32 model, or heads wider than 128?)")
    phases = Counter(first_seen.values())
    new = [key for key, phase in first_seen.items() if phase == "after the warm-up"]
    print(f"attention shapes cuDNN would build a graph for: {len(first_seen)} "
          f"({phases['before the warm-up ended']} first seen before the warm-up ended, {len(new)} after it)")
    for kind, q, k, mask, buffer in new:
        print(f"  new after the warm-up: {kind:<26} q=[{q}] k=[{k}] mask={mask} buffer={buffer} "
              f"({calls_after[(kind, q, k, mask, buffer)]} calls)")
    print(f"logs: {log_dir}")


if __name__ == "__main__":
    main()
