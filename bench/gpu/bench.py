#!/usr/bin/env python3
"""mlxrt generate vs mlx_lm (stream_generate, token prompts) on the same models in one run.

For each model (bench/gpu/models.py) and prompt length: process start to first token, time to
first token (prompt / prompt tok/s: from the start of the prefill), prefill tok/s, decode tok/s
(batch 1), MLX peak memory; median of --runs runs, the two programs alternating, after one
untimed run of each (MLX's JIT kernels are compiled on a machine's first run). Then the decode
roofline ratio: (weight bytes read per token + KV bytes) x decode tok/s / copy bandwidth measured
in this run (bench/gpu/bandwidth.py). Writes results.json and table.txt to --out; prints the table.

Usage: bench.py --bin build-gpu/mlxrt --out DIR [--shapes qwen3-0.6b qwen3-8b] [--quants bf16 q4]
                [--prompts 512 4096] [--gen 256] [--runs 3] [--tokenizer DIR] [--work DIR]
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import models

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

FOOTER = {
    "prompt": re.compile(r"Prompt: (\d+) tokens, ([\d.]+) tokens-per-sec"),
    "gen": re.compile(r"Generation: (\d+) tokens, ([\d.]+) tokens-per-sec"),
    "peak": re.compile(r"Peak memory: ([\d.]+) GB"),
}


def timed_run(cmd, log):
    """Runs a generate command; returns its footer's figures and the seconds from spawn to the
    first generated token on stdout."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    out, first = b"", None
    while True:
        chunk = proc.stdout.read(1)
        if not chunk:
            break
        out += chunk
        if first is None and out.count(b"==========\n") == 1 and not out.endswith(b"==========\n"):
            first = time.perf_counter() - start
    err = proc.stderr.read()
    rc = proc.wait()
    text = out.decode(errors="replace")
    log.write(f"$ {' '.join(cmd[:3])} ... (rc {rc})\n{text[-600:]}\n{err.decode(errors='replace')[-2000:]}\n")
    log.flush()
    if rc != 0:
        raise RuntimeError(f"{cmd[0]} {cmd[1]} failed ({rc}): {err.decode(errors='replace')[-1000:]}")
    p, g, m = (FOOTER[k].search(text) for k in ("prompt", "gen", "peak"))
    body = text.split("==========\n")[1]
    prompt_tokens, prompt_tps = int(p.group(1)), float(p.group(2))
    return {"start_to_first_token_s": first, "ttft_s": prompt_tokens / prompt_tps, "prompt_tokens": prompt_tokens,
            "prompt_tps": prompt_tps, "gen_tokens": int(g.group(1)), "gen_tps": float(g.group(2)),
            "peak_gb": float(m.group(1)), "text_head": body[:300]}


def prompt_ids(n, vocab, seed):
    rng = random.Random(seed)
    return [rng.randrange(1000, min(vocab, 150000)) for _ in range(n)]  # ordinary tokens, no specials


