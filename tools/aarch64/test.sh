#!/usr/bin/env bash
# `make test-aarch64`: the CPU kernels and their tests cross-compiled for 64-bit Arm Linux and run
# under qemu-aarch64, against the aarch64 build of the pinned MLX (the mlx-cpu wheel). The L1
# kernel tests compare our bytes with MLX's own CPU ops in the same process, so under emulation
# they check the aarch64 arithmetic exactly (timings under qemu mean nothing).
#   tools/aarch64/test.sh [BUILD_DIR] [gtest args...]     (default BUILD_DIR: build-aarch64)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-build-aarch64}"
shift || true
case "$build" in /*) ;; *) build="$root/$build" ;; esac
jobs="${JOBS:-2}"
source "$root/versions.env"

need=()
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
[ -f /usr/src/googletest/CMakeLists.txt ] || need+=(googletest)
command -v ninja >/dev/null || need+=(ninja-build)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The aarch64 mlx-cpu wheel (libmlx.so, its headers and BLAS), unpacked once into the build dir.
site="$build/mlx-wheel/site"
if [ ! -f "$site/mlx/lib/libmlx.so" ]; then
  mkdir -p "$build/mlx-wheel"
  python="${MLXRT_VENV:-$root/.venv}/bin/python3"
  [ -x "$python" ] || python=python3
  "$python" -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_35_aarch64 \
    --python-version 3.12 "mlx-cpu==$MLX_VERSION" -d "$build/mlx-wheel"
  rm -rf "$site"
  "$python" -m zipfile -e "$build"/mlx-wheel/mlx_cpu-"$MLX_VERSION"-*aarch64*.whl "$site"
fi

cmake -S "$root/tools/aarch64" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" -DMLXRT_ARM_MLX_SITE="$site" >/dev/null
cmake --build "$build" -j "$jobs" --target mlxrt_kernels_tests

# The fused L3 kernels (attention, log-softmax, SwiGLU): NEON's bits against AVX2's on the host,
# where the host has AVX2 and FMA (tools/aarch64/fused_bits.cpp).
if grep -q " avx2 " /proc/cpuinfo && grep -q " fma " /proc/cpuinfo; then
  k="$root/src/mlxrt/kernels/cpu"
  g++ -std=c++20 -O2 -ffp-contract=off -I"$root/src" "$root/tools/aarch64/fused_bits.cpp" \
    -mavx2 -mfma -mf16c "$k/l3_fused_avx2.cpp" -o "$build/fused_bits_x86"
  aarch64-linux-gnu-g++ -std=c++20 -O2 -ffp-contract=off -I"$root/src" "$root/tools/aarch64/fused_bits.cpp" \
    "$k/l3_fused_neon.cpp" -o "$build/fused_bits_arm"
  x86="$("$build/fused_bits_x86")"
  arm="$(QEMU_CPU=max qemu-aarch64 -L /usr/aarch64-linux-gnu "$build/fused_bits_arm")"
  if [ "$x86" != "$arm" ]; then
    echo "L3 fused kernels: NEON's bits ($arm) differ from AVX2's ($x86)" >&2
    exit 1
  fi
  echo "L3 fused kernels: NEON's bits equal AVX2's (hash $arm)"
fi

# Twice: on an emulated CPU with the dot product (qemu's "max": the L3 tests compare the SDOT and
# the plain NEON kernels with the definition) and on one without it (cortex-a53, ARMv8.0: the
# run-time check must fall back). QEMU_CPUS overrides the list.
for cpu in ${QEMU_CPUS:-max cortex-a53}; do
  echo "== qemu-aarch64, CPU $cpu"
  QEMU_CPU="$cpu" qemu-aarch64 -L /usr/aarch64-linux-gnu "$build/mlxrt_kernels_tests" "$@"
done
