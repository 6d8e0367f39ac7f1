#!/usr/bin/env bash
# `make demo`: the main job on a model made on the spot (a tiny random qwen3 from mlx-lm), until
# a real default model ships: generation with the streamed tokens and mlx_lm's footer.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
models="$root/.cache/demo-models"
"$root/.venv/bin/python" "$root/tools/make_fixtures.py" --out "$models" --only qwen3_bf16
"$root/$build/mlxrt" generate --model "$models/qwen3_bf16" --prompt-tokens 1,17,300,42,5 --max-tokens 32
