"""Bad or truncated GGUF files: `mlxrt convert` exits non-zero with one clear line naming the
file and what was wrong, never crashes, and leaves nothing at --out."""

import struct

import pytest
from gguf import GGUFReader

from gguf_support import VECTORS, run_convert, smollm2_gguf, tiny_gguf_bytes

STRING, UINT32 = 8, 4


def gguf_string(text: str) -> bytes:
    return struct.pack("<Q", len(text)) + text.encode()


def tensor_info_field(path, name):
    """File offset of a tensor's info record, and its number of dimensions."""
    reader = GGUFReader(str(path))
    tensor = next(t for t in reader.tensors if t.name == name)
    return tensor.field.offset, len(tensor.shape)


def patched_copy(tmp_path, tensor, field, value):
    """A copy of the real model with one tensor info field ('type' or 'offset') overwritten."""
    src = smollm2_gguf()
    start, n_dims = tensor_info_field(src, tensor)
    pos = start + 8 + len(tensor) + 4 + 8 * n_dims + (0 if field == "type" else 4)
    data = bytearray(src.read_bytes())
    data[pos : pos + (4 if field == "type" else 8)] = struct.pack("<I" if field == "type" else "<Q", value)
    out = tmp_path / f"patched-{field}.gguf"
    out.write_bytes(bytes(data))
    return out


def truncated_copy(tmp_path, size):
    out = tmp_path / f"truncated-{size}.gguf"
    with open(smollm2_gguf(), "rb") as f:
        out.write_bytes(f.read(size))
    return out


CASES = {
    "bad magic": (lambda d: d.write_bytes(tiny_gguf_bytes(magic=b"GGML")), "bad magic"),
    "version 1": (lambda d: d.write_bytes(tiny_gguf_bytes(version=1)), "GGUF version 1 is not supported"),
    "version 9": (lambda d: d.write_bytes(tiny_gguf_bytes(version=9)), "unsupported GGUF version 9"),
    "empty file": (lambda d: d.write_bytes(b""), "bad magic"),
    "lying tensor offset": (
        lambda d: d.write_bytes(tiny_gguf_bytes(tensors=[("w.weight", [32, 4], 8, 1 << 30)], data=b"\0" * 64)),
        "lies beyond the end of the file",
    ),
    "lying string length": (
        lambda d: d.write_bytes(tiny_gguf_bytes(kv=[("k", STRING, struct.pack("<Q", 1 << 40) + b"x")])),
        "implausible length",
    ),
    "unknown architecture": (
        lambda d: d.write_bytes(tiny_gguf_bytes(kv=[("general.architecture", STRING, gguf_string("gptneox"))])),
        "GGUF architecture 'gptneox' is not supported by the converter (supported: llama",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_small_bad_files(case, tmp_path):
    make, message = CASES[case]
    bad = tmp_path / "bad.gguf"
    make(bad)
    assert_rejected(bad, tmp_path, message)


# Cut inside the metadata (the vocabulary), inside the tensor directory, inside the tensor data.
@pytest.mark.parametrize("size,message", [
    (20, "truncated"),
    (1_000_000, "truncated metadata"),
    (1_785_000, "truncated"),
    (50_000_000, "lies beyond the end of the file"),
])
def test_truncated_real_model(size, message, tmp_path):
    assert_rejected(truncated_copy(tmp_path, size), tmp_path, message)


def test_lying_offset_in_real_model(tmp_path):
    bad = patched_copy(tmp_path, "blk.29.ffn_down.weight", "offset", 1 << 40)
    assert_rejected(bad, tmp_path, "tensor 'blk.29.ffn_down.weight' data")


def test_unsupported_tensor_type_is_named(tmp_path):
    bad = patched_copy(tmp_path, "blk.3.ffn_down.weight", "type", 40)  # NVFP4: not read
    assert_rejected(bad, tmp_path, "tensor 'blk.3.ffn_down.weight' has type NVFP4, which the converter does not support")


def test_unsupported_pre_tokenizer_is_named(tmp_path):
    assert_rejected(VECTORS / "ggml-vocab-falcon.gguf", tmp_path, "pre-tokenizer 'falcon'", "--tokenizer-only")


def test_existing_output_is_left_alone(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = run_convert("--gguf", str(smollm2_gguf()), "--out", str(out))
    assert r.returncode == 1 and "already exists and is not an empty directory" in r.stderr, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_missing_input_file(tmp_path):
    r = run_convert("--gguf", str(tmp_path / "nope.gguf"), "--out", str(tmp_path / "out"))
    assert r.returncode != 0 and "nope.gguf" in r.stderr, r.stderr


def assert_rejected(bad, tmp_path, message, *extra):
    out = tmp_path / "out"
    r = run_convert("--gguf", str(bad), "--out", str(out), "--quiet", *extra)
    print(f"{bad.name}: {r.stderr.strip()}")
    assert r.returncode == 1, f"exit {r.returncode}\n{r.stderr}"
    assert r.stderr.startswith("error: ") and str(bad) in r.stderr and message in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr  # one line, no trace
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if ".partial" in p.name]
    if bad.parent == tmp_path:
        bad.unlink()  # copies of the real model are large
