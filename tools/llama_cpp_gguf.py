#!/usr/bin/env python3
"""Runs llama.cpp's HF -> GGUF converter (convert_hf_to_gguf.py, from the pinned llama-cpp-python
source distribution) on a Hugging Face checkpoint directory: the reference GGUF writer for the
`mlxrt convert --gguf` tests of the families whose GGUF tensors llama.cpp transforms (gated delta
nets, ...). Run it with the converter environment's Python (tools/setup/install-llama-cpp-converter.sh).

Usage: llama_cpp_gguf.py --llama-cpp DIR HF_DIR --outfile F.gguf --outtype bf16|f16|f32|q8_0

The converter imports torch; this project's is Debian's CPU build (1.13), which predates the
float8 dtypes the converter names in its dtype tables at import time. They stand in as markers
that no tensor carries: a checkpoint that holds float8 tensors is refused here, not converted."""
import argparse
import json
import struct
import sys
from pathlib import Path


def float8_free(hf_dir: Path) -> None:
    """Refuses a checkpoint with float8 tensors (the stand-in dtypes below cannot convert them)."""
    for part in sorted(hf_dir.glob("*.safetensors")):
        with open(part, "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        for name, info in header.items():
            if name != "__metadata__" and info["dtype"].startswith("F8"):
                sys.exit(f"{part}: tensor '{name}' is {info['dtype']}, which this torch cannot read")


def patch_torch() -> None:
    import torch

    for name in ("float8_e4m3fn", "float8_e5m2"):
        if not hasattr(torch, name):
            setattr(torch, name, type(name, (), {"__repr__": lambda self, n=name: f"torch.{n} (absent)"})())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp source folder (convert_hf_to_gguf.py)")
    args, rest = parser.parse_known_args()
    hf_dirs = [Path(a) for a in rest if not a.startswith("-") and Path(a).is_dir()]
    for d in hf_dirs:
        float8_free(d)
    patch_torch()
    script = args.llama_cpp / "convert_hf_to_gguf.py"
    if not script.is_file():
        sys.exit(f"{script} is missing: run tools/setup/install-llama-cpp-converter.sh")
    sys.path.insert(0, str(args.llama_cpp))
    sys.argv = [str(script), *rest]
    import runpy

    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
