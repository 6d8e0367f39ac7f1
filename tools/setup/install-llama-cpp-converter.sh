#!/usr/bin/env bash
# Installs llama.cpp's HF -> GGUF converter (convert_hf_to_gguf.py), the reference GGUF writer of
# the `make test-long` cases in tests/convert/test_gguf_llama_cpp.py, into .cache/llama-cpp-converter:
#   venv/       Debian's Python with its packages (Debian's CPU torch, python3-torch, and numpy)
#               plus the converter's light needs from PyPI (transformers as its requirements pin it)
#   llama.cpp/  the converter, from the llama-cpp-python source distribution of the version below
# PyPI's torch is the CUDA build (gigabytes); Debian's is 146 MB of packages (633 MB installed,
# 40 s). The first install takes about 11 minutes on this project's 2-core CPU machine, most of it
# pip preparing the 70 MB source archive (6 minutes); after that, nothing to do and no network.
# Usage: install-llama-cpp-converter.sh   (prints the converter environment's python)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=/dev/null
source "$root/versions.env"
out="$root/.cache/llama-cpp-converter"
want="llama-cpp-python=$LLAMA_CPP_PYTHON_VERSION transformers=$CONVERTER_TRANSFORMERS_VERSION"
if [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$want" ] && "$out/venv/bin/python" -c 'import torch' 2>/dev/null; then
  echo "$out/venv/bin/python"
  exit 0
fi
if ! dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "install ok installed"; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends python3-torch >/dev/null
fi
rm -rf "$out"
mkdir -p "$out/sdist"
/usr/bin/python3 -m venv --system-site-packages "$out/venv"
# numpy stays Debian's (1.24): Debian's torch is built against it.
"$out/venv/bin/python" -m pip install -q --disable-pip-version-check \
  "transformers==$CONVERTER_TRANSFORMERS_VERSION" "sentencepiece==0.2.3" "tqdm==4.70.1"
"$out/venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
  -d "$out/sdist" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
mkdir -p "$out/llama.cpp"
# Only the converter and its packages (conversion/, gguf-py/) of the vendored llama.cpp.
tar -xzf "$out"/sdist/llama_cpp_python-*.tar.gz -C "$out/llama.cpp" --strip-components=3 \
  --wildcards '*/vendor/llama.cpp/convert_hf_to_gguf.py' '*/vendor/llama.cpp/conversion/*' '*/vendor/llama.cpp/gguf-py/*'
echo "$want" > "$out/stamp"
echo "$out/venv/bin/python"
