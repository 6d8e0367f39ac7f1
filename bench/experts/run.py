"""Streamed experts on a CPU: a random 4-bit model with Qwen3-30B-A3B's layer dimensions (hidden
2048, moe_intermediate 768, 128 experts, top-8, 32 q / 4 kv heads of 128, vocab 151936) whose
experts total at least 4x the budget, run by `mlxrt generate --expert-memory BUDGET`, against a
fully resident run of the same dimensions with fewer layers (a model that fits).

Both models are written straight in their quantized form, one shard at a time
(tools/moe_checkpoint.py), so that writing them never needs the model in memory. Before the streamed
run the shards' pages are dropped from the page cache (posix_fadvise DONTNEED on our own files), so
its first reads come from the disk.

    python bench/experts/run.py --out build/bench-experts --layers 24 --budget 2 --tokens 32
"""
import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import moe_checkpoint  # noqa: E402

DIMS = dict(hidden=2048, moe_intermediate=768, experts=128, top_k=8, heads=32, kv_heads=4, head_dim=128,
            vocab=151936)


def model(out, layers):
    path = Path(out) / f"qwen3-30b-a3b-dims-{layers}l-q4"
    if not (path / "model.safetensors.index.json").exists():
        print(f"writing {path} ...", flush=True)
        moe_checkpoint.write(path, layers=layers, layers_per_shard=2, seed=layers, **DIMS)
    return path


def drop_page_cache(path):
    for f in Path(path).glob("*.safetensors"):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def run(binary, path, prompt_len, tokens, budget=None):
    """One `mlxrt generate`: its speed and expert-cache line."""
    prompt = ",".join(str(1 + (i * 7919) % 151000) for i in range(prompt_len))
    args = [binary, "generate", "--model", str(path), "--prompt-tokens", prompt, "--max-tokens", str(tokens)]
    if budget is not None:
        args += ["--expert-memory", str(budget)]
    p = subprocess.run(args, capture_output=True, text=True)
    out, err = p.stdout, p.stderr
    if p.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{err}")
    r = {}
    m = re.search(r"Prompt: (\d+) tokens, ([\d.]+) tokens-per-sec", out)
    r["prompt_tps"] = float(m.group(2))
    m = re.search(r"Generation: (\d+) tokens, ([\d.]+) tokens-per-sec", out)
    r["gen_tokens"], r["gen_tps"] = int(m.group(1)), float(m.group(2))
    m = re.search(r"Expert cache: hit rate ([\d.]+)% \((\d+) hits, (\d+) misses\), ([\d.]+) ([KMGT]?B) read from disk",
                  err)
    units = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}
    r["hit_rate"] = float(m.group(1)) if m else None
    r["read_gb"] = float(m.group(4)) * units[m.group(5)] / 1e9 if m else None
    return r


def measured(binary, path, prompt_len, tokens, budget=None):
    """run() in a child Python, whose RUSAGE_CHILDREN max RSS is this run's peak RSS alone."""
    code = ("import json, resource, sys; sys.path.insert(0, %r); import run as b; "
            "r = b.run(*json.loads(sys.argv[1])); "
            "r['rss_gb'] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 1e9; "
            "print(json.dumps(r))") % str(Path(__file__).parent)
    proc = subprocess.run([sys.executable, "-c", code, json.dumps([binary, str(path), prompt_len, tokens, budget])],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "build" / "bench-experts"))
    ap.add_argument("--bin", default=str(ROOT / "build" / "mlxrt"))
    ap.add_argument("--layers", type=int, default=24, help="layers of the streamed model")
    ap.add_argument("--resident-layers", type=int, default=4, help="layers of the model run fully resident")
    ap.add_argument("--budget", type=float, default=2.0, help="--expert-memory, GB")
    ap.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    ap.add_argument("--tokens", type=int, default=32, help="generated tokens")
    ap.add_argument("--runs", default="resident,small-streamed,streamed",
                    help="which runs, of: resident (fewer layers, all experts resident), small-streamed (the same "
                         "model at --expert-memory), streamed (the large model at --expert-memory)")
    a = ap.parse_args()

    big, small = model(a.out, a.layers), model(a.out, a.resident_layers)
    rows = []
    runs = {"resident": (f"{a.resident_layers} layers, all experts resident", small, None),
            "small-streamed": (f"{a.resident_layers} layers, --expert-memory {a.budget:g}", small, a.budget),
            "streamed": (f"{a.layers} layers, --expert-memory {a.budget:g}", big, a.budget)}
    for label, path, budget in (runs[r] for r in a.runs.split(",")):
        experts, dense = moe_checkpoint.expert_bytes(path)
        drop_page_cache(path)
        r = measured(a.bin, path, a.prompt, a.tokens, budget)
        rows.append((label, experts, dense, r))
        print(label, r, flush=True)

    print()
    print("| run | experts (GB) | other weights (GB) | prompt tok/s | decode tok/s | peak RSS (GB) | "
          "expert hit rate | read from disk (GB) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, experts, dense, r in rows:
        hit = f"{r['hit_rate']:.1f}%" if r["hit_rate"] is not None else "-"
        read = f"{r['read_gb']:.2f}" if r["read_gb"] is not None else "-"
        print(f"| {label} | {experts / 1e9:.2f} | {dense / 1e9:.2f} | {r['prompt_tps']:.2f} | {r['gen_tps']:.2f} | "
              f"{r['rss_gb']:.2f} | {hit} | {read} |")


if __name__ == "__main__":
    main()
