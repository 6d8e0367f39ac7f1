#!/usr/bin/env python3
"""Compiles mlxrt's CUDA kernel sources with NVRTC on a machine without a GPU (`make check-cuda-kernels`).

The L3 kernels are source text that MLX compiles at run time (mx::fast::cuda_kernel), so a mistake
in them would otherwise surface only on a GPU machine. NVRTC needs no GPU: this script rebuilds each
kernel's full source exactly as MLX 0.32.4's build_kernel (mlx/backend/cuda/custom_kernel.cpp) does
and compiles it with the options of MLX's jit_module.cpp, for every template-argument combination
the C++ launches (KERNELS below), and prints each kernel's registers and local-memory spills.

What it compiles with, downloaded once into the cache folder (build-nvrtc/ by default):
- the pinned mlx-cuda-13 wheel (versions.env): its CCCL headers, and MLX's device headers, which the
  wheel holds only inside libmlx.so (MLX hands them to NVRTC from memory): they are read out of the
  library's two pointer arrays (include names, header texts) through its relocations;
- NVRTC and the CUDA runtime / crt headers from NVIDIA's 13.0 wheels, as `make` installs them on a
  GPU machine.

The table is checked against the C++: each kernel's cuda_kernel(...) call must name the same inputs,
outputs, source and header as the table, and its launch the same template arguments, or the script
stops (it never compiles something other than what the C++ launches).
"""

import argparse
import ast
import concurrent.futures
import ctypes
import itertools
import re
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT  # where the C++ is read from (--sources)
NVIDIA_SERIES = "13.0.*"  # NVRTC / runtime / crt: the CUDA 13.0 toolkit MLX's CUDA 13 wheel is built for
ARCH = "sm_90a"  # the H200's: MLX compiles straight to sm_90a where the driver allows, else compute_90a
MAX_STAGED_BYTES = 40 * 1024  # fused_qmv.cpp's kMaxStagedBytes: the fused kernels stage M*K values of x
MAX_QMV_ROWS, MAX_FUSED_ROWS = 8, 4  # affine_qmv.h's kQmvMaxRows, fused_qmv.h's kFusedMaxRows

CUDA_TYPE = {"bf16": "__nv_bfloat16", "f16": "__half", "f32": "float", "u8": "uint8_t", "u32": "uint32_t", "u64": "uint64_t",
             "i32": "int32_t"}
FLOATS = ("bf16", "f16", "f32")
SIZE = {"bf16": 2, "f16": 2, "f32": 4}


def promote(a, b):
    """mx::promote_types over the float dtypes: bf16 with f16 is f32."""
    if a == b:
        return a
    return "f32"


def eps_bits(eps):
    return struct.unpack("<i", struct.pack("<f", eps))[0]


# ---- the kernels and the template arguments the C++ launches ------------------------------------
# Each entry: file, source constant, header (a list of constants, or a literal), inputs / outputs
# (name -> dtype of the combination), and combos(full) -> list of dicts (template args, plus dtypes).
QMV = "src/mlxrt/kernels/cuda/affine_qmv.cpp"
MMA = "src/mlxrt/kernels/cuda/affine_mma.cpp"
FP4 = "src/mlxrt/kernels/cuda/fp4_qmv.cpp"
FUSED = "src/mlxrt/kernels/cuda/fused_qmv.cpp"
QK_ROPE = "src/mlxrt/kernels/cuda/qk_rope.cpp"
DELTA = "src/mlxrt/model/nn/gated_delta_cuda.cpp"
DEVICE_H = "src/mlxrt/kernels/cuda/qmv_device.h"
LAYER = "src/mlxrt/kernels/cuda/decoder_layer.cpp"
ROPE_H = "src/mlxrt/kernels/cuda/rope_device.h"


def dtype_pairs(full):
    """(x dtype, scales dtype): the same float everywhere, plus a mixed pair (f32 x, bf16 scales)."""
    if full:
        return list(itertools.product(FLOATS, FLOATS))
    return [(t, t) for t in FLOATS] + [("f32", "bf16"), ("bf16", "f32")]


def qmv_combos(full, max_rows, rows_per_warp, extra):
    """The quantized products: every dtype pair x bits x group size; M (rows of x) and R (rows per
    warp) over every value the launch can choose in --full, else each value at least once. Then the
    dense products (BITS 0, GS 0: w, scales and biases all of x's type)."""
    out = []
    rs = sorted({max(1, r) for r in rows_per_warp})
    ms = list(range(1, max_rows + 1))
    variants = list(itertools.product(dtype_pairs(full), (4, 8), (32, 64, 128)))
    variants += [((t, t), 0, 0) for t in FLOATS]
    for i, ((xt, st), bits, gs) in enumerate(variants):
        mr = list(itertools.product(ms, rs)) if full else [(ms[i % len(ms)], rs[i % len(rs)])]
        if not full and i == 0:
            mr += [(max_rows, max(rs))]  # the largest unrolled case
        for m, r in mr:
            for ex in extra(full, i):
                ot = promote(xt, st)
                # DEPTH: the steps of loads in flight, 2 by default (MLXRT_CUDA_L3_DEPTH), 4 the deepest.
                combo = {"XT": xt, "ST": st, "OT": ot, "M": m, "R": r, "BITS": bits, "GS": gs, **ex,
                         "DEPTH": 4 if (i + m) % 3 == 0 else 2}
                if "K" in combo:
                    if m * combo["K"] * SIZE[xt] > MAX_STAGED_BYTES:
                        continue  # norm_fits() refuses it: never launched
                    combo["COLS"] = combo["K"] * bits // 32 if bits else combo["K"]
                    combo["SK"] = m * combo["K"]
                out.append(combo)
    return out


