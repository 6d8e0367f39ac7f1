#!/usr/bin/env bash
# llama.cpp beside mlxrt and mlx-lm on one CUDA GPU, on the same weights (issue 14, item 4).
#
# A random model of Qwen3's dimensions (bench/gpu/models.py, bf16) goes through llama.cpp's own
# convert_hf_to_gguf.py (bf16 GGUF) and llama-quantize (Q8_0 and Q4_0, --pure: every matrix, the
# embedding and output head too, in the one type, so that all of it converts exactly); each GGUF
# then goes through `mlxrt convert --gguf` (lossless: float32 scales and norms) and
# bench/gpu/half_scales.py (the same values in float16). llama-bench times the GGUF, `mlxrt
# benchmark` and mlx_lm.benchmark the two MLX checkpoints, one after another in one run
# (bench/gpu/llama_cpp_bench.py): the table is printed last.
#
# Usage:
#   bench/gpu/llama_cpp.sh prepare [BUNDLE]   on x86-64 Linux with a package registry: BUNDLE (default
#       build-gpu-llama/bundle, under 64 MB) gets the pinned MLX wheels (the CUDA one slimmed to sm_90),
#       the Qwen3 tokenizer, an mlxrt binary (MLXRT_BIN, default build/mlxrt) with the libraries it
#       needs, and from the llama-cpp-python source distribution that versions.env pins, llama.cpp's
#       converter and its source (trimmed of models, docs, tests and other backends: 4 MB), which
#       the GPU machine builds (5.4 min there on 16 cores); or LLAMA_BIN_TARBALL=FILE, binaries an
#       earlier build there made (llama-bench, llama-quantize, their libraries; tar.xz), or, with
#       LLAMA_PREBUILD=1 and nvcc 13 here, built here (LLAMA_JOBS jobs, default 2: hours on two cores;
#       glibc must not be newer here than there).
#   bench/gpu/llama_cpp.sh run [BUNDLE]       on the GPU machine, BUNDLE carried along; no registry.
#       Installs the wheels into PYTHON's environment (default python3) unless it has them, builds
#       llama.cpp in the background (all cores; llama-bench with CUDA at a lower priority, llama-quantize
#       from a CPU-only build of its own), makes and converts the models meanwhile and times them.
# llama.cpp's build: CUDA for sm_90 only (CMAKE_CUDA_ARCHITECTURES=90-real: no PTX), only the
# targets llama-bench and llama-quantize, CPU code for x86-64 with AVX2 (GGML_NATIVE=OFF), no NCCL
# (one GPU), no OpenSSL; its defaults otherwise (the flash-attention kernels are built: llama-bench
# runs with -fa auto, which takes them on this GPU).
# Environment for `run`: LLAMA_SHAPES (default qwen3-8b; also qwen3-0.6b), LLAMA_QUANTS (default
# "q8_0 q4_0"), LLAMA_VARIANTS (default "f32 fp16"), BENCH_PROMPTS (512), BENCH_GEN (128),
# BENCH_RUNS (3), LLAMA_BENCH_ARGS (more options of llama_cpp_bench.py, default --l3: mlxrt at
# --fidelity l3 too, with its fidelity against l1; empty: l1 alone), LLAMA_WARM (1: compile MLX's run-time kernels on a tiny model of the same types
# while the large one converts), LLAMA_TIME_LIMIT (seconds the whole run may take: no timed program
# starts in its last 40; the float32 checkpoints are timed last), BENCH_OUT (default $OUT, else
# build-gpu-llama/out), BENCH_WORK (default build-gpu-llama/work), PYTHON (python3),
# CONVERTER_PYTHON (the Python with torch and transformers for llama.cpp's converter; PYTHON).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
source versions.env
mode=${1:?usage: llama_cpp.sh prepare|run [BUNDLE]}
bundle=${2:-$root/build-gpu-llama/bundle}
work=${BENCH_WORK:-$root/build-gpu-llama/work}

