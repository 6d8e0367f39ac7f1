#!/usr/bin/env python3
"""Why a logits parity case differs on this machine: for each fixture, mlx-lm's full-forward logits
twice (is the reference itself deterministic here?), mlxrt's twice, and how the two programs differ
(first differing token position, largest difference). Usage:
  parity_diag.py --bin MLXRT --fixtures DIR NAME [NAME ...]"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import oracle  # noqa: E402

TOKENS = [1, 17, 300, 42, 5, 511, 77, 8, 256, 3, 99, 150]


def ours(binary, path, out):
    subprocess.run([binary, "logits", "--model", str(path), "--tokens", ",".join(map(str, TOKENS)), "--out", str(out)],
                   check=True, capture_output=True)
    return mx.load(str(out))["logits"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("names", nargs="+")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    for name in args.names:
        path = Path(args.fixtures) / name
        model, _ = oracle.load(path)
        ref = [oracle.full_logits(model, TOKENS) for _ in range(2)]
        got = [ours(args.bin, path, tmp / f"{name}{i}.safetensors") for i in range(2)]
        same = lambda a, b: oracle.raw_bytes(a) == oracle.raw_bytes(b)
        diff = mx.abs(got[0].astype(mx.float32) - ref[0].astype(mx.float32))
        rows = [i for i in range(len(TOKENS)) if mx.any(diff[i] > 0).item()]
        print(f"{name}: mlx-lm repeatable {same(ref[0], ref[1])}, mlxrt repeatable {same(got[0], got[1])}, "
              f"mlxrt == mlx-lm {same(got[0], ref[0])}, rows differing {rows[:6]}, max |diff| {diff.max().item():.3g}")


if __name__ == "__main__":
    main()