def mma_combos(full):
    """affine_mma's: x bfloat16 or float16 with parameters of each float type, group sizes 32, 64
    and 128, MT 1-16, and WARPS x AHEAD: every pair in --full, else each value at least once."""
    pairs = [(x, s) for x in ("bf16", "f16") for s in FLOATS]
    variants = list(itertools.product(pairs, (32, 64, 128), (1, 2, 4, 8, 16)))
    tilings = list(itertools.product(range(1, 9), range(1, 9))) if full else [(4, 4), (1, 1), (2, 8), (8, 3), (3, 2),
                                                                              (5, 5), (6, 6), (7, 7)]
    out = []
    for i, ((xt, st), gs, mt) in enumerate(variants):
        for warps, ahead in (tilings if full else [tilings[i % len(tilings)]]):
            out.append({"XT": xt, "ST": st, "OT": promote(xt, st), "GS": gs, "MT": mt, "WARPS": warps, "AHEAD": ahead})
    return out


def fp4_combos(full):
    """fp4_qmv's: x of each float type, mxfp4 (GS 32, E8M0 scales) and nvfp4 (GS 16, E4M3); M 1-8
    rows of x and R 1-8 rows a warp: every pair in --full, else each value at least once."""
    variants = list(itertools.product(FLOATS, ((32, 1), (16, 0))))
    mr = list(itertools.product(range(1, MAX_QMV_ROWS + 1), (1, 2, 4, 8)))
    out = []
    for i, (xt, (gs, e8)) in enumerate(variants):
        for m, r in (mr if full else [mr[(5 * i) % len(mr)], mr[(5 * i + 3) % len(mr)]] + ([(8, 8)] if i == 0 else [])):
            out.append({"OT": xt, "M": m, "R": r, "GS": gs, "E8": e8})
    return out


def w_type(c):
    """The weight's dtype: packed words, or a dense matrix of x's type (QmvMatrix::dense)."""
    return "u32" if c["BITS"] else c["XT"]


def no_extra(full, i):
    return [{}]


def norm_extra(full, i):
    """K (the hidden size: SmolLM2-135M's 576, Qwen3's 1024 / 2048 / 4096) and eps (1e-5 / 1e-6)."""
    ks = (576, 1024, 2048, 4096)
    eps = (1e-5, 1e-6)
    if full:
        return [{"K": k, "EPS_BITS": eps_bits(e)} for k in ks for e in eps]
    return [{"K": ks[i % len(ks)], "EPS_BITS": eps_bits(eps[i % 2])}]


def delta_combos(full):
    """gated_delta_fused: q/k, v and beta each bf16, f16 or f32 (g and state f32); Dk a multiple of 4
    up to 512; Qwen3.5's 128 x 128 heads, 16 key heads shared by 32 value heads."""
    out = []
    dims = [(128, 128, 16, 32), (64, 64, 8, 8), (4, 4, 1, 1), (512, 256, 2, 4), (132, 96, 4, 4)]
    for i, (qt, vt, bt) in enumerate(itertools.product(FLOATS, FLOATS, FLOATS)):
        for dk, dv, hk, hv in dims if full else [dims[i % len(dims)]]:
            out.append({"QT": qt, "VT": vt, "BT": bt, "Dk": dk, "Dv": dv, "Hk": hk, "Hv": hv})
    return out


def conv_combos(full):
    """conv_silu_fused: x and w bf16 or f16; K the conv kernel size (Qwen3.5's 4)."""
    return [{"XT": xt, "K": k} for xt in ("bf16", "f16") for k in ((2, 3, 4, 5) if full else (4, 1))]