llama_cmake_flags=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real
  -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF '-DCMAKE_BUILD_RPATH=$ORIGIN')

# build_llama SRC BUILD JOBS TARGETS [CMAKE_FLAG...]: TARGETS (space-separated) into BUILD/bin.
build_llama() {
  PATH=/usr/local/cuda/bin:$PATH cmake -S "$1" -B "$2" "${llama_cmake_flags[@]}" "${@:5}"
  # shellcheck disable=SC2086  # TARGETS is a list
  PATH=/usr/local/cuda/bin:$PATH ninja -C "$2" -j "$3" $4
}

prepare() {
  local lw=${LLAMA_WORK:-$root/build-gpu-llama}
  local sdist=$lw/sdist src=$lw/src/vendor/llama.cpp llama=$bundle/llama
  rm -rf "$bundle/bin" "$bundle/lib"
  mkdir -p "$sdist" "$llama" "$bundle/wheels" "$bundle/tokenizer"
  if ! compgen -G "$sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" >/dev/null; then
    python3 -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$sdist" \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
  fi
  if [ ! -f "$lw/src/.version" ] || [ "$(cat "$lw/src/.version")" != "$LLAMA_CPP_PYTHON_VERSION" ]; then
    rm -rf "$lw/src" "$lw/llama-build"
    mkdir -p "$lw/src"
    tar -xzf "$sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$lw/src" --strip-components=1
    echo "$LLAMA_CPP_PYTHON_VERSION" > "$lw/src/.version"
  fi
  # The converter and the Python packages it imports.
  rm -rf "$llama/converter"
  tar -cJf "$llama/converter.tar.xz" -C "$src" convert_hf_to_gguf.py conversion gguf-py
  rm -f "$llama/bin.tar.xz" "$llama/src.tar.xz"
  if [ -n "${LLAMA_BIN_TARBALL:-}" ]; then
    # Binaries an earlier run built on the GPU machine (llama-bench, llama-quantize and their
    # libraries, for that machine's glibc): no build there.
    cp "$LLAMA_BIN_TARBALL" "$llama/bin.tar.xz"
  elif [ "${LLAMA_PREBUILD:-0}" = 1 ]; then
    build_llama "$src" "$lw/llama-build" "${LLAMA_JOBS:-2}" "llama-bench llama-quantize" >/dev/null
    local b=$lw/llama-build/bin
    # The CUDA library compresses to about a third: unpacked there.
    tar -cJf "$llama/bin.tar.xz" -C "$b" llama-bench llama-quantize $(cd "$b" && ls lib*.so*)
  else
    # What CMake reads for these two targets: no models, docs, tests, examples or other backends.
    tar -cJf "$llama/src.tar.xz" -C "$src" --exclude=./models --exclude=./docs --exclude=./media \
      --exclude=./.github --exclude=./benches --exclude=./tests --exclude=./examples --exclude=./pocs \
      --exclude=./app --exclude=./tools/server --exclude=./tools/ui --exclude=./gguf-py --exclude=./conversion \
      $(for b in vulkan sycl metal cann opencl webgpu zdnn zendnn hexagon openvino virtgpu et musa hip blas rpc; do
          echo "--exclude=./ggml/src/ggml-$b"; done) .
  fi

  # The MLX stack (as bench/gpu/prepare.sh, without the test-only wheels).
  local download=$lw/wheel-downloads
  mkdir -p "$download"
  python3 -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version "${TARGET_PYTHON:-3.12}" \
    --implementation cp --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$download" --no-deps \
    "mlx==$MLX_VERSION" "mlx-cuda-13==$MLX_VERSION" "mlx-lm==$MLX_LM_VERSION" "nvidia-cuda-crt==${TARGET_NVRTC:-13.0}.*"
  for w in "$download"/*.whl; do
    case "$(basename "$w")" in
      mlx_cuda_13-*) [ -f "$bundle/wheels/$(basename "$w")" ] || \
                       python3 tools/setup/slim_cuda_wheel.py "$w" "$bundle/wheels" --keep-sm 90 ;;
      *) cp "$w" "$bundle/wheels/" ;;
    esac
  done
  local tokenizer=${BENCH_TOKENIZER:-$root/../shared/data/tokenizers/qwen3}
  xz -9 -c "$tokenizer/tokenizer.json" > "$bundle/tokenizer/tokenizer.json.xz"
  cp "$tokenizer/tokenizer_config.json" "$bundle/tokenizer/"
  # mlxrt and the libraries it needs beyond glibc, libstdc++ and MLX's wheels, compressed (the
  # bundle must stay under 64 MB with llama.cpp's binaries in it).
  local binary=${MLXRT_BIN:-$root/build/mlxrt} stage=$lw/mlxrt-stage
  rm -rf "$stage"
  mkdir -p "$stage/bin" "$stage/lib"
  cp "$binary" "$stage/bin/mlxrt"
  ldd "$binary" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libmlx.so|liblapack*|libblas*|libopenblas*|libgfortran*|libquadmath*) ;;
      *) cp -L "$lib" "$stage/lib/" ;;
    esac
  done
  tar -cJf "$bundle/mlxrt.tar.xz" -C "$stage" bin lib
  (cd "$root" && git rev-parse --short HEAD) > "$bundle/source"
  du -sh "$bundle"/* "$bundle"/llama/*
  du -sb "$bundle"
}

# ---- on the GPU machine ----

out=${BENCH_OUT:-${OUT:-$root/build-gpu-llama/out}}
steps=$out/steps.log
py=${PYTHON:-python3}
converter_py=${CONVERTER_PYTHON:-$py}
t_start=$(date +%s)
# step NAME CMD...: CMD's output to $steps, its time to the summary; a failing CMD stops the script
# (as every command in it does: step must not be called from an `if` or `||`, where bash would
# ignore `set -e` inside CMD).
step() {
  local name=$1 t0 rc=0
  shift
  t0=$(date +%s)
  echo "== $name ($(( t0 - t_start )) s): $*" | cut -c1-300 | tee -a "$steps"
  ( "$@" ) >> "$steps" 2>&1 &
  wait $! || rc=$?
  printf '%-28s rc=%-3s %5d s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" | tee -a "$out/summary.txt"
  if [ $rc -ne 0 ]; then tail -n 25 "$steps"; fi
  return $rc
}

install_mlx() {
  if ! "$py" -c "import mlx.core as mx, mlx_lm; assert mx.__version__ == '$MLX_VERSION'" 2>/dev/null; then
    "$py" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile "$bundle"/wheels/*.whl
  fi
  "$py" -c "import mlx.core as mx; print('mlx', mx.__version__, mx.default_device()); \
w = mx.random.normal((256, 512)).astype(mx.float16); q = mx.quantize(w, group_size=32, bits=4); \
print('q4 g32 matmul', mx.quantized_matmul(mx.ones((8, 512), mx.float16), *q, group_size=32, bits=4).sum().item())"
}

env_info() {
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv || true
  nproc
  df -h "$work" | tail -1
  PATH=/usr/local/cuda/bin:$PATH; { nvcc --version | tail -1; cmake --version | head -1; ls /usr/local/cuda/lib64 | grep -E "cublas|cudart" | head -4; } || true
  echo "source $(cat "$bundle/source" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null)"
  "$py" -m pip list 2>/dev/null | grep -i -E '^(mlx|mlx-cuda-13|mlx-lm|transformers|torch|numpy|tokenizers|nvidia-cublas|nvidia-cuda-nvrtc|nvidia-cuda-runtime) ' || true
}

# llama.cpp's programs, built here (bundle with source) or unpacked (bundle with binaries), in the
# background: $work/llama/{quantize,bench}.rc say when each is ready and how its build ended.
# Built here: llama-quantize from a CPU-only build of its own (a minute; it quantizes on the CPU
# either way, with the same code), so that the GGUFs need not wait for the CUDA build of
# llama-bench, which runs at a lower priority beside the conversions.
llama_setup() {
  rm -rf "$work/llama"
  mkdir -p "$work/llama/bin" "$work/llama/qbin"
  if [ -f "$llama_dir/bin.tar.xz" ]; then
    tar -xJf "$llama_dir/bin.tar.xz" -C "$work/llama/bin"
    cp -P "$work/llama/bin"/* "$work/llama/qbin/"
    llama_wrappers llama-bench llama-quantize >> "$work/llama/ldd.txt"
    echo 0 > "$work/llama/quantize.rc"
    echo 0 > "$work/llama/bench.rc"
    return
  fi
  mkdir -p "$work/llama/src"
  tar -xJf "$llama_dir/src.tar.xz" -C "$work/llama/src"
  ( rc=0; build_llama "$work/llama/src" "$work/llama/build-cpu" "$(nproc)" "llama-quantize" -DGGML_CUDA=OFF \
      > "$work/llama/build-cpu.log" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then tail -n 30 "$work/llama/build-cpu.log" >> "$out/summary.txt"
    else cp -P "$work/llama/build-cpu/bin"/* "$work/llama/qbin/"; llama_wrappers llama-quantize > /dev/null; fi
    echo $rc > "$work/llama/quantize.rc" ) &
  ( t0=$(date +%s) rc=0
    renice -n 10 -p "$BASHPID" >/dev/null
    build_llama "$work/llama/src" "$work/llama/build" "$(nproc)" llama-bench > "$out/build.log" 2>&1 || rc=$?
    echo "llama.cpp CUDA build: rc=$rc, $(( $(date +%s) - t0 )) s" >> "$out/summary.txt"
    [ $rc -ne 0 ] || { cp -P "$work/llama/build/bin"/* "$work/llama/bin/"; llama_wrappers llama-bench >> "$work/llama/ldd.txt"; }
    echo $rc > "$work/llama/bench.rc" ) &
}

# wait_llama quantize|bench: until that program is there.
wait_llama() {
  while [ ! -f "$work/llama/$1.rc" ]; do sleep 2; done
  [ "$(cat "$work/llama/$1.rc")" = 0 ] || { echo "llama.cpp's build for $1 failed (build logs in $out)"; return 1; }
}

# Wrappers for llama.cpp's programs: the CUDA runtime and cuBLAS that libggml-cuda links, from where
# this machine has them (the toolkit's folder, else NVIDIA's Python wheels), for them alone (MLX
# finds its own).
llama_wrappers() {  # llama_wrappers EXE...
  local dirs= d exe dir
  if ldd "$work/llama/bin/llama-bench" "$work/llama/bin"/libggml-cuda.so* 2>/dev/null | grep -q "not found"; then
    for d in /usr/local/cuda/lib64 "$site"/nvidia/cu13/lib "$site"/nvidia/*/lib; do
      [ -d "$d" ] && dirs="$dirs${dirs:+:}$d"
    done
  fi
  for exe in "$@"; do
    dir=$work/llama/bin
    [ "$exe" = llama-quantize ] && dir=$work/llama/qbin
    [ -x "$dir/$exe" ] || continue
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
      "$dir${dirs:+:$dirs}" "$dir/$exe" > "$work/$exe"
    chmod +x "$work/$exe"
  done
  LD_LIBRARY_PATH="$work/llama/bin${dirs:+:$dirs}" ldd "$work/llama/bin/llama-bench" "$work/llama/bin"/libggml-cuda.so* 2>/dev/null \
    | grep -E "^/|cudart|cublas|ggml|llama|not found" || true
}

