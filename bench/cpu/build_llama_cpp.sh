#!/usr/bin/env bash
# Builds llama.cpp's llama-bench for this CPU from the llama-cpp-python source distribution (the
# peer of bench/cpu/run.py), into bench/cpu/.llama.cpp (ignored). Needs cmake, a C++ compiler and
# pip; about ten minutes on two cores.
# Usage: bench/cpu/build_llama_cpp.sh [VERSION]   (default: the newest)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out="$here/.llama.cpp"
spec="llama-cpp-python${1:+==$1}"
mkdir -p "$out"
if [ ! -d "$out/src" ]; then
  "$root/.venv/bin/python" -m pip download -q --no-deps --no-binary llama-cpp-python -d "$out/sdist" "$spec"
  mkdir -p "$out/src"
  tar -xzf "$out"/sdist/llama_cpp_python-*.tar.gz -C "$out/src" --strip-components=1
fi
cmake -S "$out/src/vendor/llama.cpp" -B "$out/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
cmake --build "$out/build" --target llama-bench -j"$(nproc)" >/dev/null
echo "$out/build/bin/llama-bench"
