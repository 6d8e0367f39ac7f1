#!/usr/bin/env bash
# Builds (or takes) mlxrt, checks L1 parity against mlx-lm on this machine's MLX device (the GPU
# with the CUDA wheel), times mlxrt against mlx-lm and profiles one decode step. Each stage logs to
# OUT/<stage>.log; a short table comes last. How anyone re-measures: see bench/RESULTS.md.
#
# Usage: bench/gpu/run.sh [STAGE ...]   run in the order given (default: env install build kernels bench
#        checks profile parity; `checks` also compares logits on the models `bench` made; `kernels`
#        runs the CUDA kernels' tests against the ops path they replace; `batching`, not in the
#        default list, runs bench/batch_bench.py: mlxrt server vs mlx_lm.server under concurrent
#        streaming clients on the benchmark models; `batchgen` the batch generator alone,
#        bench/batch_generate_bench.py)
# Environment (all optional):
#   MLX_BACKEND      cpu | cuda-13 (default: cuda-13 when nvidia-smi sees a GPU)
#   MLXRT_VENV       Python environment holding, or to receive, the MLX wheels (default .venv)
#   MLXRT_WHEELS     folder of wheels to install from, without a package registry (prepare.sh)
#   MLXRT_BIN        an mlxrt built elsewhere (default: build one into build-gpu/)
#   MLXRT_LIBS       folder of shared libraries that binary needs beyond the system's (prepare.sh)
#   BENCH_OUT        logs and results (default: $OUT when set, else build-gpu/bench-out)
#   BENCH_WORK       models, fixtures (default build-gpu/work)
#   BENCH_TOKENIZER  folder with tokenizer.json and tokenizer_config.json (default: shared data)
#   BENCH_SHAPES, BENCH_QUANTS, BENCH_PROMPTS, BENCH_GEN, BENCH_RUNS, BENCH_BW_GIB   bench.py's options
#   BENCH_PROFILE_MODEL   model (under BENCH_WORK/models) whose decode step is profiled
#   BENCH_PROFILE_ARGS    profile_decode.py's options (default: --prompt 64 --steps 1 3)
#   BENCH_PYTEST_TIMEOUT  seconds for tests/parity (default 1200)
#   BENCH_PYTEST_JOBS     parallel pytest processes for tests/parity when pytest-xdist is there (default 8)
#   BENCH_FIXTURES   fixture names to make (make_fixtures.py --only; default: all of them)
#   BENCH_PYTEST_K   a pytest -k expression choosing the parity cases (default: all)
#   BENCH_BATCH_MODELS  benchmark models (shape-quant) for `batching` (default: qwen3-0.6b-bf16 qwen3-8b-bf16)
#   BENCH_BATCH_ARGS    batch_bench.py's options (default: --clients 8 32 --gen-tokens 128 --runs 2)
#   BENCH_BATCHGEN_ARGS batch_generate_bench.py's options (default: --batch 8 --gen-tokens 256)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
source versions.env
stages=${*:-env install build kernels bench checks profile parity}
out=${BENCH_OUT:-${OUT:-$root/build-gpu/bench-out}}
work=${BENCH_WORK:-$root/build-gpu/work}
mkdir -p "$out" "$work"
backend=${MLX_BACKEND:-$(nvidia-smi -L >/dev/null 2>&1 && echo cuda-13 || echo cpu)}
export MLXRT_VENV=${MLXRT_VENV:-$root/.venv}
tokenizer=${BENCH_TOKENIZER:-$root/../shared/data/tokenizers/qwen3}
# A bundle's tokenizer.json comes compressed (prepare.sh): unpacked once beside the work folder.
if [ ! -f "$tokenizer/tokenizer.json" ] && [ -f "$tokenizer/tokenizer.json.xz" ]; then
  mkdir -p "$work/tokenizer"
  xz -dc "$tokenizer/tokenizer.json.xz" > "$work/tokenizer/tokenizer.json" || exit 1
  cp "$tokenizer/tokenizer_config.json" "$work/tokenizer/"
  tokenizer=$work/tokenizer
fi
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
python_bin() { if [ -x "$MLXRT_VENV/bin/python" ]; then echo "$MLXRT_VENV/bin/python"; else echo "$MLXRT_VENV/bin/python3"; fi; }
py() { "$(python_bin)" "$@"; }
summary="$out/summary.txt"
: > "$summary"

# stage NAME CMD...: runs CMD with its output in OUT/NAME.log; records status and time.
stage() {
  local name=$1 t0 rc
  shift
  t0=$(date +%s%N)
  echo "== $name: $*" | cut -c1-200
  "$@" > "$out/$name.log" 2>&1
  rc=$?
  printf '%-10s rc=%-3s %6d s\n' "$name" "$rc" "$(( ($(date +%s%N) - t0) / 1000000000 ))" | tee -a "$summary"
  [ $rc -ne 0 ] && tail -n 15 "$out/$name.log"
  return $rc
}

