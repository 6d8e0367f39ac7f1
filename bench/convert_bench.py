#!/usr/bin/env python3
"""`mlxrt convert --hf-path` against mlx_lm.convert on one generated checkpoint: wall time and
peak resident memory of each whole process (rounds interleaved, medians), and whether the two
output directories hold the same bytes (every file but the tokenizer's, which mlx-lm rewrites).

Usage: bench/convert_bench.py [--layers 12] [--hidden 2048] [--rounds 3] [--shard-mb 0] [-- convert flags]
The model is a Qwen3 of that shape with random bfloat16 weights in two Hugging Face style shards;
--shard-mb lowers the output shard limit of both sides (mlx-lm's make_shards patched) to show
that mlxrt holds about one output shard at a time."""
import argparse
import filecmp
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "convert"))

MLX_LM_SIDE = r"""
import sys, mlx_lm.utils as u
limit = int(sys.argv[3])
if limit:
    def _split(weights, limit):
        shards, size = [], 0
        for k, v in weights.items():
            if not shards or size + v.nbytes > limit:
                shards.append({}); size = 0
            shards[-1][k] = v; size += v.nbytes
        return shards
    u.make_shards = lambda w, max_file_size_gb=0: _split(w, limit)
from mlx_lm.convert import convert, configure_parser
args = configure_parser().parse_args(["--hf-path", sys.argv[1], "--mlx-path", sys.argv[2], *sys.argv[4:]])
convert(**vars(args))
"""


def make_model(path: Path, layers: int, hidden: int):
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm import utils as lm_utils
    from mlx_lm_side_by_side import tiny_tokenizer
    cfg = {"model_type": "qwen3", "hidden_size": hidden, "num_hidden_layers": layers, "intermediate_size": 3 * hidden,
           "num_attention_heads": hidden // 128, "num_key_value_heads": max(1, hidden // 256), "head_dim": 128,
           "rms_norm_eps": 1e-6, "vocab_size": 32000, "max_position_embeddings": 4096, "rope_theta": 1e6,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16", "eos_token_id": 2, "bos_token_id": 1}
    path.mkdir(parents=True)
    model_class, args_class = lm_utils._get_classes(cfg)
    model = model_class(args_class.from_dict(cfg))
    weights = {k: v.astype(mx.bfloat16) for k, v in tree_flatten(model.parameters())}
    half = len(weights) // 2
    for i, keys in enumerate((list(weights)[:half], list(weights)[half:])):
        mx.save_safetensors(str(path / f"model-{i + 1:05d}-of-00002.safetensors"), {k: weights[k] for k in keys},
                            metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(cfg))
    tiny_tokenizer(path)
    return sum(v.nbytes for v in weights.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shard-mb", type=int, default=0)
    ap.add_argument("--bin", default=os.environ.get("MLXRT_BIN", str(ROOT / "build" / "mlxrt")))
    ap.add_argument("flags", nargs="*")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="convert-bench-"))
    try:
        size = make_model(work / "src", a.layers, a.hidden)
        limit = a.shard_mb * 1_000_000
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        rt_env = {**env, **({"MLXRT_CONVERT_SHARD_BYTES": str(limit)} if limit else {})}
        results = {"mlxrt": [], "mlx_lm": []}
        for r in range(a.rounds):
            for side in ("mlxrt", "mlx_lm"):
                out = work / f"{side}-{r}"
                if side == "mlxrt":
                    cmd = [a.bin, "convert", "--hf-path", str(work / "src"), "--mlx-path", str(out), "--quiet", *a.flags]
                    e = rt_env
                else:
                    cmd = [sys.executable, "-c", MLX_LM_SIDE, str(work / "src"), str(out), str(limit), *a.flags]
                    e = env
                # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: run each side in a fresh
                # Python so the figure is that command's own.
                probe = [sys.executable, "-c", "import resource,subprocess,sys;subprocess.run(sys.argv[1:],check=True,"
                         "capture_output=True);print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)", *cmd]
                start = time.perf_counter()
                proc = subprocess.run(probe, capture_output=True, text=True, env=e)
                wall = time.perf_counter() - start
                if proc.returncode:
                    raise SystemExit(f"{side} failed:\n{proc.stderr[-2000:]}")
                results[side].append((wall, int(proc.stdout.strip()) / 1024))
        same = all(filecmp.cmp(work / "mlxrt-0" / f, work / "mlx_lm-0" / f, shallow=False)
                   for f in os.listdir(work / "mlx_lm-0") if f not in ("tokenizer.json", "tokenizer_config.json"))
        print(f"model: qwen3 {a.layers} layers, hidden {a.hidden}, {size / 1e9:.2f} GB bf16; flags: {' '.join(a.flags) or '(none)'}; "
              f"output shard limit: {a.shard_mb or 5 * 1024} MB; {a.rounds} rounds")
        for side, rows in results.items():
            print(f"  {side:7s} wall {statistics.median(w for w, _ in rows):6.2f} s   peak RSS {statistics.median(m for _, m in rows):7.0f} MB")
        ratio = statistics.median(w for w, _ in results["mlx_lm"]) / statistics.median(w for w, _ in results["mlxrt"])
        print(f"  mlxrt is {ratio:.2f}x mlx_lm.convert's speed; outputs byte-identical: {same}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
