#!/usr/bin/env bash
# Issue 14: what a prefill at a new length costs MLX's CUDA backend, and whether mlxrt's padded
# prefill attention keeps the bytes. On a CUDA machine without a package registry, with the bundle
# of bench/gpu/prepare.sh: installs the carried wheels (run.sh env install), makes the benchmark
# models, builds api_timer.so, then runs bench/gpu/shape_cost.py under MLX's switches. Logs: $OUT.
# Usage (repository root): [B=build-gpu/bundle] [SC_STEPS="costs bytes switches"] bench/gpu/shape_cost.sh
# Steps: costs (the per-length table, cold and warm kernel cache), switches (MLX's switches and the
# padded attention), bytes (padded against plain: on the op, and end to end on each model after a
# plain-against-plain control), control (the end-to-end check on the bf16 model alone).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
B=${B:-build-gpu/bundle}
out=${OUT:-build-gpu/shape-cost}
work=${BENCH_WORK:-/tmp/shape-cost}
mkdir -p "$out" "$work"
export MLXRT_VENV=${MLXRT_VENV:-$(python3 -c 'import sys; print(sys.prefix)')} MLXRT_WHEELS=$B/wheels \
  BENCH_OUT=$out/setup BENCH_WORK=$work PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export MLX_PTX_CACHE_DIR=${MLX_PTX_CACHE_DIR:-$work/ptx}
t0=$(date +%s)
bench/gpu/run.sh env install > "$out/setup.txt" 2>&1
grep -q '^install *rc=0' "$out/setup/summary.txt" || { tail -20 "$out/setup.txt"; exit 1; }
PY=$MLXRT_VENV/bin/python3
[ -x "$PY" ] || PY=python3
echo "setup $(( $(date +%s) - t0 )) s"
mkdir -p "$work/tokenizer"
xz -dc "$B/tokenizer/tokenizer.json.xz" > "$work/tokenizer/tokenizer.json" && cp "$B/tokenizer/tokenizer_config.json" "$work/tokenizer/"
${CC:-gcc} -O2 -shared -fPIC -o "$work/api_timer.so" bench/gpu/api_timer.c -ldl || exit 1
model() {
  $PY -c "import sys; sys.path.insert(0, 'bench/gpu'); from pathlib import Path; import models
print(models.ensure_model(Path(sys.executable), Path('$work/models'), '${1%-*}', '${1##*-}', Path('$work/tokenizer')))"
}
L=${SC_LENGTHS:-512 512 500 500 520 520 1000 1000 1500 1500 64 64 777 777 2047 2047}
# costs MODEL LABEL [ENV=VALUE ...] [-- shape_cost.py options]
costs() {
  local m=$1 label=$2 envs=() opts=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ "${1:-}" = -- ] && { shift; opts=("$@"); }
  env "${envs[@]}" SHAPE_COST_LABEL="$label" LD_PRELOAD="$work/api_timer.so" API_TIMER="$work/api_timer.so" \
    $PY bench/gpu/shape_cost.py costs "$work/models/$m" --lengths $L --json "$out/costs.jsonl" "${opts[@]}" \
    >> "$out/costs.txt" 2>&1
  grep '^SUMMARY' "$out/costs.txt" | tail -1 | cut -c9-
}
for step in ${SC_STEPS:-costs bytes switches}; do
  case $step in
    costs)
      for m in ${SC_MODELS:-qwen3-0.6b-q4 qwen3-0.6b-bf16}; do model "$m" >> "$out/models.txt" 2>&1 || exit 1; done
      echo "models $(( $(date +%s) - t0 )) s"
      costs qwen3-0.6b-q4 cold-ptx-cache
      ls "$MLX_PTX_CACHE_DIR" > "$out/ptx_cache_files.txt"
      costs qwen3-0.6b-q4 default
      costs qwen3-0.6b-bf16 default
      echo "costs $(( $(date +%s) - t0 )) s" ;;
    switches)
      costs qwen3-0.6b-q4 no-cudnn-sdpa MLX_CUDA_USE_CUDNN_SDPA=0
      costs qwen3-0.6b-q4 no-cuda-graphs MLX_USE_CUDA_GRAPHS=0
      costs qwen3-0.6b-q4 pad256 -- --pad-sdpa 256
      echo "switches $(( $(date +%s) - t0 )) s" ;;
    bytes)
      $PY bench/gpu/shape_cost.py bytes --op-heads 16 8 32 8 2>&1 | tee -a "$out/bytes.txt"
      for m in ${SC_MODELS:-qwen3-0.6b-q4 qwen3-0.6b-bf16}; do
        $PY bench/gpu/shape_cost.py bytes "$work/models/$m" 2>&1 | grep -v '^\[transformers\]' | tee -a "$out/bytes.txt"
      done
      echo "bytes $(( $(date +%s) - t0 )) s" ;;
    control)
      $PY bench/gpu/shape_cost.py bytes "$work/models/qwen3-0.6b-bf16" 2>&1 | grep -v '^\[transformers\]' | tee -a "$out/bytes.txt"
      echo "control $(( $(date +%s) - t0 )) s" ;;
  esac
done
