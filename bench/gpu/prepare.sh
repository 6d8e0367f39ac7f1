#!/usr/bin/env bash
# Packs what bench/gpu/run.sh needs on a CUDA machine that reaches no package registry, on a machine
# that does (x86-64 Linux): the pinned wheels for that machine's Python (the CUDA wheel slimmed to
# the GPU code of the chosen compute capabilities), the Qwen3 tokenizer files, and an mlxrt binary
# with the shared libraries it needs beyond glibc and libstdc++.
#
# Usage: bench/gpu/prepare.sh [BUNDLE]   (default build-gpu/bundle)
# Environment: TARGET_PYTHON (default 3.12), KEEP_SM (default "90": H100/H200),
#              TARGET_NVRTC (the target's nvidia-cuda-nvrtc release, default 13.0),
#              MLXRT_BIN (default build-gpu/mlxrt), BENCH_TOKENIZER (default: shared data).
# Then, there:  MLXRT_VENV=<env with NVIDIA's CUDA wheels> MLXRT_WHEELS=BUNDLE/wheels \
#               MLXRT_BIN=BUNDLE/bin/mlxrt MLXRT_LIBS=BUNDLE/lib BENCH_TOKENIZER=BUNDLE/tokenizer bench/gpu/run.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/versions.env"
bundle=${1:-$root/build-gpu/bundle}
pyver=${TARGET_PYTHON:-3.12}
binary=${MLXRT_BIN:-$root/build-gpu/mlxrt}
tokenizer=${BENCH_TOKENIZER:-$root/../shared/data/tokenizers/qwen3}
download=$root/build-gpu/wheel-downloads
mkdir -p "$bundle/wheels" "$bundle/bin" "$bundle/lib" "$bundle/tokenizer" "$download"

pip_download() {
  python3 -m pip download -q --only-binary=:all: --python-version "$pyver" --implementation cp \
    --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$download" "$@"
}
# The wheels the target's Python may lack. The CUDA wheel's NVIDIA dependencies and mlx-lm's
# (transformers, numpy, ...) are expected there already (with them the bundle outgrows 64 MB);
# when one is missing, run.sh installs the carried wheels without their requirements and says so
# in install.log.
pip_download --no-deps "mlx==$MLX_VERSION" "mlx-cuda-13==$MLX_VERSION" "mlx-lm==$MLX_LM_VERSION" \
  -r "$root/tools/requirements-test.txt"
# The OpenAI client's own requirements are small and rarely on a GPU image; NVIDIA's CRT headers
# (install-python-env.sh says why) for the target's NVRTC release.
pip_download "$(grep -E '^openai==' "$root/tools/requirements-test.txt")"
pip_download --no-deps "nvidia-cuda-crt==${TARGET_NVRTC:-13.0}.*"
# The structured-output engine's libraries travel in lib/ beside the binary (found by ldd below).
for w in "$download"/*.whl; do
  case "$(basename "$w")" in
    # What no GPU stage uses (the browser driver, the Anthropic client, schema validation, the
    # Python package's build tools, the engine's Python side): the bundle must stay under 64 MB.
    selenium-*|anthropic-*|jsonschema-*|nanobind-*|xgrammar-*|apache_tvm_ffi-*) ;;
    mlx_cuda_13-*) [ -f "$bundle/wheels/$(basename "$w")" ] || \
                     python3 "$root/tools/setup/slim_cuda_wheel.py" "$w" "$bundle/wheels" --keep-sm ${KEEP_SM:-90} ;;
    *) cp "$w" "$bundle/wheels/" ;;
  esac
done

# tokenizer.json compressed (11 MB -> 1.4 MB); run.sh unpacks it.
xz -9 -c "$tokenizer/tokenizer.json" > "$bundle/tokenizer/tokenizer.json.xz"
cp "$tokenizer/tokenizer_config.json" "$bundle/tokenizer/"

cp "$binary" "$bundle/bin/mlxrt"
# The CUDA kernels' tests (run by `run.sh kernels`) and benchmark, built beside the binary when there.
for exe in mlxrt_cuda_kernel_tests mlxrt_qmv_bench mlxrt_layer_bench mlxrt_availability_probe; do
  if [ -x "$(dirname "$binary")/$exe" ]; then cp "$(dirname "$binary")/$exe" "$bundle/bin/"; fi
done
# Shared libraries from outside the C runtime and MLX's wheels, which the target may not have.
ldd "$binary" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libmlx.so|liblapack-*|libblas-*|libgfortran-*|libquadmath-*) ;;
    *) cp -L "$lib" "$bundle/lib/" ;;
  esac
done
du -sh "$bundle"/* "$bundle"
