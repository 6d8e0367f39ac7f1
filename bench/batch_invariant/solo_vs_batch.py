"""Rows of `mlxrt batch-generate` (default mode and --batch-invariant) against each request's solo
`mlxrt generate` run, on this machine's MLX device: per mode, how many rows have the solo tokens and
how many the solo logprobs (of the sampled tokens, exactly). Greedy requests of different prompt
lengths (up to 300 tokens) and budgets, --prefill-step-size 32, batch narrower than the request list
(rows join as others leave).

Run: python bench/batch_invariant/solo_vs_batch.py --bin build/mlxrt --model build/fixtures/qwen3_bf16
"""
import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import mlx.core as mx


def requests(n):
    return [{"prompt_tokens": [10 + (13 * i + 7 * j) % 480 for j in range(1 + (37 * i) % 300)],
             "max_tokens": 16 + (11 * i) % 40} for i in range(n)]


def solo(binary, model, r, step, tmp):
    out = tmp / "solo.safetensors"
    p = subprocess.run([binary, "generate", "--model", model, "--prompt-tokens", ",".join(map(str, r["prompt_tokens"])),
                        "-m", str(r["max_tokens"]), "--prefill-step-size", str(step), "--logprobs-file", str(out)],
                       capture_output=True, text=True, check=True)
    tokens = [int(t) for t in p.stdout.split("==========\n")[1].split()]
    rows = mx.load(str(out))["logprobs"].astype(mx.float32) if tokens else None
    return tokens, [rows[i, t].item() for i, t in enumerate(tokens)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/mlxrt")
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--step", type=int, default=32)
    ap.add_argument("--batch", type=int, default=4)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    reqs = requests(a.requests)
    (tmp / "r.json").write_text(json.dumps({"requests": reqs}))
    want = [solo(a.bin, a.model, r, a.step, tmp) for r in reqs]
    for mode in ([], ["--batch-invariant"]):
        p = subprocess.run([a.bin, "batch-generate", "--model", a.model, "--requests", str(tmp / "r.json"),
                            "--prefill-step-size", str(a.step), "--completion-batch-size", str(a.batch),
                            "--prefill-batch-size", str(a.batch), *mode], capture_output=True, text=True, check=True)
        rows = [json.loads(line) for line in p.stdout.splitlines()]
        tok = sum(r["tokens"] == w[0] for r, w in zip(rows, want))
        lp = sum(r["tokens"] == w[0] and r["logprobs"] == w[1] for r, w in zip(rows, want))
        first = [next((k for k, (x, y) in enumerate(zip(r["logprobs"], w[1])) if x != y), None)
                 for r, w in zip(rows, want)]
        print(f"{Path(a.model).name} {'--batch-invariant' if mode else 'default'}: {tok}/{len(reqs)} rows with the "
              f"solo tokens, {lp}/{len(reqs)} with the solo logprobs too; first differing logprob per row: {first}",
              flush=True)


if __name__ == "__main__":
    main()
