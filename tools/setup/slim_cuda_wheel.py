#!/usr/bin/env python3
"""Makes a smaller copy of MLX's CUDA wheel (mlx-cuda-12/13) for machines of known GPUs.

libmlx.so carries the GPU code of every kernel for several architectures (sm_75 to sm_121 and
PTX): about 67 MB of its 146. This keeps the code for the given compute capabilities and fills
the other entries' payloads with zeros (the fatbin headers stay, so the CUDA driver still picks
the matching entry; zeros compress to nothing), then rewrites the wheel with LZMA compression,
which pip reads like any wheel. RECORD gets the new hash. The file keeps its size and layout.

Usage: slim_cuda_wheel.py IN.whl OUT_DIR [--keep-sm 90 ...]
  --keep-sm: compute capabilities whose machine code is kept (90: H100/H200). PTX is kept when
  its architecture is at most the largest kept one (the driver can compile it for that GPU).
"""
import argparse
import base64
import hashlib
import struct
import sys
import zipfile
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2


def section(elf: bytes, name: bytes):
    """(offset, size) of an ELF64 little-endian section, by name."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise SystemExit("libmlx.so is not a little-endian ELF64 file")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    def header(i):
        return struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize)
    names_off = header(shstrndx)[4]
    for i in range(shnum):
        h = header(i)
        start = names_off + h[0]
        if elf[start:elf.index(b"\0", start)] == name:
            return h[4], h[5]
    raise SystemExit(f"libmlx.so has no {name.decode()} section")


def slim_fatbin(lib: bytearray, keep: set[int]):
    """Zeroes the payloads of fatbin entries the kept GPUs never load. Returns (kept, dropped) bytes."""
    off, size = section(bytes(lib[:]), b".nv_fatbin")
    end_of_section = off + size
    pos, kept, dropped = off, 0, 0
    while pos + 16 <= end_of_section:
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", lib, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned
            continue
        entry, end = pos + header_size, pos + header_size + fat_size
        while entry < end:
            kind, _ver, entry_header, padded = struct.unpack_from("<HHII", lib, entry)
            arch, = struct.unpack_from("<I", lib, entry + 28)
            payload = entry + entry_header
            wanted = (kind == KIND_ELF and arch in keep) or (kind == KIND_PTX and arch <= max(keep))
            if wanted:
                kept += padded
            else:
                lib[payload:payload + padded] = bytes(padded)
                dropped += padded
            entry = payload + padded
        pos = end
    return kept, dropped


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel", type=Path)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--keep-sm", type=int, nargs="+", default=[90])
    args = ap.parse_args()
    out = args.out_dir / args.wheel.name
    if out.resolve() == args.wheel.resolve():
        raise SystemExit("OUT_DIR must differ from the wheel's folder")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(args.wheel) as src:
        names = src.namelist()
        lib_name = next((n for n in names if n.endswith("/lib/libmlx.so")), None)
        record_name = next((n for n in names if n.endswith(".dist-info/RECORD")), None)
        if lib_name is None or record_name is None:
            raise SystemExit(f"{args.wheel}: no libmlx.so or RECORD (not an MLX CUDA wheel?)")
        lib = bytearray(src.read(lib_name))
        kept, dropped = slim_fatbin(lib, set(args.keep_sm))
        record = []
        for line in src.read(record_name).decode().splitlines():
            path = line.split(",", 1)[0]
            record.append(f"{lib_name},{record_hash(lib)},{len(lib)}" if path == lib_name else line)
        tmp = out.with_name(out.name + ".partial")
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_LZMA) as dst:
            for info in src.infolist():
                if info.filename == lib_name:
                    data = bytes(lib)
                elif info.filename == record_name:
                    data = ("\n".join(record) + "\n").encode()
                else:
                    data = src.read(info)
                info.compress_type = zipfile.ZIP_LZMA
                dst.writestr(info, data)
        tmp.rename(out)
    print(f"{out}: {out.stat().st_size / 1e6:.1f} MB (was {args.wheel.stat().st_size / 1e6:.1f}); "
          f"GPU code kept {kept / 1e6:.1f} MB for sm {sorted(args.keep_sm)}, dropped {dropped / 1e6:.1f} MB",
          file=sys.stderr)


if __name__ == "__main__":
    main()