def qk_rope_combos(full):
    """qk_norm_rope: each float type; heads (query, key) and head dims of Qwen3-0.6B / 8B, Llama,
    Gemma (256) and a partial rotation; 1-4 rows as one batch of L or L of one; norms or none,
    base or frequencies, split-half or traditional pairs, one offset or one per batch row."""
    shapes = [(16, 8, 128, 128), (32, 8, 128, 128), (32, 8, 64, 64), (8, 4, 256, 256), (16, 4, 128, 64)]
    rows = [(1, 1), (4, 1), (1, 3), (2, 2)]
    flags = list(itertools.product((False, True), repeat=4))  # TRAD, FREQS, NORM, PER_ROW
    out = []
    for i, (t, (h, hk, d, rot), (b, l), (trad, freqs, norm, per_row)) in enumerate(
            itertools.product(FLOATS, shapes, rows, flags)):
        if not full and i % 23:
            continue
        out.append({"QT": t, "M": b * l, "L": l, "H": h, "HK": hk, "D": d, "ROT": rot, "TRAD": trad,
                    "FREQS": freqs, "NORM": norm, "PER_ROW": per_row and b > 1,
                    "EPS_Q_BITS": eps_bits(1e-6) if norm else 0, "EPS_K_BITS": eps_bits(1e-6) if norm else 0,
                    "LOG2_BASE_BITS": 0 if freqs else eps_bits(19.931568569324174),
                    "SCALE_BITS": eps_bits(1.0)})
    return out