def bandwidth(python, gib, log):
    proc = subprocess.run([str(python), str(HERE / "bandwidth.py"), "--gib", str(gib)], capture_output=True, text=True)
    log.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError("bandwidth.py failed: " + proc.stderr[-1000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


METRICS = (("start_to_first_token_s", "start -> 1st token (s)", "{:.2f}"), ("ttft_s", "TTFT (ms)", "ms"),
           ("prompt_tps", "prefill tok/s", "{:.0f}"), ("gen_tps", "decode tok/s", "{:.1f}"),
           ("peak_gb", "peak mem (GB)", "{:.2f}"))


def fmt(value, style):
    return f"{value * 1e3:.1f}" if style == "ms" else style.format(value)


def table(rows, bw, rooflines):
    lines = [f"copy bandwidth (MLX, read+write): {bw['mlx_copy_GBps']:.0f} GB/s"
             + (f"; PyTorch copy: {bw['torch_copy_GBps']:.0f} GB/s" if bw.get("torch_copy_GBps") else ""),
             f"{'model':<16} {'prompt':>6} {'metric':<24} {'mlxrt':>10} {'mlx-lm':>10} {'ratio':>7}"]
    for r in rows:
        for key, label, style in METRICS:
            if r["prompt"] != min(x["prompt"] for x in rows if x["model"] == r["model"]) and key == "gen_tps":
                continue  # decode is reported at the shortest prompt
            a, b = r["mlxrt"][key], r["mlx-lm"][key]
            ratio = a / b if b else float("nan")
            lines.append(f"{r['model']:<16} {r['prompt']:>6} {label:<24} {fmt(a, style):>10} {fmt(b, style):>10}"
                         f" {ratio:>6.2f}x")
    lines.append(f"{'model':<16} {'decode roofline: bytes/token (GB)':<36} {'mlxrt':>8} {'mlx-lm':>8}")
    for model, rf in rooflines.items():
        lines.append(f"{model:<16} {rf['bytes_per_token'] / 1e9:>10.3f} (W {rf['weight_bytes'] / 1e9:.3f} + KV "
                     f"{rf['kv_bytes'] / 1e9:.4f}) {rf['mlxrt']:>12.1%} {rf['mlx-lm']:>8.1%}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--shapes", nargs="+", default=["qwen3-0.6b", "qwen3-8b"])
    ap.add_argument("--quants", nargs="+", default=list(models.QUANTS))
    ap.add_argument("--prompts", nargs="+", type=int, default=[512, 4096])
    ap.add_argument("--gen", type=int, default=256, help="decode tokens at the shortest prompt")
    ap.add_argument("--gen-long", type=int, default=16, help="tokens generated after the longer prompts")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bw-gib", type=float, default=4.0, help="size of the copy-bandwidth array")
    ap.add_argument("--tokenizer", type=Path, default=ROOT.parent / "shared" / "data" / "tokenizers" / "qwen3")
    ap.add_argument("--work", type=Path, default=ROOT / "build-gpu" / "bench-models")
    args = ap.parse_args()
    python = Path(sys.executable)
    args.out.mkdir(parents=True, exist_ok=True)
    log = open(args.out / "bench-runs.log", "a")
    bw = bandwidth(python, args.bw_gib, log)
    print(f"bandwidth: {json.dumps(bw)}", file=sys.stderr)
    rows, rooflines, results = [], {}, {"bandwidth": bw, "runs": []}
    for shape in args.shapes:
        for quant in args.quants:
            t = time.perf_counter()
            model = models.ensure_model(python, args.work, shape, quant, args.tokenizer)
            print(f"{model.name}: ready in {time.perf_counter() - t:.1f} s", file=sys.stderr)
            vocab = models.SHAPES[shape]["vocab_size"]
            for prompt in args.prompts:
                gen = args.gen if prompt == min(args.prompts) else args.gen_long
                ids = ",".join(map(str, prompt_ids(prompt, vocab, seed=prompt)))
                ours = [args.bin, "generate", "--model", str(model), "--prompt-tokens", ids, "--max-tokens", str(gen)]
                theirs = [str(python), str(HERE / "mlx_lm_tokens.py"), "--model", str(model), "--prompt-tokens", ids,
                          "--max-tokens", str(gen)]
                runs = {"mlxrt": [], "mlx-lm": []}
                try:
                    if prompt == min(args.prompts):
                        # Untimed: the first run on a machine compiles MLX's JIT kernels (seconds to
                        # tens of seconds, cached on disk after): kept out of both programs' figures.
                        for cmd in (ours, theirs):
                            timed_run(cmd[:-1] + ["2"], log)
                    for _ in range(args.runs):
                        runs["mlxrt"].append(timed_run(ours, log))
                        runs["mlx-lm"].append(timed_run(theirs, log))
                except RuntimeError as e:  # reported; the other models still run
                    print(f"{model.name} prompt {prompt}: {e}", file=sys.stderr)
                    results["runs"].append({"model": model.name, "prompt": prompt, "error": str(e)[:1000]})
                    continue
                same = runs["mlxrt"][0]["text_head"] == runs["mlx-lm"][0]["text_head"]
                med = {k: {m: statistics.median(r[m] for r in v) for m in v[0] if m != "text_head"}
                       for k, v in runs.items()}
                row = {"model": model.name, "prompt": prompt, "same_text": same, **med}
                rows.append(row)
                results["runs"].append({**row, "all": runs})
                print(f"{model.name} prompt {prompt}: mlxrt {med['mlxrt']['gen_tps']:.1f} tok/s, "
                      f"mlx-lm {med['mlx-lm']['gen_tps']:.1f} tok/s, same text: {same}", file=sys.stderr)
                if prompt == min(args.prompts):
                    context = prompt + gen / 2
                    w, kv = models.decode_bytes_per_token(model, context)
                    rooflines[model.name] = {
                        "weight_bytes": w, "kv_bytes": kv, "bytes_per_token": w + kv, "context": context,
                        **{k: (w + kv) * med[k]["gen_tps"] / (bw["mlx_copy_GBps"] * 1e9) for k in ("mlxrt", "mlx-lm")}}
            (args.out / "results.json").write_text(json.dumps({**results, "rooflines": rooflines}, indent=1))
    text = table(rows, bw, rooflines)
    (args.out / "table.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
