"""tools/setup/slim_cuda_wheel.py on a synthetic wheel: an ELF64 libmlx.so whose .nv_fatbin
section holds GPU code for three architectures and a PTX entry. Only the kept architecture's
payload survives, everything else in the file is unchanged, RECORD names the new hash, and the
result is an LZMA-compressed zip that Python's zipfile (as pip) reads."""
import base64
import hashlib
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("MLXRT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
TOOL = ROOT / "tools" / "setup" / "slim_cuda_wheel.py"
LIB = "mlx/lib/libmlx.so"
RECORD = "mlx_cuda_13-0.0.1.dist-info/RECORD"


def fatbin_entry(kind, arch, payload):
    header = struct.pack("<HHIIIIIII", kind, 0x101, 64, len(payload), 0, len(payload), 0, 0, arch)
    return header.ljust(64, b"\0") + payload


def fatbin(entries):
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def elf_with_section(name, content, prefix=b"\x90" * 100):
    """A minimal little-endian ELF64: header, data, then section headers (null, the section, the
    section-name table)."""
    shstrtab = b"\0" + name + b"\0.shstrtab\0"
    data_off = 64 + len(prefix)
    names_off = data_off + len(content)
    shoff = (names_off + len(shstrtab) + 7) // 8 * 8
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 2)
    def sh(name_idx, offset, size):
        return struct.pack("<IIQQQQIIQQ", name_idx, 1, 0, 0, offset, size, 0, 0, 8, 0)
    body = header + prefix + content + shstrtab
    body = body.ljust(shoff, b"\0")
    return body + bytes(64) + sh(1, data_off, len(content)) + sh(len(name) + 2, names_off, len(shstrtab))


def record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@pytest.fixture
def wheel(tmp_path):
    sm80, sm90, sm100, ptx = (bytes([i]) * 256 for i in (0x80, 0x90, 0xA0, 0x7C))
    container = fatbin([fatbin_entry(2, 80, sm80), fatbin_entry(2, 90, sm90), fatbin_entry(2, 100, sm100),
                        fatbin_entry(1, 120, ptx)])
    lib = elf_with_section(b".nv_fatbin", b"\0" * 8 + container + b"\0" * 8)
    path = tmp_path / "in" / "mlx_cuda_13-0.0.1-py3-none-any.whl"
    path.parent.mkdir()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(LIB, lib)
        z.writestr("mlx/include/mlx.h", "// header\n")
        z.writestr(RECORD, f"{LIB},{record_hash(lib)},{len(lib)}\nmlx/include/mlx.h,sha256=x,10\n{RECORD},,\n")
    return path, lib, {"sm80": sm80, "sm90": sm90, "sm100": sm100, "ptx": ptx}


def test_keeps_only_the_chosen_architecture(wheel, tmp_path):
    path, lib, payloads = wheel
    subprocess.run([sys.executable, str(TOOL), str(path), str(tmp_path / "out"), "--keep-sm", "90"], check=True)
    with zipfile.ZipFile(tmp_path / "out" / path.name) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_LZMA}
        slim = z.read(LIB)
        record = z.read(RECORD).decode()
        assert z.read("mlx/include/mlx.h") == b"// header\n"
    assert len(slim) == len(lib)
    assert payloads["sm90"] in slim
    for dropped in ("sm80", "sm100", "ptx"):
        assert payloads[dropped] not in slim
    # Only dropped payload bytes changed, and to zeros.
    changed = [i for i, (a, b) in enumerate(zip(lib, slim)) if a != b]
    assert len(changed) == 3 * 256 and all(slim[i] == 0 for i in changed)
    assert f"{LIB},{record_hash(slim)},{len(slim)}" in record.splitlines()


def test_refuses_a_wheel_without_libmlx(tmp_path):
    path = tmp_path / "other-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("other/__init__.py", "")
    proc = subprocess.run([sys.executable, str(TOOL), str(path), str(tmp_path / "out")], capture_output=True, text=True)
    assert proc.returncode != 0 and "no libmlx.so" in proc.stderr
