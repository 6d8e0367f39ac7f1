#!/usr/bin/env python3
"""MLX's CPU backend on the reference BLAS the mlx-cpu wheel bundles vs on OpenBLAS, side by side in
one run: `mlxrt generate` (and with --mlx-lm, `mlx_lm generate`) on a float32 model, prefill and
decode tok/s and the greedy text. Each BLAS is chosen per process with LD_PRELOAD (the file preloaded
wins over the one libmlx.so names), so the figures do not depend on which BLAS the environment has
in place (tools/setup/mlx-blas.sh). Configurations alternate within each run; medians of --runs.

The default model is a float32 copy of the default model (SmolLM2-135M-Instruct, which ships 4-bit),
made once with mlx_lm.convert --dequantize --dtype float32 into .cache/bench-models/.

Usage: bench/blas_bench.py [--model DIR] [--runs 3] [--max-tokens 64] [--threads 1 2] [--mlx-lm]
"""
import argparse
import glob
import os
import platform
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = ROOT / ".venv" / "bin" / "python"
BIN = Path(os.environ.get("MLXRT_BIN", ROOT / "build" / "mlxrt"))
MODELS = ROOT / ".cache" / "bench-models"
DEFAULT_MODEL = Path.home() / ".cache" / "mlxrt" / "models" / "SmolLM2-135M-Instruct"
OPENBLAS = Path(f"/usr/lib/{platform.machine()}-linux-gnu/openblas-pthread/libopenblas.so.0")
PROMPT = ("The lighthouse keeper had kept the lamp burning for forty years. Every night he climbed "
          "the spiral stairs, trimmed the wick, wound the clockwork that turned the great lens, and "
          "wrote one line in the log. Ships passed, storms came and went, and the village below "
          "grew from a handful of cottages into a small town with a harbour, a school and a market. "
          "Then one autumn evening a letter arrived from the capital. Write the rest of the story in "
          "detail, at length, with dialogue.")
FOOTER = {
    "prompt": re.compile(r"Prompt: (\d+) tokens, ([\d.]+) tokens-per-sec"),
    "gen": re.compile(r"Generation: (\d+) tokens, ([\d.]+) tokens-per-sec"),
}


def reference_blas():
    """The wheel's own libblas, kept aside by tools/setup/mlx-blas.sh (or still in place)."""
    purelib = subprocess.run([PY, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    libs = Path(purelib) / "mlx_cpu.libs"
    for pattern in ("reference/libblas-*.so*", "libblas-*.so*"):
        found = [Path(p) for p in sorted(glob.glob(str(libs / pattern))) if not os.path.islink(p)]
        if found:
            return found[0]
    sys.exit(f"no reference libblas under {libs}")


def float32_copy(src):
    out = MODELS / f"{src.name}-float32"
    if not (out / "config.json").exists():
        MODELS.mkdir(parents=True, exist_ok=True)
        subprocess.run([PY, "-m", "mlx_lm", "convert", "--hf-path", str(src), "--mlx-path", str(out),
                        "--dequantize", "--dtype", "float32"], check=True)
    return out


def run(cmd, preload, threads):
    env = dict(os.environ, LD_PRELOAD=str(preload))
    env.pop("OPENBLAS_NUM_THREADS", None)
    if threads:
        env["OPENBLAS_NUM_THREADS"] = str(threads)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {proc.stderr[-2000:]}")
    p, g = FOOTER["prompt"].search(proc.stdout), FOOTER["gen"].search(proc.stdout)
    text = proc.stdout.split("==========\n")[1] if "==========\n" in proc.stdout else ""
    return {"prompt_tokens": int(p.group(1)), "prompt_tps": float(p.group(2)),
            "gen_tokens": int(g.group(1)), "gen_tps": float(g.group(2)), "text": text}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, help="a float32 model (default: a float32 copy of the default model)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", nargs="+", type=int, default=[],
                    help="OPENBLAS_NUM_THREADS values to run OpenBLAS with (default: OpenBLAS's own choice)")
    ap.add_argument("--mlx-lm", action="store_true", help="also run mlx_lm generate the same ways")
    args = ap.parse_args()
    model = args.model or float32_copy(DEFAULT_MODEL)
    ref = reference_blas()
    configs = [("reference", ref, None)] + [("openblas", OPENBLAS, t) for t in (args.threads or [None])]
    programs = {"mlxrt": [str(BIN), "generate", "--model", str(model), "--prompt", PROMPT,
                          "--max-tokens", str(args.max_tokens)]}
    if args.mlx_lm:
        programs["mlx-lm"] = [str(PY), "-m", "mlx_lm", "generate", "--model", str(model), "--prompt", PROMPT,
                              "--max-tokens", str(args.max_tokens)]
    results = {}
    for _ in range(args.runs):
        for prog, cmd in programs.items():
            for name, lib, threads in configs:
                results.setdefault((prog, name, threads), []).append(run(cmd, lib, threads))
    print(f"model {model} (float32), reference BLAS {ref.name}, OpenBLAS {OPENBLAS.resolve().name}, "
          f"{os.cpu_count()} cores, medians of {args.runs}")
    print(f"{'program':<8} {'BLAS':<10} {'threads':>7} {'prompt':>6} {'prefill tok/s':>13} "
          f"{'gen':>4} {'decode tok/s':>12}  same text as reference")
    for (prog, name, threads), rs in results.items():
        base = results[(prog, "reference", None)][0]["text"]
        same = all(r["text"] == base for r in rs)
        print(f"{prog:<8} {name:<10} {threads or 'default':>7} {rs[0]['prompt_tokens']:>6} "
              f"{statistics.median(r['prompt_tps'] for r in rs):>13.1f} {rs[0]['gen_tokens']:>4} "
              f"{statistics.median(r['gen_tps'] for r in rs):>12.2f}  {'yes' if same else 'no'}")


if __name__ == "__main__":
    main()
