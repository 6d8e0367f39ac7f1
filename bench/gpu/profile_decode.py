#!/usr/bin/env python3
"""Where one decode step's GPU time goes, with Nsight Compute (ncu) timing every kernel.

Runs `mlxrt generate` twice under ncu with the same prompt, generating A and B tokens; the kernels
of the second run minus those of the first are B - A decode steps, with loading, prefill and the
first step cancelled out. Prints the top kernels by time per step and their share, the kernel
launches per step, and (with --step-ms, the step time measured without the profiler) the share
of the step the GPU spends outside kernels (launch gaps, host work). Writes the raw CSVs to --out.

Usage: profile_decode.py --bin MLXRT --model DIR --out DIR [--prompt 512] [--steps 2 6] [--step-ms X]
"""
import argparse
import collections
import csv
import io
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path


def kernels(csv_text):
    """{kernel name: (count, total ns)} from ncu's CSV."""
    start = csv_text.find('"ID"')
    if start < 0:
        raise RuntimeError("no CSV in ncu's output:\n" + csv_text[-2000:])
    out = collections.defaultdict(lambda: [0, 0.0])
    for row in csv.DictReader(io.StringIO(csv_text[start:])):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "ns")
        scale = {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}.get(unit, 1)
        entry = out[row["Kernel Name"]]
        entry[0] += 1
        entry[1] += value * scale
    return out


def profile(ncu, binary, model, ids, tokens, out_dir, timeout):
    log = out_dir / f"ncu-{tokens}.csv"
    cmd = [ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
           "--print-kernel-base", "function", "--log-file", str(log),
           binary, "generate", "--model", str(model), "--prompt-tokens", ids, "--max-tokens", str(tokens)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"ncu failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return kernels(log.read_text())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--steps", type=int, nargs=2, default=[2, 6])
    ap.add_argument("--step-ms", type=float, help="decode step time measured without the profiler")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--timeout", type=int, default=120)
    args = ap.parse_args()
    ncu = shutil.which("ncu")
    if not ncu:
        sys.exit("ncu not found")
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.prompt)
    ids = ",".join(str(rng.randrange(1000, 150000)) for _ in range(args.prompt))
    a, b = (profile(ncu, args.bin, args.model, ids, n, args.out, args.timeout) for n in args.steps)
    steps = args.steps[1] - args.steps[0]
    per_step = {}
    for name in set(a) | set(b):
        count = (b.get(name, [0, 0])[0] - a.get(name, [0, 0])[0]) / steps
        ns = (b.get(name, [0, 0])[1] - a.get(name, [0, 0])[1]) / steps
        if count > 0:
            per_step[name] = (count, ns)
    total = sum(ns for _, ns in per_step.values())
    launches = sum(c for c, _ in per_step.values())
    top = sorted(per_step.items(), key=lambda kv: -kv[1][1])[:args.top]
    report = {"model": args.model.name, "prompt": args.prompt, "steps": steps, "kernel_ms_per_step": total / 1e6,
              "launches_per_step": launches, "step_ms": args.step_ms,
              "top": [{"kernel": k, "per_step": c, "us": ns / 1e3, "share": ns / total} for k, (c, ns) in top]}
    if args.step_ms:
        report["outside_kernels_share"] = max(0.0, 1 - (total / 1e6) / args.step_ms)
    (args.out / f"profile-{args.model.name}.json").write_text(json.dumps(report, indent=1))
    print(f"decode step of {args.model.name} (prompt {args.prompt}): {total / 1e6:.3f} ms in {launches:.0f} kernels"
          + (f"; step {args.step_ms:.3f} ms without the profiler, {report['outside_kernels_share']:.0%} outside kernels"
             if args.step_ms else ""))
    for t in report["top"]:
        print(f"  {t['share']:6.1%} {t['us']:9.1f} us  x{t['per_step']:<5.1f} {t['kernel'][:110]}")


if __name__ == "__main__":
    main()
