"""Cost of `--batch-invariant`: tokens per second of `mlxrt batch-generate` with and without it, at
batch 4 and 8, on the tiny qwen3 fixture and on a larger random qwen3 made here (hidden 1024, 8
layers, vocab 32000, bf16; no tokenizer: batch-generate takes token ids). Each run generates
max_tokens for every request (the requests never stop early: no eos in range is forced, the budget
ends them), and the throughput printed by batch-generate on stderr is recorded (best of --runs).

Run: python bench/batch_invariant/bench.py --bin build/mlxrt --fixtures build/fixtures --out build/bench-invariant
"""
import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

MEDIUM = {"model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 8, "intermediate_size": 3072,
          "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 32000,
          "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 4096,
          "tie_word_embeddings": True, "eos_token_id": 2, "hidden_act": "silu"}

MAKE_MODEL = r"""
import json, sys
from pathlib import Path
import mlx.core as mx
from mlx_lm import utils
out, config = Path(sys.argv[1]), json.loads(sys.argv[2])
mx.random.seed(0)
model_class, args_class = utils._get_classes(config=config)
model = model_class(args_class.from_dict(config))
model.set_dtype(mx.bfloat16)
utils.save_model(out, model)
utils.save_config(config, config_path=out / "config.json")
"""


def medium_model(out: Path) -> Path:
    d = out / "qwen3-medium-bf16"
    if not (d / "config.json").exists():
        d.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-c", MAKE_MODEL, str(d), json.dumps(MEDIUM)], check=True)
    return d


def requests(batch, max_tokens):
    # prompts of different lengths (8..8+7*batch tokens), ids away from the eos id
    return {"requests": [{"prompt_tokens": [10 + (7 * i + j) % 480 for j in range(8 + 7 * i)],
                          "max_tokens": max_tokens, "logits_processors": {"logit_bias": {"2": -100.0}}}
                         for i in range(batch)]}


def tps(binary, model, path, flags):
    p = subprocess.run([binary, "batch-generate", "--model", str(model), "--requests", str(path), *flags],
                       capture_output=True, text=True, check=True)
    m = re.search(r"(\d+) tokens in ([\d.]+) s, ([\d.]+) tokens-per-sec", p.stderr)
    return float(m.group(3)), p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/mlxrt")
    ap.add_argument("--fixtures", default="build/fixtures")
    ap.add_argument("--out", default="build/bench-invariant")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--batches", default="4,8")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    models = {"qwen3_bf16 (tiny fixture)": Path(a.fixtures) / "qwen3_bf16", "qwen3 medium bf16": medium_model(out)}
    print("| model | batch | default tok/s | --batch-invariant tok/s | ratio | rows equal |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for name, model in models.items():
        for batch in map(int, a.batches.split(",")):
            path = out / f"requests-{batch}.json"
            path.write_text(json.dumps(requests(batch, a.max_tokens)))
            base, inv, same = 0.0, 0.0, None
            for _ in range(a.runs):
                t, rows_base = tps(a.bin, model, path, [])
                base = max(base, t)
                t, rows_inv = tps(a.bin, model, path, ["--batch-invariant"])
                inv = max(inv, t)
                same = rows_base == rows_inv
            print(f"| {name} | {batch} | {base:.1f} | {inv:.1f} | {inv / base:.2f} | {same} |", flush=True)


if __name__ == "__main__":
    main()