env_info() {
  date -u +%Y-%m-%dT%H:%M:%SZ
  uname -a
  nvidia-smi || true
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv || true
  echo "backend $backend; python env $MLXRT_VENV; source $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo '+uncommitted')"
  py --version
  command -v ncu nvcc cmake ninja g++ || true
}

smoke() {
  py -c "import mlx.core as mx; print('mlx', mx.__version__, 'default device', mx.default_device()); \
print('sum', (mx.arange(1, 1025) ** 2).sum().item())"
  # A kernel MLX compiles at run time on the GPU (8-bit quantized matmul over several rows): it
  # needs the CRT headers that install-python-env.sh adds.
  py -c "import mlx.core as mx; w = mx.random.normal((256, 512)).astype(mx.bfloat16); \
x = mx.random.normal((8, 512)).astype(mx.bfloat16); q = mx.quantize(w, group_size=128, bits=8); \
print('q8 g128 matmul', mx.quantized_matmul(x, *q, group_size=128, bits=8).astype(mx.float32).sum().item())"
}

install_env() {
  if ! tools/setup/install-python-env.sh "$backend"; then
    [ -n "${MLXRT_WHEELS:-}" ] || return 1
    # What the environment holds did not satisfy a requirement: say which, then take the wheels as
    # they are (the CUDA libraries' versions show in the list below).
    echo "install-python-env.sh failed; installing the carried wheels without their requirements"
    py -m pip install -q --no-index --no-deps "$MLXRT_WHEELS"/*.whl || return 1
  fi
  py -m pip list 2>/dev/null | grep -i -E '^(mlx|mlx-cpu|mlx-cuda-13|mlx-lm|transformers|numpy|pytest|nvidia-[a-z0-9-]+) '
  if ! smoke; then
    # libmlx finds NVIDIA's libraries beside it (its RPATH); elsewhere, name their folders.
    local libs
    libs=$(ls -d "$(site)"/nvidia/*/lib 2>/dev/null | tr '\n' ':')
    export LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:-}"
    echo "retrying with LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    smoke || return 1
  fi
}

site() { py -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }

build() {
  # CMake's lookup of this environment's MLX (cmake/mlx_wheel.cmake) with a small program.
  cmake -S bench/gpu/cmake_probe -B "$work/cmake-probe" -DMLXRT_VENV="$MLXRT_VENV" -DCMAKE_BUILD_TYPE=Release \
    && cmake --build "$work/cmake-probe" && "$work/cmake-probe/mlx_probe" || return 1
  if [ -n "${MLXRT_BIN:-}" ]; then
    # A binary built elsewhere against the same MLX version: this environment's libmlx replaces the
    # one it was linked with (the same C++ API); a wrapper gives it that and MLXRT_LIBS.
    local lib
    lib="$(site)/mlx/lib${MLXRT_LIBS:+:$(cd "$MLXRT_LIBS" && pwd)}"
    local exe
    for exe in mlxrt mlxrt_cuda_kernel_tests mlxrt_qmv_bench mlxrt_layer_bench mlxrt_availability_probe; do
      local from="$(cd "$(dirname "$MLXRT_BIN")" && pwd)/$exe"
      [ "$exe" = mlxrt ] && from="$(cd "$(dirname "$MLXRT_BIN")" && pwd)/$(basename "$MLXRT_BIN")"
      [ -x "$from" ] || continue
      printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' "$lib" "$from" > "$work/$exe"
      chmod +x "$work/$exe"
    done
    LD_LIBRARY_PATH=$lib ldd "$MLXRT_BIN"
  else
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLXRT_VENV="$MLXRT_VENV" \
      && cmake --build build-gpu --target mlxrt mlxrt_cuda_kernel_tests && ln -sf "$root/build-gpu/mlxrt" "$work/mlxrt" \
      && ln -sf "$root/build-gpu/mlxrt_cuda_kernel_tests" "$work/mlxrt_cuda_kernel_tests" || return 1
    ldd build-gpu/mlxrt
  fi
  "$work/mlxrt" --help | head -3
}

# The fused CUDA kernels against the ops path they replace, byte for byte (tests/gpu).
kernels() { "$work/mlxrt_cuda_kernel_tests"; }

fixtures() { py tools/make_fixtures.py --out "$work/fixtures" ${BENCH_FIXTURES:+--only $BENCH_FIXTURES}; }

