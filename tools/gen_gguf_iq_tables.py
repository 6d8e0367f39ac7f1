#!/usr/bin/env python3
"""Writes the lookup tables of GGUF's IQ quantization formats (the lattice grids of IQ1_S/IQ1_M,
IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S, and the sign patterns they share) as a C++ header,
from the installed gguf package. The tables are part of the file format; the converter's block
decoders (src/mlxrt/convert/gguf_blocks.cpp) index them. Run by CMake at build time into the build
directory; the output is not committed.

Usage: gen_gguf_iq_tables.py OUT_HEADER
"""
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
from gguf import quants


def grid_values(cls) -> np.ndarray:
    """The grid as its element values (ggml's tables hold each entry's values as bytes)."""
    cls.init_grid()
    grid = np.asarray(cls.grid).reshape(cls.grid_shape)
    values = grid.astype(np.int64)
    assert np.array_equal(values.astype(np.float32), grid), f"{cls.__name__}: non-integer grid value"
    return values


def c_array(ctype: str, name: str, values: np.ndarray) -> str:
    dims = "".join(f"[{d}]" for d in values.shape)
    rows = values.reshape(-1, values.shape[-1]) if values.ndim > 1 else values.reshape(1, -1)
    body = ",\n".join("    {" + ", ".join(str(int(v)) for v in row) + "}" if values.ndim > 1
                      else "    " + ", ".join(str(int(v)) for v in row) for row in rows)
    return f"inline constexpr {ctype} {name}{dims} = {{\n{body}\n}};\n"


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    signs = np.frombuffer(quants.IQ2_XXS.ksigns, dtype=np.uint8)
    delta = float(quants.IQ1_S.delta)
    assert delta == 0.125 and float(quants.IQ1_M.delta) == delta
    parts = [
        "// Generated at build time by tools/gen_gguf_iq_tables.py from the gguf package "
        f"{metadata.version('gguf')}: the GGUF IQ formats' tables. Do not edit.\n",
        "#pragma once\n#include <cstdint>\n\nnamespace mlxrt::convert::iq_tables {\n\n",
        "// Eight sign bits for each 7-bit index (the eighth makes the count of minus signs even).\n",
        c_array("uint8_t", "kSigns", signs),
        "// IQ1_S / IQ1_M: the offset added to each grid value, minus when the block's flag says so.\n",
        f"inline constexpr float kIq1Delta = {delta!r}f;\n",
    ]
    for name, cls, ctype in [("kIq2xxsGrid", quants.IQ2_XXS, "uint8_t"), ("kIq2xsGrid", quants.IQ2_XS, "uint8_t"),
                             ("kIq2sGrid", quants.IQ2_S, "uint8_t"), ("kIq3xxsGrid", quants.IQ3_XXS, "uint8_t"),
                             ("kIq3sGrid", quants.IQ3_S, "uint8_t"), ("kIq1sGrid", quants.IQ1_S, "int8_t")]:
        parts.append(c_array(ctype, name, grid_values(cls)))
    parts.append("\n}  // namespace mlxrt::convert::iq_tables\n")
    text = "".join(parts)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists() or out.read_text() != text:  # leave an unchanged header's timestamp alone
        out.write_text(text)


if __name__ == "__main__":
    main()
