#!/usr/bin/env python3
"""Mixed-adapter batches against taking turns: the same requests, spread over several adapters (and
the plain model), run as one `mlxrt batch-generate --adapters` batch, and as one batch per adapter
one after another (what a server that batches one adapter at a time does with them); also the
same batch with every row on one adapter (the cost of the selection itself). Generation time as
batch-generate reports it (the model load left out), medians over interleaved rounds.

Usage: bench/mixed_adapter_bench.py --model DIR --adapters NAME=DIR ... [--rows 8] [--gen 64] [--rounds 5]
"""
import argparse
import json
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECONDS = re.compile(r"tokens in ([\d.]+) s")


def run(binary, model, adapters, requests, work):
    path = work / "requests.json"
    path.write_text(json.dumps({"requests": requests}))
    proc = subprocess.run([binary, "batch-generate", "--model", model, "--requests", str(path), "--adapters", *adapters],
                          capture_output=True, text=True, check=True)
    return float(SECONDS.search(proc.stderr).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "build" / "mlxrt"))
    ap.add_argument("--model", required=True)
    ap.add_argument("--adapters", nargs="+", required=True, help="NAME=DIR ...")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    slots = [""] + [spec.split("=", 1)[0] for spec in a.adapters]
    # eos biased away: every row runs to --gen tokens in every arrangement.
    rows = [{"prompt_tokens": [1] + [10 + (31 * k + 7 * j) % 500 for j in range(16 + k)], "max_tokens": a.gen,
             "logits_processors": {"logit_bias": {"2": -1e9}}, "adapter": slots[k % len(slots)]}
            for k in range(a.rows)]
    times = {"mixed": [], "turns": [], "one adapter": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for _ in range(a.rounds):
            times["mixed"].append(run(a.bin, a.model, a.adapters, rows, work))
            times["turns"].append(sum(run(a.bin, a.model, a.adapters, [r for r in rows if r["adapter"] == s], work)
                                      for s in slots))
            times["one adapter"].append(run(a.bin, a.model, a.adapters, [{**r, "adapter": slots[1]} for r in rows], work))
    med = {k: statistics.median(v) for k, v in times.items()}
    tokens = a.rows * a.gen
    print(f"{a.rows} rows over {len(slots)} slots (plain + {len(slots) - 1} adapters), {a.gen} tokens each, "
          f"median of {a.rounds}")
    for k, v in med.items():
        print(f"{k:12s} {v:7.3f} s  {tokens / v:8.1f} tok/s")
    print(f"mixed vs turns: {med['turns'] / med['mixed']:.2f}x; mixed vs one adapter: {med['one adapter'] / med['mixed']:.2f}x")


if __name__ == "__main__":
    main()
