#!/usr/bin/env python3
"""Whether L3's dense prefill (MLXRT_CUDA_L3_PREFILL_ROWS: a prompt's 4-bit products as a
dequantized matrix times MLX's dense matmul) gives L1's bytes on a whole model, and what it costs.

For each model (bench/gpu/models.py) and prompt length, `mlxrt generate --logprobs-file` (the
first generated token's log-probabilities come from the prefill; greedy, a few tokens) under four
settings: l1, l1 with the variable (the dense path is L3's, so only MLX's own run-to-run variation
can change a byte: its cuDNN attention, docs/exact-mode.md), l3 with it set to 0 (MLX's kernel)
and l3 with it. Each run's prompt figure (prompt tok/s) and the SHA-256 of its log-probabilities
file and text are printed, then which settings gave l1's bytes and whether "l3 dense" gave "l3"'s
(the one comparison of the prefill alone: the later rows are L3's decoding in both). Then `mlxrt
fidelity` of l3 with the variable against l1 (its prefill mode takes the dense path at
--prefill-chunk 512).

Usage: prefill_bytes.py --bin MLXRT --work MODELS_DIR --tokenizer DIR --out DIR
       [--models qwen3-8b-q4 qwen3-0.6b-q4] [--lengths 512 777] [--rows 128] [--fidelity-tokens 512]
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import models
from bench import prompt_ids


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser()
    models.add_run_args(ap, ["qwen3-8b-q4", "qwen3-0.6b-q4"])
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 777])
    ap.add_argument("--rows", default="128", help="MLXRT_CUDA_L3_PREFILL_ROWS for the dense settings")
    ap.add_argument("--gen", type=int, default=4)
    ap.add_argument("--fidelity-tokens", type=int, default=512)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    python = Path(sys.executable)
    log = open(args.out / "prefill_bytes.log", "a")
    dense = {"MLXRT_CUDA_L3_PREFILL_ROWS": args.rows}
    # l3 by default takes the dense path too (from 128 rows): "l3" here turns it off.
    off = {"MLXRT_CUDA_L3_PREFILL_ROWS": "0"}
    settings = {"l1": ([], {}), "l1 dense": ([], dense), "l3": (["--fidelity", "l3"], off),
                "l3 dense": (["--fidelity", "l3"], dense)}
    summary = []
    for name in args.models:
        shape, quant = name.rsplit("-", 1)
        model = models.ensure_model(python, args.work, shape, quant, args.tokenizer)
        for n in args.lengths:
            ids = ",".join(map(str, prompt_ids(n, models.SHAPES[shape]["vocab_size"], seed=n)))
            digests = {}
            for label, (flags, env) in settings.items():
                lp = args.out / f"logprobs_{name}_{n}_{label.replace(' ', '_')}.safetensors"
                cmd = [args.bin, "generate", "--model", str(model), "--prompt-tokens", ids, "--max-tokens",
                       str(args.gen), "--logprobs-file", str(lp), *flags]
                t = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
                wall = time.perf_counter() - t
                log.write(f"$ {' '.join(env_words(env))} {' '.join(cmd[:4])} ... {' '.join(flags)} "
                          f"(rc {proc.returncode}, {wall:.1f} s)\n{proc.stdout}\n{proc.stderr[-2000:]}\n")
                log.flush()
                if proc.returncode != 0:
                    print(f"{name} {n} {label}: failed ({proc.returncode}): {proc.stderr[-400:]}", flush=True)
                    continue
                m = re.search(r"Prompt: \d+ tokens, ([0-9.]+) tokens-per-sec", proc.stdout)
                text = proc.stdout.split("==========")[1] if proc.stdout.count("==========") >= 2 else ""
                digests[label] = (sha(lp), hashlib.sha256(text.encode()).hexdigest()[:16])
                print(f"{name:<14} {n:>5} {label:<9} prompt {m.group(1) if m else '?':>9} tok/s  "
                      f"logprobs {digests[label][0]}  text {digests[label][1]}  wall {wall:.1f} s", flush=True)
            same = {label: d == digests.get("l1") for label, d in digests.items()}
            if "l3" in digests and "l3 dense" in digests:
                print(f"{name} {n}: l3 dense gave l3's bytes: {'yes' if digests['l3'] == digests['l3 dense'] else 'NO'}",
                      flush=True)
            summary.append({"model": name, "length": n, "same_as_l1": same})
            print(f"{name} {n}: same bytes as l1: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in same.items()),
                  flush=True)
        cmd = [args.bin, "fidelity", "--model", str(model), "--against", "l1", "--tokens", str(args.fidelity_tokens),
               "--json"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **dense})
        log.write(f"$ {' '.join(env_words(dense))} {' '.join(cmd)} (rc {proc.returncode})\n{proc.stdout}\n"
                  f"{proc.stderr[-2000:]}\n")
        if proc.returncode == 0:
            report = json.loads(proc.stdout[proc.stdout.index("{"):])
            summary.append({"model": name, "fidelity_dense": report})
            print(f"{name} fidelity, l3 dense vs l1: {json.dumps(report.get('modes', report))[:600]}", flush=True)
        else:
            print(f"{name} fidelity failed ({proc.returncode}): {proc.stderr[-400:]}", flush=True)
    (args.out / "prefill_bytes.json").write_text(json.dumps(summary, indent=1))


def env_words(env):
    return [f"{k}={v}" for k, v in env.items()]


if __name__ == "__main__":
    main()
