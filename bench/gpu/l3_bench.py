#!/usr/bin/env python3
"""Decode speed at --fidelity l1, at l3 and of mlx-lm, side by side in one run on the benchmark
models (bench/gpu/models.py), and the fidelity of l3 against l1 (`mlxrt fidelity --against l1`),
which every l3 figure carries. The three programs take turns within each round, on the same
prompt; the medians of the rounds are reported.

Usage: l3_bench.py --bin MLXRT --work MODELS_DIR --tokenizer DIR --out DIR
       [--models qwen3-0.6b-q4 qwen3-8b-q4] [--prompt 128] [--gen 256] [--runs 3] [--fidelity-tokens 1024]
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import models
from bench import prompt_ids, timed_run


def fidelity(binary, model, tokens, log):
    cmd = [binary, "fidelity", "--model", str(model), "--against", "l1", "--tokens", str(tokens), "--json"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log.write(f"$ {' '.join(cmd)} (rc {proc.returncode}, {time.perf_counter() - t:.0f} s)\n{proc.stdout}\n"
              f"{proc.stderr[-3000:]}\n")
    log.flush()
    if proc.returncode != 0:
        raise RuntimeError(f"mlxrt fidelity failed ({proc.returncode}): {proc.stderr[-800:]}")
    return json.loads(proc.stdout[proc.stdout.index("{"):])


def main():
    ap = argparse.ArgumentParser()
    models.add_run_args(ap, ["qwen3-0.6b-q4", "qwen3-8b-q4"])
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--fidelity-tokens", type=int, default=1024)
    args = ap.parse_args()
    python = Path(sys.executable)
    args.out.mkdir(parents=True, exist_ok=True)
    log = open(args.out / "l3_bench.log", "a")
    rows = []
    for name in args.models:
        shape, quant = name.rsplit("-", 1)
        model = models.ensure_model(python, args.work, shape, quant, args.tokenizer)
        ids = ",".join(map(str, prompt_ids(args.prompt, models.SHAPES[shape]["vocab_size"], seed=args.prompt)))
        base = [args.bin, "generate", "--model", str(model), "--prompt-tokens", ids, "--max-tokens", str(args.gen)]
        cmds = {"l1": base, "l3": base + ["--fidelity", "l3"],
                "mlx-lm": [str(python), str(Path(__file__).parent / "mlx_lm_tokens.py"), "--model", str(model),
                           "--prompt-tokens", ids, "--max-tokens", str(args.gen)]}
        row = {"model": name, "prompt": args.prompt, "gen": args.gen}
        try:
            for cmd in cmds.values():  # untimed: MLX's and our kernels compiled once (cached on disk)
                i = cmd.index("--max-tokens")
                timed_run(cmd[:i + 1] + ["2"] + cmd[i + 2:], log)
            runs = {k: [] for k in cmds}
            for _ in range(args.runs):
                for k, cmd in cmds.items():
                    runs[k].append(timed_run(cmd, log))
            for k, r in runs.items():
                row[k] = {"gen_tps": statistics.median(x["gen_tps"] for x in r), "all_gen_tps": [x["gen_tps"] for x in r],
                          "peak_gb": statistics.median(x["peak_gb"] for x in r), "text_head": r[0]["text_head"][:80]}
            row["l1_same_text_as_mlx_lm"] = runs["l1"][0]["text_head"] == runs["mlx-lm"][0]["text_head"]
            row["l3_same_text_as_l1"] = runs["l3"][0]["text_head"] == runs["l1"][0]["text_head"]
            row["fidelity"] = fidelity(args.bin, model, args.fidelity_tokens, log)
        except RuntimeError as e:  # reported; the other models still run
            row["error"] = str(e)[:1500]
            print(f"{name}: {e}", file=sys.stderr)
        rows.append(row)
        (args.out / "l3_bench.json").write_text(json.dumps(rows, indent=1))
    lines = [f"decode tok/s (prompt {args.prompt}, {args.gen} tokens, median of {args.runs}); fidelity of l3 against l1 "
             f"over {args.fidelity_tokens} tokens (decode mode / prefill mode)",
             f"{'model':<16} {'l1':>8} {'l3':>8} {'mlx-lm':>8} {'l3/l1':>6} {'l3/mlx-lm':>9}  "
             f"{'mean KL':>9} {'max KL':>9} {'agree':>7} | {'mean KL':>9} {'agree':>7}"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:<16} error: {r['error'][:200]}")
            continue
        a, b, c = (r[k]["gen_tps"] for k in ("l1", "l3", "mlx-lm"))
        f = r["fidelity"]
        modes = f.get("modes", f)
        d, p = modes.get("decode", {}), modes.get("prefill", {})
        lines.append(f"{r['model']:<16} {a:>8.1f} {b:>8.1f} {c:>8.1f} {b / a:>5.2f}x {b / c:>8.2f}x  "
                     f"{d.get('mean_kl', float('nan')):>9.2e} {d.get('max_kl', float('nan')):>9.2e} "
                     f"{d.get('agreement', float('nan')):>7.2%} | {p.get('mean_kl', float('nan')):>9.2e} "
                     f"{p.get('agreement', float('nan')):>7.2%}")
    lines.append("each run (tok/s, in the order run): " + "; ".join(
        f"{r['model']} " + ", ".join(f"{k} {'/'.join(f'{v:.1f}' for v in r[k]['all_gen_tps'])}" for k in ("l1", "l3", "mlx-lm"))
        for r in rows if "error" not in r))
    text = "\n".join(lines)
    (args.out / "l3_table.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