# hf_view MODEL_DIR OUT_DIR: the bf16 model as the converter reads a Hugging Face checkpoint (its
# files linked, config.json naming the architecture the converter dispatches on).
hf_view() {
  rm -rf "$2"
  mkdir -p "$2"
  for f in "$1"/*.safetensors "$1"/*.json; do ln -s "$f" "$2/"; done
  rm "$2/config.json"
  "$py" -c "import json, sys; c = json.load(open(sys.argv[1])); assert c['model_type'] == 'qwen3', c['model_type']
c['architectures'] = ['Qwen3ForCausalLM']; c['torch_dtype'] = 'bfloat16'; json.dump(c, open(sys.argv[2], 'w'), indent=1)" \
    "$1/config.json" "$2/config.json"
}

make_model() {
  "$py" -c "import sys; sys.path.insert(0, 'bench/gpu'); from pathlib import Path; import models
print(models.ensure_model(Path(sys.executable), Path('$work/models'), '$1', 'bf16', Path('$tokenizer')))"
}

# to_gguf SHAPE: the bf16 GGUF (llama.cpp's converter), then each of LLAMA_QUANTS (llama-quantize).
to_gguf() {
  local shape=$1 model=$work/models/$1-bf16 gguf=$work/gguf q
  mkdir -p "$gguf"
  hf_view "$model" "$work/hf/$shape"
  $converter_py "$work/converter/convert_hf_to_gguf.py" "$work/hf/$shape" --outtype bf16 \
    --outfile "$gguf/$shape-bf16.gguf"
  wait_llama quantize
  for q in $quants; do
    "$work/llama-quantize" --pure "$gguf/$shape-bf16.gguf" "$gguf/$shape-$q.gguf" "${q^^}" "$(nproc)"
  done
  # The disk holds 64 GB: the bf16 files go once quantized.
  if [ "${LLAMA_KEEP_BF16:-0}" != 1 ]; then rm -rf "$gguf/$shape-bf16.gguf" "$model" "$work/hf/$shape"; fi
  ls -l "$gguf"
}

# to_mlx SHAPE: each GGUF as MLX checkpoints: as `mlxrt convert --gguf` writes it (f32) and with its
# float32 arrays in float16 (fp16), the quantizations side by side.
to_mlx() {
  local shape=$1 q pids=() pid
  mkdir -p "$work/mlx"
  for q in $quants; do
    ( rm -rf "$work/mlx/$shape-$q" "$work/mlx/$shape-$q-fp16"
      "$work/mlxrt" convert --gguf "$work/gguf/$shape-$q.gguf" --out "$work/mlx/$shape-$q" --quiet
      if [[ " $variants " == *" fp16 "* ]]; then "$py" bench/gpu/half_scales.py "$work/mlx/$shape-$q" "$work/mlx/$shape-$q-fp16"; fi
      if [[ " $variants " != *" f32 "* ]]; then rm -rf "$work/mlx/$shape-$q"; fi ) &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  du -sh "$work/mlx"/"$shape"-*
  grep -h -A4 '"quantization"' "$work/mlx/$shape"-*/config.json | head -12
}

