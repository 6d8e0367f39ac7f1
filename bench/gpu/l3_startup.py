#!/usr/bin/env python3
"""What a fresh process pays before its L3 kernels run: MLX compiling them (its prelude and all,
1.1-1.3 s a kernel, every process) against mlxrt compiling them itself into MLX's kernel cache
(MLXRT_CUDA_SELF_COMPILE=1: ~0.17 s a kernel, then none for later processes).

For each model (bench/gpu/models.py), `mlxrt generate` of a few tokens in a new process at l1, at l3,
and at l3 self-compiled, in turn, ROUNDS times: the whole process's wall time (load, prefill, the
first decode steps with their kernel compiles), and whether l3's two routes wrote the same text
(the same machine code launched two ways: they should). Each route runs twice on one kernel folder
(MLX_PTX_CACHE_DIR, fresh for the route): "cold" with it empty, "warm" with what the first run
left there (MLX's own JIT kernels, and the self-compiled kernels' entries; MLX writes no custom
kernel there, so plain l3's are compiled again).

Usage: l3_startup.py --bin MLXRT --work MODELS_DIR --tokenizer DIR --out DIR [--models ...] [--rounds 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import models

ROUTES = {
    "l1": ([], {}),
    "l3": (["--fidelity", "l3"], {}),
    "l3-self": (["--fidelity", "l3"], {"MLXRT_CUDA_SELF_COMPILE": "1"}),
}


def run(cmd, env_extra, ptx):
    env = {**os.environ, **env_extra, "MLX_PTX_CACHE_DIR": ptx}
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout)[-400:]}
    # The generated text: between the two "==========" lines (the figures after them differ per run).
    parts = p.stdout.split("==========\n")
    return {"wall_s": wall, "text": parts[1] if len(parts) > 2 else p.stdout, "warnings": [l for l in p.stderr.splitlines() if "SELF_COMPILE" in l]}


def main():
    ap = argparse.ArgumentParser()
    models.add_run_args(ap, ["qwen3-0.6b-q4", "qwen3-8b-q4"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=16)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models:
        shape, quant = name.rsplit("-", 1)
        model = str(models.ensure_model(Path(sys.executable), args.work, shape, quant, args.tokenizer))
        base = [args.bin, "generate", "--model", model, "--prompt", "Write a story about a lighthouse keeper.",
                "--max-tokens", str(args.tokens), "--temp", "0"]
        runs = {}
        for _ in range(args.rounds):
            for route, (flags, env) in ROUTES.items():
                with tempfile.TemporaryDirectory() as ptx:
                    runs.setdefault(route + " cold", []).append(run(base + flags, env, ptx))
                    runs.setdefault(route + " warm", []).append(run(base + flags, env, ptx))
        for route, rs in runs.items():
            row = {"model": name, "route": route}
            if any("error" in r for r in rs):
                row["error"] = next(r["error"] for r in rs if "error" in r)
            else:
                row.update(wall_s=statistics.median_low(r["wall_s"] for r in rs), all_wall_s=[r["wall_s"] for r in rs],
                           warnings=sorted({w for r in rs for w in r["warnings"]}))
            rows.append(row)
        texts = {route: {r.get("text") for r in rs} for route, rs in runs.items()}
        rows.append({"model": name, "route": "l3 == l3-self",
                     "same_text": texts["l3 cold"] | texts["l3 warm"] == texts["l3-self cold"] | texts["l3-self warm"]})
    (args.out / "l3_startup.json").write_text(json.dumps(rows, indent=1))
    lines = [f"a new process: generate {args.tokens} tokens (median of {args.rounds} rounds, wall s)"]
    for r in rows:
        if "same_text" in r:
            lines.append(f"{r['model']:<14} l3 and l3-self wrote the same text: {r['same_text']}")
        elif "error" in r:
            lines.append(f"{r['model']:<14} {r['route']:<13} error: {r['error'][-200:]!r}")
        else:
            lines.append(f"{r['model']:<14} {r['route']:<13} {r['wall_s']:7.2f}  "
                         + "/".join(f"{v:.2f}" for v in r["all_wall_s"]) + ("  " + "; ".join(r["warnings"]) if r["warnings"] else ""))
    text = "\n".join(lines)
    (args.out / "l3_startup.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
