#!/usr/bin/env python3
"""Where a decode step's time goes on the GPU, and what MLX's command-buffer settings change.

For each model (bench/gpu/models.py) and each MLX setting (environment variables of MLX's CUDA
backend that choose how kernels reach the GPU, never which kernels run: the bytes stay the same),
`mlxrt benchmark --step-timing` at --fidelity l1 and l3, and mlx_lm.benchmark, take turns. The
table gives prompt and decode tok/s and the decode step's split: building the lazy graph,
dispatching it (MLX encoding the kernels into CUDA graphs and launching them) and waiting for the
device. A step whose build + dispatch is close to its whole time is bound by the host, and a faster
kernel cannot show.

Usage: step_timing.py --bin MLXRT --work MODELS_DIR --tokenizer DIR --out DIR
       [--models qwen3-0.6b-q4 qwen3-8b-q4] [--settings default graphs-off ops-400]
       [--prompt 128] [--gen 256] [--trials 2] [--rounds 1] [--programs l1 l3 mlx-lm]
       [--compare-bin LABEL=BIN]   (repeatable: that build too, as programs "l1-LABEL" and, where l3 is
                                    among --programs, "l3-LABEL")
Each round runs every setting and program once, in turn; the table gives each row's median over the
rounds (and every round's tok/s).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import models

# name -> environment: how MLX's CUDA backend batches kernels into CUDA graphs (device.cpp there).
SETTINGS = {
    "default": {},
    "graphs-off": {"MLX_USE_CUDA_GRAPHS": "0"},  # each kernel launched on the stream
    "ops-400": {"MLX_MAX_OPS_PER_BUFFER": "400"},  # fewer, larger graphs (H100/H200 default 100)
    "ops-30": {"MLX_MAX_OPS_PER_BUFFER": "30"},
    # One graph a step: no commit by op count nor by the bytes the kernels read (1000 MB by default
    # there, a few layers of an 8B model), so MLX's limit of 10 graphs in flight (transforms.cpp's
    # MAX_ACTIVE_TASKS, where the host waits for the device) is not reached by two steps.
    "one-graph": {"MLX_MAX_OPS_PER_BUFFER": "4000", "MLX_MAX_MB_PER_BUFFER": "1000000"},
    # Not MLX's: mlxrt compiles its L3 kernels itself into MLX's kernel cache, where MLX loads
    # them (kernels/cuda/cached_kernel.h); the same machine code, launched by MLX as before.
    "self-compile": {"MLXRT_CUDA_SELF_COMPILE": "1"},
    # Not MLX's: a decoding step's llama-style layers as one kernel each at l3
    # (kernels/cuda/decoder_layer.h; l1 is unchanged): l3's default for 4-bit layers; "layer"
    # takes 8-bit ones too, "per-node" none (the products, norms and attention as their own nodes).
    "layer": {"MLXRT_CUDA_L3_LAYER": "1"},
    "per-node": {"MLXRT_CUDA_L3_LAYER": "0"},
    # The same with two blocks a multiprocessor (more of the products' loads in flight).
    "layer-2": {"MLXRT_CUDA_L3_LAYER": "1", "MLXRT_CUDA_L3_LAYER_BLOCKS_PER_SM": "2"},
    # Four steps of the products' loads in flight; tasks of four rows (decoder_layer.h's grid).
    "layer-d4": {"MLXRT_CUDA_L3_LAYER": "1", "MLXRT_CUDA_L3_LAYER_DEPTH": "4"},
    "layer-r4": {"MLXRT_CUDA_L3_LAYER": "1", "MLXRT_CUDA_L3_LAYER_ROWS": "4"},
    # The per-node L3 path's fused SwiGLU reading gate's and up's rows in one pass; its products
    # keeping four steps of loads in flight (affine_qmv.h's l3_depth); both.
    "swiglu-pairs": {"MLXRT_CUDA_L3_SWIGLU_PAIRS": "1"},
    "depth-4": {"MLXRT_CUDA_L3_DEPTH": "4"},
    "pairs-d4": {"MLXRT_CUDA_L3_SWIGLU_PAIRS": "1", "MLXRT_CUDA_L3_DEPTH": "4"},
    # Dense (bf16) weights through the layer kernel too (MLX's cuBLAS products otherwise).
    "layer-dense": {"MLXRT_CUDA_L3_LAYER": "1", "MLXRT_CUDA_L3_DENSE": "1"},
    # q/k/v tasks of the other products' rows (the default gives them decoder_layer_qkv_rows's: as
    # many as make one round over the grid).
    "no-qkv-rounds": {"MLXRT_CUDA_L3_LAYER_QKV_ROUNDS": "0"},
    # Each product task's loads after the last task's sums (the default streams a warp's tasks:
    # DecoderLayerGrid::stream).
    "no-stream": {"MLXRT_CUDA_L3_LAYER_STREAM": "0"},
    # The layer kernel's products with x as int8 and DP4A (DecoderLayerGrid::q8; opt-in).
    "q8": {"MLXRT_CUDA_L3_LAYER_Q8": "1"},
    # A prefill's quantized products at l3 as the matrix dequantized, then a dense matmul
    # (kernels/cuda/dequantized_gemm.h), from 64 to 512 rows: the prompt tok/s column (--prompt 512).
    "prefill-64": {"MLXRT_CUDA_L3_PREFILL_ROWS": "64"},
    "prefill-128": {"MLXRT_CUDA_L3_PREFILL_ROWS": "128"},
    "prefill-256": {"MLXRT_CUDA_L3_PREFILL_ROWS": "256"},
    "prefill-512": {"MLXRT_CUDA_L3_PREFILL_ROWS": "512"},
}

AVERAGES = re.compile(r"Averages: prompt_tps=([\d.]+), generation_tps=([\d.]+)")
STEP = re.compile(r"decode step: build=([\d.]+) ms, dispatch=([\d.]+) ms, wait=([\d.]+) ms")


def run(cmd, env, log):
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=600)
    log.write(f"$ {' '.join(f'{k}={v}' for k, v in env.items())} {' '.join(cmd)} (rc {proc.returncode}, "
              f"{time.perf_counter() - t:.0f} s)\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}\n")
    log.flush()
    m = AVERAGES.search(proc.stdout)
    if proc.returncode != 0 or not m:
        return {"error": (proc.stderr or proc.stdout)[-300:]}
    out = {"prompt_tps": float(m.group(1)), "gen_tps": float(m.group(2))}
    steps = STEP.findall(proc.stdout)
    if steps:
        last = steps[-1]  # the last trial: everything compiled and cached by then
        out.update(build_ms=float(last[0]), dispatch_ms=float(last[1]), wait_ms=float(last[2]))
    return out


def setting_env(text):
    """A setting's environment: a name of SETTINGS, or NAME=VALUE pairs joined by ';'."""
    if text in SETTINGS:
        return SETTINGS[text]
    env = {}
    for pair in text.split(";"):
        name, eq, value = pair.partition("=")
        if not eq or not name:
            raise argparse.ArgumentTypeError(f"{text!r} is neither a setting ({', '.join(SETTINGS)}) nor NAME=VALUE pairs")
        env[name] = value
    return env


