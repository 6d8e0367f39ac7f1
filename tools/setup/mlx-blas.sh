#!/usr/bin/env bash
# Puts the chosen BLAS under the mlx-cpu wheel's libmlx.so, in a Python environment, idempotently.
# Usage: mlx-blas.sh VENV CHOICE   (CHOICE: openblas | reference)
#
# MLX's CPU backend calls cblas_sgemm for every float32 matmul. The mlx-cpu wheel for Linux bundles
# the netlib reference BLAS as mlx_cpu.libs/libblas-<hash>.so.<version>, and libmlx.so finds it by
# that file name through an RPATH, which LD_LIBRARY_PATH cannot override. So:
#   openblas:  the wheel's file is kept aside as mlx_cpu.libs/reference/<same name> and a symbolic
#              link to Debian's OpenBLAS (pthread build) takes its name. A link rather than a copy:
#              Debian's updates reach it, pip removes or replaces it like the file it stands for,
#              and the environment holds no 36 MB copy whose libgfortran would still come from
#              the system. It names the library itself (openblas-pthread/libopenblas.so.0), not the
#              libblas.so.3 wrapper beside it, whose RUNPATH $ORIGIN would resolve from our folder
#              and fall back to the system's alternatives (possibly the OpenMP or serial build).
#   reference: the wheel's own file is put back.
# Either way reference/<name> stays, so that LD_PRELOAD=<that file> runs the stock reference BLAS
# for one process (mlxrt or Python) without touching the environment.
# Every swap is a rename of a finished file, so a process starting meanwhile loads one BLAS or the
# other, never a half-written one; after a swap a Python process must load MLX and run a float32
# matmul, or the reference BLAS goes back in and this fails.
# Prints the choice in effect (openblas or reference); pip reinstalling mlx-cpu puts the reference
# file back, and the next run of this script (every `make`) redoes the swap.
set -euo pipefail
venv=${1:?python environment}
choice=${2:?openblas or reference}
python="$venv/bin/python"
[ -x "$python" ] || python="$venv/bin/python3"
purelib=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
libs="$purelib/mlx_cpu.libs"
ref="$libs/reference"
triplet="$(uname -m)-linux-gnu"
openblas="/usr/lib/$triplet/openblas-pthread/libopenblas.so.0"

shopt -s nullglob
blas_files=("$libs"/libblas-*.so*)
if [ ${#blas_files[@]} -eq 0 ]; then
  # No mlx-cpu wheel with a bundled BLAS here (another backend, or macOS, whose MLX uses Accelerate).
  rm -rf "$ref"
  echo none
  exit 0
fi
# Copies of another mlx-cpu release's BLAS are no longer of use.
for kept in "$ref"/*; do
  [ -e "$libs/$(basename "$kept")" ] || [ -L "$libs/$(basename "$kept")" ] || rm -f "$kept"
done
if [ "$choice" = openblas ] && [ ! -e "$openblas" ]; then
  echo "mlx-blas.sh: $openblas is missing (Debian package libopenblas0-pthread): keeping the reference BLAS" >&2
  choice=reference
fi

swap_in() {  # swap_in SOURCE TARGET [link]: TARGET becomes SOURCE (a copy, or a link), atomically
  local tmp
  tmp="$(dirname "$2")/.$(basename "$2").mlxrt-tmp"
  rm -f "$tmp"
  if [ "${3:-}" = link ]; then ln -s "$1" "$tmp"; else cp -p "$1" "$tmp"; fi
  mv -Tf "$tmp" "$2"
}

changed=0
for f in "${blas_files[@]}"; do
  name=$(basename "$f")
  if [ ! -L "$f" ]; then
    # The wheel's own file (a fresh install, or pip reinstalled it): the reference copy to keep.
    mkdir -p "$ref"
    cmp -s "$f" "$ref/$name" || swap_in "$f" "$ref/$name"
  fi
  if [ "$choice" = openblas ]; then
    [ -L "$f" ] && [ "$(readlink "$f")" = "$openblas" ] && continue
    swap_in "$openblas" "$f" link
  else
    [ -L "$f" ] || continue
    if [ ! -f "$ref/$name" ]; then
      echo "mlx-blas.sh: $ref/$name is missing: reinstall mlx-cpu (pip install --force-reinstall --no-deps mlx-cpu)" >&2
      exit 1
    fi
    swap_in "$ref/$name" "$f"
  fi
  changed=1
done

if [ "$changed" = 1 ] && [ "$choice" = openblas ]; then
  check='import mlx.core as mx
a = mx.ones((64, 64), dtype=mx.float32)
assert (a @ a)[0, 0].item() == 64.0
assert any("openblas" in line for line in open("/proc/self/maps"))'
  if ! "$python" -c "$check" >/dev/null 2>&1; then
    echo "mlx-blas.sh: MLX does not run on OpenBLAS here: putting the reference BLAS back" >&2
    for f in "${blas_files[@]}"; do swap_in "$ref/$(basename "$f")" "$f"; done
    exit 1
  fi
fi
echo "$choice"