def layer_combos(full):
    """decoder_layer: Qwen3-0.6B's and 8B's layer shapes and a small one; each float type with 4- and
    8-bit weights (groups 32/64/128), float32 x with bf16 scales, dense weights; norms or none, base
    or frequencies, split-half or traditional pairs; 8 warps a block, chunks of 128 keys; products
    with 2 or 4 steps of loads in flight, tasks of the kernel's choice of rows or of 4 or 8, streamed
    (DecoderLayerGrid::stream) or one by one, x as int8 (DecoderLayerGrid::q8, which the kernel
    takes for 4-bit rows at depth 2) or not, phase 2's tasks spread over the blocks and prefetching
    their keys and values (DecoderLayerGrid::att_spread 0-2, att_prefetch, att_prefetch_lines) or not,
    either barrier."""
    shapes = [(1024, 16, 8, 128, 3072), (4096, 32, 8, 128, 12288), (256, 4, 2, 64, 512)]
    variants = [((t, t), b, g) for t in FLOATS for b, g in ((4, 64), (8, 32), (4, 128))]
    variants += [(("f32", "bf16"), 4, 64)] + [((t, t), 0, 0) for t in FLOATS]
    flags = list(itertools.product((False, True), repeat=3))  # TRAD, FREQS, NORM
    out = []
    for i, (((xt, st), bits, gs), shape, (trad, freqs, norm)) in enumerate(
            itertools.product(variants, shapes, flags)):
        # Qwen3's own layers (bf16, 4-bit g64, norms, split-half RoPE by base) at the kernel's
        # defaults, each also with its tasks one by one (MLXRT_CUDA_L3_LAYER_STREAM=0): the
        # registers of what the models run.
        qwen = (xt, st, bits, gs) == ("bf16", "bf16", 4, 64) and shape != shapes[2] and (trad, freqs, norm) == (False, False, True)
        if not full and i % 7 and not qwen:
            continue
        k, h, hk, d, inter = shape
        cols = (lambda n: n * bits // 32) if bits else (lambda n: n)
        r = (4 if k >= 8192 else 1) if not bits else (4 if k >= 8192 else 2 if k >= 4096 else 1)
        r = r if qwen else (r, 4, 8)[i // 7 % 3]  # the kernel's choice, or MLXRT_CUDA_L3_LAYER_ROWS
        # q/k/v tasks as the rest's, or (MLXRT_CUDA_L3_LAYER_QKV_ROUNDS=1) decoder_layer_qkv_rows's on an
        # H100's or H200's grid (132 multiprocessors, decoder_layer_grid's blocks on each).
        warps = 132 * (2 if bits == 4 and r <= 2 else 1) * 8
        # (STREAM, Q8X, ATT_SPREAD, ATT_PF, ATT_PF_LINES, BAR_COUNT): Qwen3's layers one task at a
        # time, streamed, streamed with int8 x, and with phase 2's tasks spread (2: a key head's
        # query heads on one block) and prefetching (all of a chunk or its first 32 or 64 lines)
        # into L2 or L1 beside either barrier.
        qwen_settings = ((False, False, 0, 0, 0, 0), (True, False, 0, 0, 0, 0), (True, True, 0, 0, 0, 0),
                         (True, False, 1, 1, 0, 1), (True, False, 1, 2, 0, 1), (True, False, 1, 1, 64, 0),
                         (True, False, 2, 1, 32, 0))
        for stream, q8, spread, pf, lines, count in (
                qwen_settings if qwen else ((i % 3 != 0, i % 3 == 1, i % 3, i % 3, 16 * (i % 2), i % 2),)):
            out.append({"XT": xt, "WT": "u32" if bits else xt, "ST": st if bits else xt, "R": r,
                        "RQ": qkv_rows(h * d, hk * d, warps, r) if qwen or i % 4 in (1, 2) else r, "BITS": bits, "GS": gs,
                        "K": k, "COLS": cols(k), "COLS_O": cols(h * d), "I": inter, "COLS_I": cols(inter), "H": h,
                        "HK": hk, "D": d, "ROT": d, "TRAD": trad, "FREQS": freqs, "NORM": norm, "NW": 8,
                        "DEPTH": 2 if qwen else 2 + 2 * (i % 2), "STREAM": stream, "Q8X": q8,
                        "ATT_SPREAD": spread, "ATT_PF": pf, "ATT_PF_LINES": lines if pf else 0, "BAR_COUNT": count, "CHUNK": 128,
                        "GEN_WORD": 32,
                        "EPS1_BITS": eps_bits(1e-6), "EPS2_BITS": eps_bits(1e-6),
                        "EPS_Q_BITS": eps_bits(1e-6) if norm else 0, "EPS_K_BITS": eps_bits(1e-6) if norm else 0,
                        "LOG2_BASE_BITS": 0 if freqs else eps_bits(19.931568569324174), "SCALE_BITS": eps_bits(1.0),
                        "ATT_SCALE_BITS": eps_bits(d ** -0.5), **scratch_offsets(k, h, hk, d, inter, xt, warps // 8)})
    return out


def qkv_rows(q_rows, kv_rows, warps, rows):
    """decoder_layer_qkv_rows: rows a q/k/v task, rows to 2 * rows, the fewest rounds over the warps."""
    rounds = lambda r: -(-(-(-q_rows // r) + 2 * -(-kv_rows // r)) // warps)
    best = rows
    for r in range(rows + 1, 2 * rows + 1):
        if rounds(r) < rounds(best):
            best = r
    return best


def scratch_offsets(k, h, hk, d, inter, xt, blocks):
    """decoder_layer_scratch's byte offsets (each region from a 256-byte boundary, part last)."""
    size = {"bf16": 2, "f16": 2, "f32": 4}[xt]
    regions = [("STAMPS", 16 * 8), ("BLOCK_STAMPS", blocks * 5 * 8), ("DONE", max(h, 16) * 4), ("XN1", k * size), ("QKV", (h + 2 * hk) * d * size),
               ("QR", h * d * size), ("ATTN", h * d * size), ("HRES", k * size), ("XN2", k * size),
               ("ACT", inter * size), ("PART", 0)]
    out, at = {}, 0
    for name, nbytes in regions:
        out["OFF_" + name] = at
        at = (at + nbytes + 255) // 256 * 256
    return out


def layer_inputs(c):
    """x, the weights' table of addresses (DecoderLayerWeightTable), the cache, the position, the barrier."""
    xt = c["XT"]
    return [("x", xt), ("tab", "u64"), ("kc", xt), ("vc", xt), ("off", "i32"), ("bar", "u32")]


FUSED_HEADER = "std::string header() { return std::string(detail::kQmvDevice) + detail::kStageRmsNormDevice; }"

KERNELS = [
    {
        "name": "mlxrt_affine_qmv", "file": QMV, "source": "kSource", "header": [(DEVICE_H, "kQmvDevice")],
        "header_expr": "detail::kQmvDevice",
        "inputs": lambda c: [("x", c["XT"]), ("w", w_type(c)), ("scales", c["ST"]), ("biases", c["ST"])],
        "outputs": lambda c: [("y", c["OT"])],
        # choose_tiling: 1, 2 or 4 rows per warp; a caller's tiling may ask 1 to 8.
        "combos": lambda full: qmv_combos(full, MAX_QMV_ROWS, (1, 2, 4, 8), no_extra),
    },
    {
        "name": "mlxrt_affine_qmv_chunks", "file": QMV, "source": "kChunksSource", "header": [(DEVICE_H, "kQmvDevice")],
        "header_expr": "detail::kQmvDevice",
        "inputs": lambda c: [("x", c["XT"]), ("w", w_type(c)), ("scales", c["ST"]), ("biases", c["ST"])],
        "outputs": lambda c: [("y", c["OT"])],
        # affine_qmv_chunks: 8-row chunks (M 8) of the quantized products only, 1 to 16 of them.
        "combos": lambda full: [{**c, "M": MAX_QMV_ROWS, "CHUNKS": n}
                                for c, n in zip((c for c in qmv_combos(full, MAX_QMV_ROWS, (1, 2, 4, 8), no_extra)
                                                 if c["BITS"]), itertools.cycle((1, 2, 4, 16)))],
    },
    {
        "name": "mlxrt_affine_mma", "file": MMA, "source": "kMmaSource", "header": [(MMA, "kMmaDevice")],
        "header_expr": "kMmaDevice",
        "inputs": lambda c: [("x", c["XT"]), ("w", "u32"), ("scales", c["ST"]), ("biases", c["ST"])],
        "outputs": lambda c: [("y", c["OT"])],
        # affine_mma: 16-bit x, any float parameters, every group size, 1-16 tiles of 8 rows (powers
        # of two), 1-8 warps a block and 1-8 units ahead (default 4 and 4).
        "combos": mma_combos,
    },
    {
        "name": "mlxrt_fp4_qmv", "file": FP4, "source": "kFp4Source",
        "header": [(DEVICE_H, "kQmvDevice"), (FP4, "kFp4Device")], "header_expr": "header()",
        "header_def": "std::string header() { return std::string(detail::kQmvDevice) + kFp4Device; }",
        "inputs": lambda c: [("x", c["OT"]), ("w", "u32"), ("scales", "u8")],
        "outputs": lambda c: [("y", c["OT"])],
        # fp4_qmv: either mode, 1-8 rows of x, 1-8 rows a warp (choose_tiling: 1, 2 or 4).
        "combos": fp4_combos,
    },
    {
        "name": "mlxrt_dense_mv_split", "file": QMV, "source": "kSplitSource", "header": [(DEVICE_H, "kQmvDevice")],
        "header_expr": "detail::kQmvDevice",
        "inputs": lambda c: [("x", c["OT"]), ("w", c["OT"])],
        "outputs": lambda c: [("y", c["OT"])],
        # dense_mv's split_k variant: 1-8 rows of x, 1-8 rows a block.
        "combos": lambda full: [{"OT": t, "M": m, "R": r} for t in FLOATS
                                for m, r in (itertools.product(range(1, 9), range(1, 9)) if full
                                             else ((1, 2), (2, 1), (4, 4), (8, 8)))],
    },
    {
        "name": "mlxrt_rms_norm_qkv", "file": FUSED, "source": "kQkvSource",
        "header": [(DEVICE_H, "kQmvDevice"), (DEVICE_H, "kStageRmsNormDevice")], "header_expr": "header()",
        "header_def": FUSED_HEADER,
        "inputs": lambda c: [("x", c["XT"]), ("nw", c["XT"])]
        + [(p + m, w_type(c) if p == "w" else c["ST"]) for m in "qkv" for p in "wsb"],
        "outputs": lambda c: [("yq", c["OT"]), ("yk", c["OT"]), ("yv", c["OT"])],
        "combos": lambda full: qmv_combos(full, MAX_FUSED_ROWS, (1, 2, 4), norm_extra),
    },
    {
        "name": "mlxrt_rms_norm_swiglu", "file": FUSED, "source": "kSwigluSource",
        "header": [(DEVICE_H, "kQmvDevice"), (DEVICE_H, "kStageRmsNormDevice")], "header_expr": "header()",
        "header_def": FUSED_HEADER,
        "inputs": lambda c: [("x", c["XT"]), ("nw", c["XT"])]
        + [(p + m, w_type(c) if p == "w" else c["ST"]) for m in "gu" for p in "wsb"],
        "outputs": lambda c: [("y", c["OT"])],
        # Half choose_tiling's rows per warp, at least 1; the two matrices in turn or paired.
        "combos": lambda full: [{**c, "PAIRED": i % 2 == 1}
                                for i, c in enumerate(qmv_combos(full, MAX_FUSED_ROWS, (1, 2), norm_extra))],
    },
    {
        "name": "mlxrt_qmv_residual", "file": FUSED, "source": "kResidualSource",
        "header": [(DEVICE_H, "kQmvDevice")], "header_expr": "detail::kQmvDevice",
        "inputs": lambda c: [("x", c["XT"]), ("w", w_type(c)), ("scales", c["ST"]), ("biases", c["ST"]),
                             ("res", c["OT"])],
        "outputs": lambda c: [("y", c["OT"])],
        "combos": lambda full: qmv_combos(full, MAX_FUSED_ROWS, (1, 2, 4), no_extra),
    },
    {
        "name": "mlxrt_qk_norm_rope", "file": QK_ROPE, "source": "kSource", "header": [(ROPE_H, "kNormRopeDevice")],
        "header_expr": "detail::kNormRopeDevice",
        "inputs": lambda c: [("q", c["QT"]), ("k", c["QT"]), ("qw", c["QT"]), ("kw", c["QT"]), ("off", "i32"),
                             ("freqs", "f32" if c["FREQS"] else "i32")],
        "outputs": lambda c: [("yq", c["QT"]), ("yk", c["QT"])],
        "combos": qk_rope_combos,
    },
    {
        "name": "mlxrt_decoder_layer", "file": LAYER, "source": "kSource",
        "header": [(DEVICE_H, "kQmvDevice"), (DEVICE_H, "kStageRmsNormDevice"), (ROPE_H, "kNormRopeDevice"),
                   (LAYER, "kLayerDevice")],
        "header_expr": "header()",
        "header_def": "return std::string(detail::kQmvDevice) + detail::kStageRmsNormDevice + detail::kNormRopeDevice "
                      "+ kLayerDevice;",
        "inputs": layer_inputs,
        "outputs": lambda c: [("y", c["XT"]), ("bar_next", "u32"), ("scratch", "u8")],
        "combos": layer_combos,
    },
    {
        "name": "mlxrt_gated_delta_step", "file": DELTA, "source": "kStepSource",
        "header": "#include <cooperative_groups/reduce.h>\n",
        "inputs": lambda c: [("q", c["QT"]), ("k", c["QT"]), ("v", c["VT"]), ("g", "f32"), ("beta", c["BT"]),
                             ("state_in", "f32")],
        "outputs": lambda c: [("y", c["QT"]), ("state_out", "f32")],
        "combos": delta_combos,
    },
    {
        "name": "mlxrt_conv_silu", "file": DELTA, "source": "kConvSiluSource",
        "header": "#include \"mlx/backend/cuda/device/unary_ops.cuh\"\n"
                  "#include \"mlx/backend/cuda/device/binary_ops.cuh\"\n",
        "inputs": lambda c: [("x", c["XT"]), ("w", c["XT"])],
        "outputs": lambda c: [("out", c["XT"])],
        "combos": conv_combos,
    },
]


class CheckError(Exception):
    pass


# ---- the C++ side: source constants and the cuda_kernel(...) calls ------------------------------
# Where a kernel's text is given: a KernelSpec (kernels/cuda/kernel_source.h), or MLX's function.
KERNEL_TEXT = r'(?:cuda_kernel\(|KernelSpec(?: spec)?\{)'


def cpp_constant(path, name):
    text = (SOURCES / path).read_text()
    m = re.search(r'constexpr const char\* ' + re.escape(name) + r' = R"\((.*?)\)";', text, re.S)
    if not m:
        raise CheckError(f"{path}: no constexpr const char* {name} = R\"(...)\"; (the table is out of date)")
    return m.group(1)


def names_of(list_text):
    return [n for n in re.findall(r'"(\w+)"', list_text)]


def check_call(k):
    """The cuda_kernel(...) call of k["name"] in its file: inputs, outputs, source, header, and the
    template-argument names of the launch that follows, in their order (which MLX keeps)."""
    text = (SOURCES / k["file"]).read_text()
    call = re.search(KERNEL_TEXT + r'\s*"' + re.escape(k["name"]) + r'",\s*\{([^}]*)\},\s*\{([^}]*)\},\s*(\w+),\s*'
                     r'((?:"(?:[^"\\]|\\.)*"\s*)+|[\w:]+\(\)|[\w:]+)', text)
    if not call:
        raise CheckError(f"{k['file']}: no KernelSpec{{\"{k['name']}\", {{inputs}}, {{outputs}}, source, header...}} "
                         "(or mx::fast::cuda_kernel call)")
    where = f"{k['file']}: cuda_kernel(\"{k['name']}\")"
    sample = k["combos"](False)[0]
    for what, got, want in (("inputs", names_of(call.group(1)), [n for n, _ in k["inputs"](sample)]),
                            ("outputs", names_of(call.group(2)), [n for n, _ in k["outputs"](sample)])):
        if got != want:
            raise CheckError(f"{where} has {what} {got}, the table {want}: update tools/cuda/nvrtc_check.py")
    if call.group(3) != k["source"]:
        raise CheckError(f"{where} compiles {call.group(3)}, the table {k['source']}")
    header = call.group(4).strip()
    if isinstance(k["header"], str):
        if not header.startswith('"') or ast.literal_eval(header) != k["header"]:
            raise CheckError(f"{where} has header {header}, the table {k['header']!r}")
    elif header != k["header_expr"]:
        raise CheckError(f"{where} has header {header}, the table {k['header_expr']}")
    if header == "header()" and k["header_def"] not in text:
        raise CheckError(f"{k['file']}: header() is no longer `{k['header_def']}`")
    # The launch: a KernelLaunch of the kernel's spec (kernel_launch.h), else the call after the
    # kernel's CachedKernel or MLX's function.
    spec_fn = re.escape(k["name"].removeprefix("mlxrt_")) + r'_spec\(\)'
    as_data = re.search(r'(?:KernelLaunch)?\{\s*&' + spec_fn + r',', text)
    if as_data:
        launch = text[as_data.end():text.index("};", as_data.end())]
    else:
        made = re.search(r'CachedKernel kernel\(' + spec_fn + r'\)', text)
        start = made.end() if made else call.end()
        launch = text[start:text.index("std::nullopt", start)]
    targs = re.findall(r'\{"(\w+)",', launch)
    want = [t for t in sample if t not in ("VT", "BT")]  # v's and beta's dtypes are inputs', not template args
    if sorted(targs) != sorted(want):
        raise CheckError(f"{where}: the launch passes template args {targs}, the table {want}")
    return targs


def check_all_listed():
    """Every kernel text under src/mlxrt has a row in KERNELS: a new kernel is checked too."""
    listed = {k["name"] for k in KERNELS}
    for path in sorted((SOURCES / "src" / "mlxrt").rglob("*.[ch]*")):
        for name in re.findall(KERNEL_TEXT + r'\s*"(\w+)"', path.read_text()):
            if name not in listed:
                raise CheckError(f"{path.relative_to(SOURCES)}: cuda_kernel(\"{name}\") has no row in "
                                 "tools/cuda/nvrtc_check.py's KERNELS")


# ---- what NVRTC needs: the pinned wheels, unpacked once ------------------------------------------
def mlx_version():
    for line in (ROOT / "versions.env").read_text().splitlines():
        if line.startswith("MLX_VERSION="):
            return line.split("=", 1)[1].strip()
    raise CheckError("versions.env: no MLX_VERSION=")


def fetch(cache):
    """Downloads (pip, no dependencies) and unpacks the wheels into cache; a stamp skips it next time."""
    version = mlx_version()
    stamp = cache / "root" / f".done-{version}-{NVIDIA_SERIES}"
    if stamp.exists():
        return cache / "root"
    dl = cache / "dl"
    dl.mkdir(parents=True, exist_ok=True)
    reqs = [f"mlx-cuda-13=={version}", f"nvidia-cuda-nvrtc=={NVIDIA_SERIES}",
            f"nvidia-cuda-runtime=={NVIDIA_SERIES}", f"nvidia-cuda-crt=={NVIDIA_SERIES}"]
    print(f"nvrtc_check: downloading {' '.join(reqs)}", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                    "-d", str(dl), *reqs], check=True)
    root = cache / "root"
    for wheel in sorted(dl.glob("*.whl")):
        if wheel.name.startswith("mlx_cuda_13-") and f"-{version}-" not in wheel.name:
            continue
        # zipfile, not unzip: the mlx wheel's members use a compression unzip may not know.
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                if info.filename.startswith("mlx/include/") or info.filename.startswith("nvidia/") or \
                        info.filename == "mlx/lib/libmlx.so":
                    z.extract(info, root)
    extract_jit_headers(root / "mlx" / "lib" / "libmlx.so", root / "jit-headers")
    (root / "mlx" / "lib" / "libmlx.so").unlink()  # 140 MB read once for its headers
    stamp.touch()
    return root


def extract_jit_headers(lib, out):
    """MLX's device headers as its jit_module.cpp hands them to NVRTC: two arrays of C-string
    pointers, g_include_names ("mlx/backend/cuda/device/...") and g_headers (their texts), in a
    position-independent library, so each slot is a R_X86_64_RELATIVE relocation whose addend is the
    string's address."""
    data = lib.read_bytes()
    phoff, = struct.unpack_from("<Q", data, 0x20)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    loads = []
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 1:  # PT_LOAD
            loads.append((p_vaddr, p_offset, p_filesz))

    def to_offset(addr):
        return next(addr - va + off for va, off, size in loads if va <= addr < va + size)

    def to_addr(offset):
        return next(offset - off + va for va, off, size in loads if off <= offset < off + size)

    def cstr(addr):
        o = to_offset(addr)
        return data[o:data.index(b"\0", o)].decode("utf-8", "replace")

    slots = {}
    for i in range(shnum):
        _, sh_type, _, _, sh_offset, sh_size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        if sh_type == 4:  # SHT_RELA
            for j in range(sh_offset, sh_offset + sh_size, 24):
                r_offset, r_info, r_addend = struct.unpack_from("<QQq", data, j)
                if r_info & 0xFFFFFFFF == 8:  # R_X86_64_RELATIVE
                    slots[r_offset] = r_addend
    prefix = "mlx/backend/cuda/device/"
    first = to_addr(data.index((prefix + "atomic_ops.cuh\0").encode()))
    bases = [s for s, a in slots.items() if a == first]
    if len(bases) != 1:
        raise CheckError(f"{lib}: {len(bases)} arrays start with {prefix}atomic_ops.cuh (MLX's header table moved?)")
    names = []
    while bases[0] + 8 * len(names) in slots and cstr(slots[bases[0] + 8 * len(names)]).startswith(prefix):
        names.append(cstr(slots[bases[0] + 8 * len(names)]))
    utils = names.index(prefix + "utils.cuh")
    found = []
    for base in sorted(slots):
        if all(base + 8 * i in slots for i in range(len(names))):
            try:
                texts = [cstr(slots[base + 8 * i]) for i in range(len(names))]
            except (StopIteration, ValueError):
                continue
            if "namespace mlx::core::cu" in texts[utils] and all("#" in t for t in texts):
                found.append(texts)
    if len(found) != 1:
        raise CheckError(f"{lib}: {len(found)} candidate header-text arrays for {len(names)} names")
    for name, text in zip(names, found[0]):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)


# ---- NVRTC ---------------------------------------------------------------------------------------
def build_kernel(name, header, source, inputs, outputs, targs):
    """MLX's build_kernel: default header, the user header, the signature (shape/strides/ndim of an
    input where the source mentions them), the template args as constexpr / using lines, the body."""
    src = '\n#include "mlx/backend/cuda/device/utils.cuh"\n\n#include <cooperative_groups.h>\n\n' + header
    src += "namespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n"
    src += f"__global__ void custom_kernel_{name}(\n"
    for n, t in inputs:
        src += f"    const {CUDA_TYPE[t]}* {n},\n"
        if n + "_shape" in source:
            src += f"    const __grid_constant__ Shape {n}_shape,\n"
        if n + "_strides" in source:
            src += f"    const __grid_constant__ Strides {n}_strides,\n"
        if n + "_ndim" in source:
            src += f"    const __grid_constant__ int {n}_ndim,\n"
    src += ",\n".join(f"    {CUDA_TYPE[t]}* {n}" for n, t in outputs) + ") {\n"
    for k, v in targs:
        if isinstance(v, bool):  # fmt writes MLX's bool template args as true / false
            src += f"  constexpr bool {k} = {'true' if v else 'false'};\n"
        else:
            src += f"  using {k} = {CUDA_TYPE[v]};\n" if isinstance(v, str) else f"  constexpr int {k} = {v};\n"
    src += "\n" + source + "\n}\n\n} // namespace mlx::core::cu\n"
    return src


class Nvrtc:
    def __init__(self, root):
        lib = next((root / "nvidia").glob("cu13/lib/libnvrtc.so.13"))
        self.lib = ctypes.CDLL(str(lib))
        headers = sorted((root / "jit-headers").rglob("*"))
        headers = [h for h in headers if h.is_file()]
        self.names = [str(h.relative_to(root / "jit-headers")).encode() for h in headers]
        self.texts = [h.read_bytes() for h in headers]
        # MLX's include_path_args: the wheel's include/, its CCCL, the CUDA runtime wheel's headers.
        self.options = [b"--device-as-default-execution-space", f"--gpu-architecture={ARCH}".encode(),
                        b"--ptxas-options=--verbose",
                        f"--include-path={root / 'mlx' / 'include'}".encode(),
                        f"--include-path={root / 'mlx' / 'include' / 'cccl'}".encode(),
                        f"--include-path={root / 'nvidia' / 'cu13' / 'include'}".encode()]

    def compile(self, name, src):
        """(ok, log). The program gets MLX's device headers by name, as MLX passes them."""
        lib = self.lib
        prog = ctypes.c_void_p()
        n = len(self.names)
        rc = lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), f"{name}.cu".encode(), n,
                                    (ctypes.c_char_p * n)(*self.texts), (ctypes.c_char_p * n)(*self.names))
        if rc != 0:
            return False, f"nvrtcCreateProgram failed ({rc})"
        try:
            rc = lib.nvrtcCompileProgram(prog, len(self.options), (ctypes.c_char_p * len(self.options))(*self.options))
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value + 1)
            lib.nvrtcGetProgramLog(prog, log)
            return rc == 0, log.value.decode(errors="replace")
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


def resources(log):
    """ptxas's 'Used N registers' and spill stores / loads, from the --verbose log."""
    regs = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    stack = re.search(r"(\d+) bytes stack frame", log)
    return (int(regs.group(1)) if regs else -1, int(spill.group(1)) + int(spill.group(2)) if spill else 0,
            int(stack.group(1)) if stack else 0)


def label(c):
    return " ".join(f"{k}={v}" for k, v in c.items())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=ROOT / "build-nvrtc", help="download / unpack folder")
    ap.add_argument("--full", action="store_true", help="every combination (the default covers each value)")
    ap.add_argument("--only", help="kernels whose name contains this")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per combination")
    ap.add_argument("--sources", type=Path, help="read the C++ from this copy of the tree (e.g. to try an edit)")
    args = ap.parse_args()
    global SOURCES
    SOURCES = args.sources.resolve() if args.sources else ROOT
    try:
        kernels = [k for k in KERNELS if not args.only or args.only in k["name"]]
        check_all_listed()
        jobs = []
        for k in kernels:
            order = check_call(k)
            header = k["header"] if isinstance(k["header"], str) else \
                "".join(cpp_constant(f, c) for f, c in k["header"])
            source = cpp_constant(k["file"], k["source"])
            for c in k["combos"](args.full):
                targs = [(t, c[t]) for t in order]
                jobs.append((k["name"], c, build_kernel(k["name"], header, source, k["inputs"](c), k["outputs"](c),
                                                        targs)))
        nvrtc = Nvrtc(fetch(args.cache))
    except (CheckError, subprocess.CalledProcessError) as e:
        print(f"nvrtc_check: {e}", file=sys.stderr)
        return 2
    print(f"nvrtc_check: {len(jobs)} compilations ({ARCH}) of {len(kernels)} kernels", flush=True)
    failed = 0
    stats = {}
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for (name, c, _), (ok, log) in zip(jobs, pool.map(lambda j: nvrtc.compile(j[0], j[2]), jobs)):
            regs, spill, stack = resources(log)
            s = stats.setdefault(name, {"n": 0, "regs": [], "spill": 0, "worst": ""})
            s["n"] += 1
            if not ok:
                failed += 1
                print(f"FAIL {name} [{label(c)}]\n{log.strip()}\n", flush=True)
                continue
            s["regs"].append(regs)
            if spill > s["spill"]:
                s["spill"], s["worst"] = spill, label(c)
            if args.verbose:
                print(f"ok   {name} [{label(c)}] registers={regs} spill_bytes={spill} stack={stack}", flush=True)
    for name, s in stats.items():
        regs = f"registers {min(s['regs'])}-{max(s['regs'])}" if s["regs"] else "no registers"
        spill = f"spills up to {s['spill']} bytes [{s['worst']}]" if s["spill"] else "no spills"
        print(f"{name}: {s['n']} combinations, {regs}, {spill}")
    print(f"{len(jobs) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