# The tiny model's kernels: MLX compiles its run-time kernels once per machine (NVRTC, tens of
# seconds each; keyed by types, bits and group size, not by the model's size) into
# MLX_PTX_CACHE_DIR, which the timed programs then read.
warm_kernels() {
  local m
  make_model tiny
  to_gguf tiny
  to_mlx tiny
  for m in "$work"/mlx/tiny-*; do
    "$work/mlxrt" benchmark --model "$m" -p "$prompt" -g 4 -n 1
    "$py" -m mlx_lm benchmark --model "$m" -p "$prompt" -g 4 -n 1
  done
}

run() {
  mkdir -p "$out" "$work"
  : > "$out/summary.txt"
  quants=${LLAMA_QUANTS:-q8_0 q4_0}
  variants=${LLAMA_VARIANTS:-f32 fp16}
  prompt=${BENCH_PROMPTS:-512}
  export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
  # One kernel cache for mlxrt and mlx-lm (mlxrt's own default is another folder).
  export MLX_PTX_CACHE_DIR=${MLX_PTX_CACHE_DIR:-$work/ptx}
  # Kernels an earlier run compiled (its $OUT/ptx-cache.tgz, put in the bundle): their compiles saved.
  mkdir -p "$MLX_PTX_CACHE_DIR"
  if [ -f "$bundle/ptx-cache.tgz" ]; then tar -xzf "$bundle/ptx-cache.tgz" -C "$MLX_PTX_CACHE_DIR"; fi
  site=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  llama_dir=$bundle/llama
  llama_setup
  step env env_info
  step install install_mlx
  tokenizer=$work/tokenizer
  mkdir -p "$tokenizer"
  xz -dc "$bundle/tokenizer/tokenizer.json.xz" > "$tokenizer/tokenizer.json"
  cp "$bundle/tokenizer/tokenizer_config.json" "$tokenizer/"
  rm -rf "$work/mlxrt-bundle" "$work/converter"
  mkdir -p "$work/mlxrt-bundle" "$work/converter"
  tar -xJf "$bundle/mlxrt.tar.xz" -C "$work/mlxrt-bundle"
  tar -xJf "$llama_dir/converter.tar.xz" -C "$work/converter"
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
    "$site/mlx/lib:$work/mlxrt-bundle/lib" "$work/mlxrt-bundle/bin/mlxrt" > "$work/mlxrt"
  chmod +x "$work/mlxrt"
  local warm_pid= shape q cases=()
  if [ "${LLAMA_WARM:-1}" = 1 ] && [[ " ${LLAMA_SHAPES:-qwen3-8b} " != *" tiny "* ]]; then
    ( steps=$out/warm.log; step warm-kernels warm_kernels ) &
    warm_pid=$!
  fi
  for shape in ${LLAMA_SHAPES:-qwen3-8b}; do
    step "make $shape" make_model "$shape"
    step "gguf $shape" to_gguf "$shape"
    step "mlx $shape" to_mlx "$shape"
  done
  step "wait for llama-bench" wait_llama bench
  cat "$work/llama/ldd.txt" >> "$steps"
  if [ -n "$warm_pid" ]; then wait "$warm_pid" || echo "kernel warm-up failed (warm.log): the benchmarks' own warm-up runs compile"; fi
  for shape in ${LLAMA_SHAPES:-qwen3-8b}; do
    for q in $quants; do
      local dirs=()
      if [[ " $variants " == *" fp16 "* ]]; then dirs+=("$work/mlx/$shape-$q-fp16"); fi
      if [[ " $variants " == *" f32 "* ]]; then dirs+=("$work/mlx/$shape-$q"); fi
      cases+=(--case "$shape-$q" "$work/gguf/$shape-$q.gguf" "$(IFS=,; echo "${dirs[*]}")")
    done
  done
  echo "== bench ($(( $(date +%s) - t_start )) s)"
  "$py" bench/gpu/llama_cpp_bench.py --llama-bench "$work/llama-bench" --mlxrt "$work/mlxrt" --out "$out" \
    --prompt "$prompt" --gen "${BENCH_GEN:-128}" --runs "${BENCH_RUNS:-3}" "${cases[@]}" \
    ${LLAMA_TIME_LIMIT:+--deadline $(( t_start + LLAMA_TIME_LIMIT - 40 ))} ${LLAMA_BENCH_ARGS---l3}
  tar -czf "$out/ptx-cache.tgz" -C "$MLX_PTX_CACHE_DIR" .
  echo "== total $(( $(date +%s) - t_start )) s"
  cat "$out/summary.txt"
}

case $mode in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: llama_cpp.sh prepare|run [BUNDLE]" >&2; exit 2 ;;
esac
