#!/usr/bin/env bash
# --batch-invariant on a CUDA machine without a package registry: installs the carried MLX wheels
# (bench/gpu/run.sh's env and install stages), then, on the GPU: the op probe, mlx-lm's own batch
# against its solo runs, mlxrt's rows (default and --batch-invariant) against `mlxrt generate`,
# tests/generate/test_batch_invariant.py, and the throughput bench. Logs go to $OUT.
# Usage (repository root): B=build/gpu-bundle MLXRT_BIN=build/mlxrt bench/batch_invariant/gpu_run.sh
# with B holding wheels/ and lib/ (bench/gpu/prepare.sh) and build/fixtures holding qwen3_bf16 and llama_bf16.
set -uo pipefail
B=${B:-build/gpu-bundle}
OUT=${OUT:-build/gpu-invariant-out}
mkdir -p "$OUT"
export MLXRT_VENV=${MLXRT_VENV:-$(python3 -c 'import sys; print(sys.prefix)')} MLXRT_WHEELS=$B/wheels \
  MLXRT_LIBS=$B/lib BENCH_OUT=$OUT/setup BENCH_WORK=/tmp/bi-work
bench/gpu/run.sh env install > "$OUT/setup.txt" 2>&1
PY=$MLXRT_VENV/bin/python3
[ -x "$PY" ] || PY=python3
site=$($PY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
nv=$(ls -d "$site"/nvidia/*/lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="${nv}$site/mlx/lib:$(cd "$B/lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=$(cd "$(dirname "${MLXRT_BIN:-build/mlxrt}")" && pwd)/$(basename "${MLXRT_BIN:-build/mlxrt}")
export MLXRT_BIN=$bin
$PY -c "import mlx.core as mx; print(mx.default_device())" > "$OUT/device.txt" 2>&1
"$bin" --help 2>&1 | head -2 >> "$OUT/device.txt"
$PY bench/batch_invariant/ops_probe.py > "$OUT/ops_probe.txt" 2>&1
$PY bench/batch_invariant/mlx_lm_solo_vs_batch.py build/fixtures/qwen3_bf16 build/fixtures/llama_bf16 \
  > "$OUT/mlx_lm_solo_vs_batch.txt" 2>&1
for m in qwen3_bf16 llama_bf16; do
  $PY bench/batch_invariant/solo_vs_batch.py --bin "$bin" --model build/fixtures/$m >> "$OUT/solo_vs_batch.txt" 2>&1
done
$PY -m pytest -q -p no:cacheprovider tests/generate/test_batch_invariant.py > "$OUT/pytest.txt" 2>&1
$PY bench/batch_invariant/bench.py --bin "$bin" --fixtures build/fixtures --out /tmp/bi-work/bench --runs 1 \
  > "$OUT/bench.txt" 2>&1
tail -n 3 "$OUT"/*.txt
