# Sourced (from the repository root) by the device scripts that run on a CUDA machine without a
# package registry (exact_run.sh, l3_run.sh), with B (the bundle of bench/gpu/prepare.sh), `out`
# (logs and tables: what a device call brings back) and `work` (the rest) set. Installs the
# carried wheels and wraps the binary (run.sh env install build), keeps MLX's compiled kernels in
# $MLX_PTX_CACHE_DIR, one cache for every process (mlx-lm, the tests' oracle and mlxrt: NVRTC once
# per kernel), unpacking PTX_TARBALL (default build-gpu/ptx-cache.tgz) there first when present and
# writing $out/ptx-cache.tgz at exit, so a later call on a fresh machine need not compile them
# again; unpacks the bundle's tokenizer into $work/tokenizer. Sets PY (the environment's python)
# and t0 (the start, for the steps' timings); exits when the setup failed.
mkdir -p "$out" "$work"
export MLXRT_VENV=${MLXRT_VENV:-$(python3 -c 'import sys; print(sys.prefix)')} MLXRT_WHEELS=$B/wheels \
  MLXRT_LIBS=$B/lib MLXRT_BIN=$B/bin/mlxrt BENCH_OUT=$work/setup BENCH_WORK=$work PYTHONUNBUFFERED=1 \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export MLX_PTX_CACHE_DIR=${MLX_PTX_CACHE_DIR:-$work/ptx}
ptx_tarball=${PTX_TARBALL:-build-gpu/ptx-cache.tgz}
[ -f "$ptx_tarball" ] && mkdir -p "$MLX_PTX_CACHE_DIR" && tar xzf "$ptx_tarball" -C "$MLX_PTX_CACHE_DIR"
save_ptx() { [ -d "$MLX_PTX_CACHE_DIR" ] && tar czf "$out/ptx-cache.tgz" -C "$MLX_PTX_CACHE_DIR" .; }
trap save_ptx EXIT
t0=$(date +%s)
bench/gpu/run.sh env install build > "$out/setup.txt" 2>&1
cat "$work/setup/summary.txt" >> "$out/setup.txt"
grep -q '^build *rc=0' "$work/setup/summary.txt" || { tail -30 "$out/setup.txt"; exit 1; }
PY=$MLXRT_VENV/bin/python3
[ -x "$PY" ] || PY=python3
echo "setup $(( $(date +%s) - t0 )) s"
mkdir -p "$work/tokenizer"
xz -dc "$B/tokenizer/tokenizer.json.xz" > "$work/tokenizer/tokenizer.json" && cp "$B/tokenizer/tokenizer_config.json" "$work/tokenizer/"
