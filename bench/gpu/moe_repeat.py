#!/usr/bin/env python3
"""Where mlxrt's and mlx-lm's greedy texts part on a large model, and why: each program's greedy
tokens twice, in separate processes (is each repeatable?), and the logits of the whole prompt from
both (are they byte-equal at the length where the texts part?).

Usage: moe_repeat.py --bin MLXRT --model DIR [--prompt-len 512] [--gen 64] --out FILE.json
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

ORACLE_GREEDY = """
import json, sys
sys.path.insert(0, sys.argv[1])
import oracle
model, config = oracle.load(sys.argv[2])
print(json.dumps(oracle.greedy_tokens(model, config, json.loads(sys.argv[3]), int(sys.argv[4]))))
"""


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def mlxrt_greedy(binary, model, prompt, gen):
    proc = subprocess.run([binary, "generate", "--model", model, "--prompt-tokens", ",".join(map(str, prompt)),
                           "-m", str(gen), "--temp", "0"], capture_output=True, text=True, check=True)
    return [int(t) for t in proc.stdout.split("==========\n")[1].split()]


def oracle_greedy(model, prompt, gen):
    proc = subprocess.run([sys.executable, "-c", ORACLE_GREEDY, str(ROOT / "tools"), model, json.dumps(prompt),
                           str(gen)], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import mlx.core as mx
    import numpy as np

    import oracle

    # Without tokenizer files `mlxrt generate` prints token ids: the weights and config, linked.
    ids_only = Path(tempfile.mkdtemp()) / "model"
    ids_only.mkdir()
    for f in Path(args.model).iterdir():
        if f.suffix == ".safetensors" or f.name in ("config.json", "model.safetensors.index.json"):
            (ids_only / f.name).symlink_to(f.resolve())
    vocab = json.loads((Path(args.model) / "config.json").read_text())["vocab_size"]
    prompt = np.random.RandomState(0).randint(0, vocab, size=args.prompt_len).tolist()
    runs = {"mlxrt": [mlxrt_greedy(args.bin, str(ids_only), prompt, args.gen) for _ in range(2)],
            "mlx_lm": [oracle_greedy(args.model, prompt, args.gen) for _ in range(2)]}
    report = {
        "prompt_len": args.prompt_len, "gen": args.gen,
        "mlxrt_repeatable": runs["mlxrt"][0] == runs["mlxrt"][1],
        "mlx_lm_repeatable": runs["mlx_lm"][0] == runs["mlx_lm"][1],
        "mlx_lm_runs_part_at": first_difference(*runs["mlx_lm"]),
        "mlxrt_vs_mlx_lm_part_at": first_difference(runs["mlxrt"][0], runs["mlx_lm"][0]),
    }
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "logits.safetensors"
        subprocess.run([args.bin, "logits", "--model", args.model, "--tokens", ",".join(map(str, prompt)),
                        "--out", str(out)], check=True, capture_output=True)
        ours = mx.load(str(out))["logits"]
        model, _ = oracle.load(args.model)
        ref = oracle.full_logits(model, prompt)
        ref2 = oracle.full_logits(model, prompt)
        report["prompt_logits_equal"] = oracle.raw_bytes(ours) == oracle.raw_bytes(ref)
        report["mlx_lm_prompt_logits_repeatable"] = oracle.raw_bytes(ref) == oracle.raw_bytes(ref2)
        if not report["prompt_logits_equal"]:
            rows = [i for i in range(ref.shape[0]) if oracle.raw_bytes(ours[i]) != oracle.raw_bytes(ref[i])]
            report["prompt_logits_rows_differing"] = [len(rows), rows[:8]]
            report["max_abs_diff"] = mx.max(mx.abs(ours.astype(mx.float32) - ref.astype(mx.float32))).item()
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