def setting_arg(text):
    setting_env(text)  # refused here, where argparse names the option
    return text


def main():
    ap = argparse.ArgumentParser()
    models.add_run_args(ap, ["qwen3-0.6b-q4", "qwen3-8b-q4"])
    ap.add_argument("--settings", nargs="+", default=["default", "graphs-off", "ops-400"], type=setting_arg,
                    help=f"named settings ({', '.join(SETTINGS)}) or NAME=VALUE[;NAME=VALUE...] (an environment of "
                         "their own, e.g. MLXRT_CUDA_L3_LAYER_ROWS=4;MLXRT_CUDA_L3_LAYER_Q8=1)")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--programs", nargs="+", default=["l1", "l3", "mlx-lm"], choices=["l1", "l3", "mlx-lm"])
    ap.add_argument("--compare-bin", action="append", default=[], metavar="LABEL=BIN",
                    help="another build, run at l1 as program l1-LABEL and at l3 as l3-LABEL where l3 is among "
                         "--programs (a before/after in the same run)")
    args = ap.parse_args()
    others = []
    for spec in args.compare_bin:
        label, _, binary = spec.partition("=")
        if not label or not binary:
            ap.error(f"--compare-bin wants LABEL=BIN, got {spec!r}")
        others.append((label, binary))
    python = Path(sys.executable)
    args.out.mkdir(parents=True, exist_ok=True)
    log = open(args.out / "step_timing.log", "a")
    flags = ["-p", str(args.prompt), "-g", str(args.gen), "-n", str(args.trials)]
    rows = []
    for name in args.models:
        shape, quant = name.rsplit("-", 1)
        model = str(models.ensure_model(python, args.work, shape, quant, args.tokenizer))
        programs = {
            "l1": [args.bin, "benchmark", "--model", model, *flags, "--step-timing"],
            "l3": [args.bin, "benchmark", "--model", model, *flags, "--step-timing", "--fidelity", "l3"],
            "mlx-lm": [str(python), "-m", "mlx_lm.benchmark", "--model", model, *flags],
        }
        programs = {k: v for k, v in programs.items() if k in args.programs}
        for label, binary in others:
            programs[f"l1-{label}"] = [binary, "benchmark", "--model", model, *flags, "--step-timing"]
            if "l3" in args.programs:
                programs[f"l3-{label}"] = [binary, "benchmark", "--model", model, *flags, "--step-timing",
                                           "--fidelity", "l3"]
        runs = {}
        for _ in range(args.rounds):
            for setting in args.settings:
                for program, cmd in programs.items():
                    runs.setdefault((setting, program), []).append(run(cmd, setting_env(setting), log))
        for (setting, program), rs in runs.items():
            ok = [r for r in rs if "error" not in r]
            row = {"model": name, "setting": setting, "program": program}
            if not ok:
                row.update(rs[0])
            else:
                median = statistics.median_low(r["gen_tps"] for r in ok)
                row.update(next(r for r in ok if r["gen_tps"] == median), all_gen_tps=[r["gen_tps"] for r in ok])
            rows.append(row)
        (args.out / "step_timing.json").write_text(json.dumps(rows, indent=1))
    sw = max([11] + [len(r["setting"]) for r in rows])  # a NAME=VALUE setting may be longer than a name
    lines = [f"prompt tok/s and decode tok/s (prompt {args.prompt}, {args.gen} tokens, mean of {args.trials} trials, "
             f"median of {args.rounds} rounds by decode); that run's last trial's mean step split (ms): build the graph / "
             "dispatch it / wait for the device",
             f"{'model':<14} {'setting':<{sw}} {'program':<10} {'prompt':>8} {'tok/s':>8} {'step ms':>8} {'build':>7} "
             f"{'dispatch':>9} {'wait':>7}"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:<14} {r['setting']:<{sw}} {r['program']:<10} error: {r['error'][:150]!r}")
            continue
        split = (f"{r['build_ms']:>7.3f} {r['dispatch_ms']:>9.3f} {r['wait_ms']:>7.3f}" if "build_ms" in r else "")
        lines.append(f"{r['model']:<14} {r['setting']:<{sw}} {r['program']:<10} {r['prompt_tps']:>8.1f} {r['gen_tps']:>8.1f} "
                     f"{1e3 / r['gen_tps']:>8.3f} {split}  " + "/".join(f"{v:.0f}" for v in r.get("all_gen_tps", [])))
    text = "\n".join(lines)
    (args.out / "step_timing.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