# The 128-token greedy runs, mlx-lm's own determinism, and logits on the benchmark models made
# so far (all but the 8B ones, whose logits rows are large).
checks() {
  fixtures || return 1
  local models=()
  for m in "$work"/models/*/; do [ -f "$m/recipe.json" ] && [[ "$m" != *8b* ]] && models+=("${m%/}"); done
  py bench/gpu/gpu_checks.py --bin "$work/mlxrt" --fixtures "$work/fixtures" --models "${models[@]}" \
    --out "$out/gpu_checks.json"
}

parity() {
  fixtures || return 1
  # Spread the cases over processes where pytest-xdist is there: most of a case's time is MLX
  # compiling kernels on the host (NVRTC), and the kernel cache on disk is shared.
  local jobs=()
  py -c 'import xdist' 2>/dev/null && jobs=(-n "${BENCH_PYTEST_JOBS:-8}")
  MLXRT_BIN="$work/mlxrt" MLXRT_FIXTURES="$work/fixtures" MLXRT_SOURCE_DIR="$root" MLXRT_FIXTURE_NAMES="${BENCH_FIXTURES:-}" \
    timeout "${BENCH_PYTEST_TIMEOUT:-1200}" "$(python_bin)" -m pytest -v -rf --tb=short --durations=10 \
    -p no:cacheprovider "${jobs[@]}" ${BENCH_PYTEST_K:+-k "$BENCH_PYTEST_K"} tests/parity
}

bench() {
  py bench/gpu/bench.py --bin "$work/mlxrt" --out "$out" --work "$work/models" --tokenizer "$tokenizer" \
    --shapes ${BENCH_SHAPES:-qwen3-0.6b qwen3-8b} --quants ${BENCH_QUANTS:-bf16 q4} \
    --prompts ${BENCH_PROMPTS:-512 4096} --gen "${BENCH_GEN:-256}" --runs "${BENCH_RUNS:-3}" \
    --bw-gib "${BENCH_BW_GIB:-4}"
}

profile() {
  local model=$work/models/${BENCH_PROFILE_MODEL:-qwen3-0.6b-bf16} step_ms
  step_ms=$(py -c "import json,sys; r=json.load(open('$out/results.json'))
print(next((1e3 / x['mlxrt']['gen_tps'] for x in r['runs'] if x['model'] == '$(basename "$model")'), ''))" 2>/dev/null)
  # shellcheck disable=SC2086  # BENCH_PROFILE_ARGS is a list of options
  py bench/gpu/profile_decode.py --bin "$work/mlxrt" --model "$model" --out "$out" ${step_ms:+--step-ms "$step_ms"} \
    ${BENCH_PROFILE_ARGS:---prompt 64 --steps 1 3}
}

# Continuous batching: aggregate tok/s and TTFT under 8 and 32 streaming clients, both servers on
# the same benchmark model (made here on first use, as `bench` makes it).
# bench_model NAME: the benchmark model NAME (shape-quant), made on first use; prints its directory.
bench_model() {
  local shape=${1%-*} quant=${1##*-}
  py -c "import sys; sys.path.insert(0, 'bench/gpu'); from pathlib import Path; import models
print(models.ensure_model(Path(sys.executable), Path('$work/models'), '$shape', '$quant', Path('$tokenizer')))"
}

batching() {
  local m path
  for m in ${BENCH_BATCH_MODELS:-qwen3-0.6b-bf16 qwen3-8b-bf16}; do
    path=$(bench_model "$m") || return 1
    echo "== $m"
    # shellcheck disable=SC2086  # BENCH_BATCH_ARGS is a list of options
    MLXRT_BIN="$work/mlxrt" py bench/batch_bench.py --model "$path" ${BENCH_BATCH_ARGS:---clients 8 32 --gen-tokens 128 --runs 2} || return 1
  done
}

# The batch generator alone, no server: `mlxrt batch-generate` against mlx-lm's BatchGenerator,
# per-step times over the generation (bench/batch_generate_bench.py).
batchgen() {
  local m path
  for m in ${BENCH_BATCH_MODELS:-qwen3-0.6b-bf16 qwen3-8b-bf16}; do
    path=$(bench_model "$m") || return 1
    echo "== $m"
    # shellcheck disable=SC2086  # BENCH_BATCHGEN_ARGS is a list of options
    py bench/batch_generate_bench.py --model "$path" --mlxrt "$work/mlxrt" --log-dir "$work/batchgen-$m" \
      ${BENCH_BATCHGEN_ARGS:---batch 8 --gen-tokens 256} || return 1
  done
}

for s in $stages; do
  case $s in
    env) stage env env_info ;;
    install|build) stage "$s" "${s/install/install_env}" || { echo "$s failed: stopping"; exit 1; } ;;
    kernels|checks|parity|bench|profile|batching|batchgen) stage "$s" "$s" ;;
    *) echo "unknown stage $s (env install build kernels bench checks profile parity batching batchgen)"; exit 2 ;;
  esac
done

echo
echo "== summary ($out)"
cat "$summary"
grep -h -E '^\[  (PASSED|FAILED) ' "$out/kernels.log" 2>/dev/null
grep -h -E '^FAILED|passed|failed' "$out/parity.log" 2>/dev/null | tail -12
grep -h '^gpu_checks:' "$out/checks.log" 2>/dev/null
[ -f "$out/profile.log" ] && tail -n 14 "$out/profile.log"
[ -f "$out/table.txt" ] && cat "$out/table.txt"
grep -h -E '^(== |clients|[0-9]+ +(tok_s|ttft|errors))' "$out/batching.log" 2>/dev/null
grep -h -E '^(== |model |\||decode tok)' "$out/batchgen.log" 2>/dev/null
