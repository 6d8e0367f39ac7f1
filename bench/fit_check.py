#!/usr/bin/env python3
"""`mlxrt fit`'s estimate against the peak memory MLX measures in a real run (not a timed test).

For each case: `mlxrt fit --json` with the run's shape (context = prompt + max_tokens - 1, the
positions generate_step feeds the cache), then `mlxrt generate --prompt-tokens ... --verbose True`,
whose "Peak memory" line is mx.get_peak_memory() as mlx-lm prints it; the table gives both, the
estimate's parts, and the estimate's error relative to the measurement (target: within 10%).

Models: the server tests' tiny qwen3 (2 layers, the real Qwen3 vocabulary) and models made here by
mlx-lm with random weights at published dimensions (bench/gpu/models.py's shapes), each with the
Qwen3 tokenizer files beside it.

Usage: bench/fit_check.py --out DIR [--cases NAME ...] [--mlxrt build/mlxrt]
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))
from models import MAKE_MODEL, SHAPES  # noqa: E402

# name: (model, prompt tokens, max tokens, extra flags for both fit and generate)
CASES = {
    "tiny-p512": ("server_qwen3", 512, 16, []),
    "tiny-p4097": ("server_qwen3", 4097, 16, []),  # two full chunks: the CPU's attention scores dominate
    "tiny-p4097-step512": ("server_qwen3", 4097, 16, ["--prefill-step-size", "512"]),
    "qwen3-0.6b-p1024": ("qwen3-0.6b-bf16", 1024, 16, []),
    "qwen3-0.6b-p3000": ("qwen3-0.6b-bf16", 3000, 16, []),
    "qwen3-0.6b-p3000-kv4": ("qwen3-0.6b-bf16", 3000, 16, ["--kv-bits", "4", "--quantized-kv-start", "1000"]),
    "qwen3-0.6b-q4-p2048": ("qwen3-0.6b-q4", 2048, 16, []),
    "qwen3-0.6b-p3000-max1024": ("qwen3-0.6b-bf16", 3000, 16, ["--max-kv-size", "1024"]),
}


def model_dir(out: Path, name: str, tokenizer_dir: Path) -> Path:
    if name == "server_qwen3":
        subprocess.run([sys.executable, str(ROOT / "tools" / "make_server_fixture.py"), "--out", str(out)],
                       check=True, capture_output=True)
        return out / "server_qwen3"
    shape, quant = name.rsplit("-", 1)
    path = out / name
    if not (path / "config.json").exists():
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([sys.executable, "-c", MAKE_MODEL, str(tmp), quant, json.dumps(SHAPES[shape])], check=True)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tokenizer_dir / f, tmp / f)
        tmp.rename(path)
    return path


def run_case(binary: str, path: Path, prompt: int, max_tokens: int, flags):
    fit = subprocess.run([binary, "fit", "--model", str(path), "--json", "--context", str(prompt + max_tokens - 1),
                          "--prompt-tokens", str(prompt), *flags], capture_output=True, text=True, check=True)
    est = json.loads(fit.stdout)
    ids = ",".join(str((7 * i) % 5000 + 100) for i in range(prompt))
    gen = subprocess.run([binary, "generate", "--model", str(path), "--prompt-tokens", ids, "--max-tokens",
                          str(max_tokens), "--verbose", "True", "--ignore-chat-template", *flags],
                         capture_output=True, text=True, check=True)
    peak = float(re.search(r"Peak memory: ([0-9.]+) GB", gen.stdout).group(1)) * 1e9
    generated = int(re.search(r"Generation: (\d+) tokens", gen.stdout).group(1))
    return est, peak, generated


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    ap.add_argument("--mlxrt", default=str(ROOT / "build" / "mlxrt"))
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    tokenizer_dir = model_dir(a.out, "server_qwen3", None)
    rows = []
    print("| case | weights GB | KV peak GB | activations GB | estimate GB | measured peak GB | error |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for case in a.cases:
        name, prompt, max_tokens, flags = CASES[case]
        path = model_dir(a.out, name, tokenizer_dir)
        est, peak, generated = run_case(a.mlxrt, path, prompt, max_tokens, flags)
        if generated != max_tokens:  # an early end of sequence: the run's shape differs from the estimate's
            est, peak, _ = run_case(a.mlxrt, path, prompt, generated, flags)
        err = (est["peak_bytes"] - peak) / peak
        rows.append({"case": case, "estimate": est, "peak": peak, "error": err})
        print(f"| {case} | {est['weights_bytes'] / 1e9:.3f} | {est['kv_cache']['peak_bytes'] / 1e9:.3f} | "
              f"{est['activations']['bytes'] / 1e9:.3f} | {est['peak_bytes'] / 1e9:.3f} | {peak / 1e9:.3f} | "
              f"{100 * err:+.1f}% |", flush=True)
    (a.out / "fit_check.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
