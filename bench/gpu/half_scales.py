#!/usr/bin/env python3
"""A copy of an MLX checkpoint with its float32 arrays stored as float16, where that changes no
value: refuses (exit 1) if any element would round, overflow or flush to zero.

Why: `mlxrt convert --gguf` keeps a Q4_0 / Q8_0 block's fp16 scale d as a float32 scale d and a
float32 bias -8d (-128d), and the norms as the float32 the GGUF holds, so that MLX's
dequantisation gives exactly ggml's values. Those float32 arrays make MLX compute in float32 (the
embedding's scales set the activations' type). Every one of those values is a float16 (d is one,
-8d and -128d are d times a power of two; a random model's norms are 1.0), so the same checkpoint
in float16 holds the same weights and runs in float16, as llama.cpp computes. This checks that
claim element by element rather than assuming it.

Usage: half_scales.py SRC_DIR DST_DIR
"""
import json
import shutil
import sys
from pathlib import Path

import mlx.core as mx


def main():
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    converted = kept = 0
    for f in sorted(src.iterdir()):
        if f.suffix != ".safetensors":
            if f.is_file():
                shutil.copy(f, dst / f.name)
            continue
        arrays, metadata = mx.load(str(f), return_metadata=True)
        out = {}
        for name, a in arrays.items():
            if a.dtype != mx.float32:
                out[name] = a
                kept += 1
                continue
            h = a.astype(mx.float16)
            if not mx.array_equal(h.astype(mx.float32), a).item():
                bad = mx.sum(h.astype(mx.float32) != a).item()
                sys.exit(f"{f.name}: {name}: {bad} of {a.size} values are not float16 values; not converted")
            out[name] = h
            converted += 1
        mx.save_safetensors(str(dst / f.name), out, metadata=metadata or {"format": "mlx"})
        del arrays, out
    config_path = dst / "config.json"
    config = json.loads(config_path.read_text())
    for key in ("torch_dtype", "dtype"):
        if key in config:
            config[key] = "float16"
    config_path.write_text(json.dumps(config, indent=4))
    print(f"{dst}: {converted} float32 arrays stored as float16 (every value exact), {kept} others unchanged")


if __name__ == "__main__":
    main()
