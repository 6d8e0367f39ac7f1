#!/usr/bin/env bash
# Issue 19 on a CUDA machine without a package registry, with the bundle of bench/gpu/prepare.sh:
# installs the carried wheels (run.sh env install), then the steps named in EXACT_STEPS (default
# "probe tests spec"): probe: bench/gpu/exact_probe.py (which ops give a row of an M-row call a
# one-row call's bytes); tests: the --spec-exact and speculative tests with this binary;
# spec: bench/gpu/spec_bench.py (speculation on the 8B-dims model, mlxrt beside mlx-lm, and the
# 0.6B-dims model's exact check). Logs and tables go to $OUT (a few files: what a device call
# brings back), the rest to $BENCH_WORK.
# Usage (repository root): [B=build-gpu/bundle] [EXACT_STEPS="probe tests spec"] bench/gpu/exact_run.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
B=${B:-build-gpu/bundle}
out=${OUT:-build-gpu/exact-out}
work=${BENCH_WORK:-/tmp/exact-work}
mkdir -p "$out" "$work"
export MLXRT_VENV=${MLXRT_VENV:-$(python3 -c 'import sys; print(sys.prefix)')} MLXRT_WHEELS=$B/wheels \
  MLXRT_LIBS=$B/lib MLXRT_BIN=$B/bin/mlxrt BENCH_OUT=$work/setup BENCH_WORK=$work PYTHONUNBUFFERED=1 \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# One kernel cache for every process (mlx-lm, the tests' oracle, and mlxrt): NVRTC once per kernel.
export MLX_PTX_CACHE_DIR=${MLX_PTX_CACHE_DIR:-$work/ptx}
t0=$(date +%s)
bench/gpu/run.sh env install build > "$out/setup.txt" 2>&1
cat "$work/setup/summary.txt" >> "$out/setup.txt"
grep -q '^build *rc=0' "$work/setup/summary.txt" || { tail -30 "$out/setup.txt"; exit 1; }
PY=$MLXRT_VENV/bin/python3
[ -x "$PY" ] || PY=python3
echo "setup $(( $(date +%s) - t0 )) s"
bin=$work/mlxrt  # run.sh's wrapper: this environment's libmlx and the bundle's libraries
mkdir -p "$work/tokenizer"
xz -dc "$B/tokenizer/tokenizer.json.xz" > "$work/tokenizer/tokenizer.json" && cp "$B/tokenizer/tokenizer_config.json" "$work/tokenizer/"
# The fixtures' Qwen3 tokenizer where the shared data folder did not come along (the text cases,
# which need others, are left out then).
shared=$root/../shared
select=()
if [ ! -d "$shared/data/tokenizers/qwen3" ]; then
  mkdir -p "$shared/data/tokenizers/qwen3" && cp "$work/tokenizer/"* "$shared/data/tokenizers/qwen3/"
  select=(-k "not text")
fi
model_dir() {
  $PY -c "import sys; sys.path.insert(0, 'bench/gpu'); from pathlib import Path; import models
print(models.ensure_model(Path(sys.executable), Path('$work/models'), '${1%-*}', '${1##*-}', Path('$work/tokenizer')))"
}
jobs=()
$PY -c 'import xdist' 2>/dev/null && jobs=(-n "${EXACT_JOBS:-8}")
testenv=(MLXRT_BIN="$bin" MLXRT_FIXTURES="$work/fixtures" MLXRT_SOURCE_DIR="$root" MLXRT_SHARED_DIR="$root/../shared")
for step in ${EXACT_STEPS:-probe tests spec}; do
  case $step in
    probe)
      $PY bench/gpu/exact_probe.py > "$out/exact_probe.txt" 2>&1
      grep -E 'DIFFERS|SUMMARY|Error' "$out/exact_probe.txt" | cut -c1-150
      echo "probe $(( $(date +%s) - t0 )) s" ;;
    tests)
      env "${testenv[@]}" timeout "${EXACT_TEST_TIMEOUT:-420}" $PY -m pytest -q -rf --tb=short -p no:cacheprovider "${jobs[@]}" \
        tests/generate/test_spec_exact.py tests/generate/test_speculative_parity.py "${select[@]}" \
        > "$out/tests_generate.txt" 2>&1
      tail -n 25 "$out/tests_generate.txt" | grep -E 'FAILED|ERROR|passed|failed' | cut -c1-220
      env "${testenv[@]}" timeout 180 $PY -m pytest -q -rf --tb=short -p no:cacheprovider \
        tests/server/test_spec_exact_server.py > "$out/tests_server.txt" 2>&1
      tail -n 15 "$out/tests_server.txt" | grep -E 'FAILED|ERROR|passed|failed' | cut -c1-220
      echo "tests $(( $(date +%s) - t0 )) s" ;;
    spec)
      # shellcheck disable=SC2086  # SPEC_ARGS is a list of options
      $PY bench/gpu/spec_bench.py --bin "$bin" --work "$work/models" --tokenizer "$work/tokenizer" --out "$work/spec" \
        ${SPEC_ARGS:---main qwen3-8b-bf16 --drafts qwen3-8b-q4 qwen3-0.6b-bf16} > "$out/spec.txt" 2>&1
      tail -n 12 "$out/spec.txt"
      echo "spec $(( $(date +%s) - t0 )) s" ;;
    spec_small)
      $PY bench/gpu/spec_bench.py --bin "$bin" --work "$work/models" --tokenizer "$work/tokenizer" --out "$work/spec" \
        --main qwen3-0.6b-bf16 --drafts qwen3-0.6b-q4 --prompt 300 --gen 128 --runs 1 --skip-mlx-lm --exact-check \
        > "$out/spec_small.txt" 2>&1
      tail -n 8 "$out/spec_small.txt"
      echo "spec_small $(( $(date +%s) - t0 )) s" ;;
    determinism)
      # Is MLX's CUDA run-to-run variation past 256 keys cuDNN's attention, or the CUDA graphs? The
      # prefill twice in one process (shape_cost.py's control) and two one-token decodes against
      # --spec-exact with a draft, under each switch.
      for sw in default MLX_USE_CUDA_GRAPHS=0 MLX_CUDA_USE_CUDNN_SDPA=0; do
        envs=(); [ "$sw" != default ] && envs=("$sw")
        echo "== $sw" >> "$out/determinism.txt"
        env "${envs[@]}" $PY bench/gpu/shape_cost.py bytes "$(model_dir qwen3-0.6b-bf16)" \
          --lengths 64 256 501 778 1501 2>&1 | grep -E 'plain again|end to end' >> "$out/determinism.txt"
        env "${envs[@]}" $PY bench/gpu/spec_bench.py --bin "$bin" --work "$work/models" --tokenizer "$work/tokenizer" \
          --out "$work/spec-$sw" --main qwen3-0.6b-bf16 --drafts qwen3-0.6b-q4 --prompt 300 --gen 64 \
          --exact-only --exact-check 2>&1 | grep '^bytes' >> "$out/determinism.txt"
      done
      grep -E '^==|end to end|^bytes' "$out/determinism.txt"
      echo "determinism $(( $(date +%s) - t0 )) s" ;;
    *) echo "unknown step $step (probe tests spec spec_small determinism)"; exit 2 ;;
  esac
done
