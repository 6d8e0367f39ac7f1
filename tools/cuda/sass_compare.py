#!/usr/bin/env python3
"""Whether mlxrt's own compile of its L3 CUDA kernels (MLXRT_CUDA_SELF_COMPILE=1) is MLX's compile of
them, instruction for instruction (`make check-cuda-kernels`; no GPU needed).

MLX compiles a custom kernel from its own wrapping of the body (its prelude, then the signature:
each input with a `__grid_constant__ Shape` after it where the body reads its shape, then the
outputs: nvrtc_check.py's build_kernel). mlxrt compiles the same body and device code behind a small
prelude of its own, with the same parameters (kernels/cuda/kernel_source.cpp; the program is printed
by the mlxrt_kernel_program helper, so this compares the C++'s text, not a copy), and MLX loads the
result as its own (kernels/cuda/mlx_kernel_cache.h). For each of nvrtc_check.py's combinations of the
L3 kernels both are compiled to sm_90a machine code, disassembled with nvdisasm, and compared with
three things set aside: which registers hold what, the address of a global (the sin/cos reduction
table), and the kernel's own symbol (MLX's is mangled). Parameters are compared by name at their
offsets. "identical" then means the same instructions with the same operands in the same order,
reading the same parameters: the same arithmetic, the same bytes out, launched with MLX's arguments.

Needs the build's mlxrt_kernel_program (cmake --build build --target mlxrt_kernel_program) and
downloads NVIDIA's nvdisasm wheel into the nvrtc_check cache once (13.0 is not published; 13.2
reads sm_90a cubins).
"""
import argparse
import concurrent.futures
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nvrtc_check as nc

NVDISASM_SERIES = "13.2.*"
PARAM_BASE = 0x210  # sm_90's first kernel parameter in constant bank 0
MAX_NDIM = 10  # MLX's Shape: cuda::std::array<int32_t, MAX_NDIM> (device/config.h)
SELF_COMPILED = ("mlxrt_affine_qmv", "mlxrt_dense_mv_split", "mlxrt_rms_norm_qkv", "mlxrt_rms_norm_swiglu",
                 "mlxrt_qmv_residual", "mlxrt_qk_norm_rope", "mlxrt_decoder_layer", "mlxrt_affine_qmv_chunks",
                 "mlxrt_affine_mma", "mlxrt_fp4_qmv")
TYPE_NAME = {"bf16": "bf16", "f16": "f16", "f32": "f32", "u8": "u8", "u32": "u32", "u64": "u64", "i32": "i32"}


def fetch_nvdisasm(cache):
    binary = cache / "root" / "nvdisasm" / "nvidia" / "cu13" / "bin" / "nvdisasm"
    if binary.exists():
        return binary
    dl = cache / "dl"
    dl.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", "-d",
                    str(dl), f"nvidia-cuda-nvdisasm=={NVDISASM_SERIES}"], check=True)
    wheel = sorted(dl.glob("nvidia_cuda_nvdisasm-*.whl"))[-1]
    with zipfile.ZipFile(wheel) as z:
        z.extractall(cache / "root" / "nvdisasm")
    binary.chmod(0o755)
    return binary


def cubin(nvrtc, source, with_mlx_headers, options):
    """NVRTC's sm_90a image of source (MLX's device headers by name where MLX would pass them)."""
    lib = nvrtc.lib
    import ctypes
    prog = ctypes.c_void_p()
    names, texts = (nvrtc.names, nvrtc.texts) if with_mlx_headers else ([], [])
    n = len(names)
    lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"kernel.cu", n, (ctypes.c_char_p * n)(*texts),
                           (ctypes.c_char_p * n)(*names))
    try:
        opts = [o.encode() for o in options]
        if lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)) != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value + 1)
            lib.nvrtcGetProgramLog(prog, log)
            raise nc.CheckError(log.value.decode(errors="replace")[:2000])
        size = ctypes.c_size_t()
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        image = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetCUBIN(prog, image)
        return image.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def instructions(nvdisasm, image, params, scratch):
    """The kernel's instructions: parameters by name, registers renamed in order of first use,
    globals' addresses dropped."""
    scratch.write_bytes(image)
    text = subprocess.run([str(nvdisasm), "-c", str(scratch)], capture_output=True, text=True, check=True).stdout
    out, names = [], {}

    def register(m):
        r = m.group(0)
        return names.setdefault(r, re.sub(r"\d+$", "", r) + "#" + str(len(names)))

    for line in text.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if not m:
            continue
        s = re.sub(r"c\[0x0\]\[(0x[0-9a-f]+)\]", lambda p: "param:" + params.get(int(p.group(1), 16), p.group(1)),
                   m.group(1))
        s = re.sub(r"c\[0x4\]\[0x[0-9a-f]+\]", "global", s)
        s = re.sub(r"`\(\w+\)", "`(kernel)", s)  # a return to the kernel's own symbol: MLX's is mangled
        out.append(re.sub(r"\b(UR\d+|UP\d+|R\d+|P\d+)\b", register, s))
    return out


def mlx_layout(inputs, outputs, source):
    """Parameter offset -> name in MLX's signature: each input (and its Shape where read), the outputs."""
    names, off = {}, PARAM_BASE
    for name, _ in inputs:
        off = (off + 7) // 8 * 8
        names[off], names[off + 4], off = name, name + ".hi", off + 8
        if name + "_shape" in source:
            for d in range(MAX_NDIM):
                names[off + 4 * d] = f"{name}_shape[{d}]"
            off += 4 * MAX_NDIM
    for name, _ in outputs:
        off = (off + 7) // 8 * 8
        names[off], names[off + 4], off = name, name + ".hi", off + 8
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=nc.ROOT / "build-nvrtc")
    ap.add_argument("--program", type=Path, default=nc.ROOT / "build" / "mlxrt_kernel_program",
                    help="the build's mlxrt_kernel_program")
    ap.add_argument("--full", action="store_true", help="every combination nvrtc_check.py --full compiles")
    ap.add_argument("--only", help="kernels whose name contains this")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--sources", type=Path,
                    help="read MLX's side (the kernels' text as MLX wraps it) from this copy of the tree: a change of "
                         "a kernel's text that must keep its machine code compared with the text before it")
    args = ap.parse_args()
    if args.sources:
        nc.SOURCES = args.sources.resolve()
    root = nc.fetch(args.cache)
    nvdisasm = fetch_nvdisasm(args.cache)
    nvrtc = nc.Nvrtc(root)
    mlx_options = [o.decode() for o in nvrtc.options if b"ptxas" not in o]
    include = root / "nvidia" / "cu13" / "include"
    self_options = [f"--gpu-architecture={nc.ARCH}", f"--include-path={include}"]  # nvrtc.h's device_options
    ndim = 2  # every input of the L3 kernels has dimensions (MLX passes a Shape only then)
    jobs = []
    for k in nc.KERNELS:
        if k["name"] not in SELF_COMPILED or (args.only and args.only not in k["name"]):
            continue
        order = nc.check_call(k)
        header = k["header"] if isinstance(k["header"], str) else \
            "".join(nc.cpp_constant(f, c) for f, c in k["header"])
        source = nc.cpp_constant(k["file"], k["source"])
        for c in k["combos"](args.full):
            jobs.append((k, c, order, header, source))

    def compare(index, job):
        """(same, message) for one combination; each job its own scratch file."""
        k, c, order, header, source = job
        targs = [(t, c[t]) for t in order]
        inputs, outputs = k["inputs"](c), k["outputs"](c)
        mlx_source = nc.build_kernel(k["name"], header, source, inputs, outputs, targs)
        request = {"kernel": k["name"], "inputs": [TYPE_NAME[t] for _, t in inputs],
                   "ndims": [ndim] * len(inputs), "outputs": [TYPE_NAME[t] for _, t in outputs],
                   "template_args": [[name, TYPE_NAME.get(v, v) if isinstance(v, str) else v] for name, v in targs]}
        own = subprocess.run([str(args.program)], input=json.dumps(request), capture_output=True, text=True)
        if own.returncode != 0:
            raise nc.CheckError(own.stderr.strip())
        scratch = args.cache / f"sass_compare.{index}.cubin"
        try:
            params = mlx_layout(inputs, outputs, source)
            a = instructions(nvdisasm, cubin(nvrtc, mlx_source, True, mlx_options), params, scratch)
            b = instructions(nvdisasm, cubin(nvrtc, own.stdout, False, self_options), params, scratch)
        finally:
            scratch.unlink(missing_ok=True)
        if a == b:
            return True, ""
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return False, (f"DIFF {k['name']} [{nc.label(c)}]: {len(a)} vs {len(b)} instructions, first at {first}: "
                       f"{a[first] if first < len(a) else '-'} | {b[first] if first < len(b) else '-'}")

    counts, failed = {}, 0
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for job, (same, message) in zip(jobs, pool.map(compare, range(len(jobs)), jobs)):
            counts.setdefault(job[0]["name"], [0, 0])[0 if same else 1] += 1
            if not same:
                failed += 1
                print(message, flush=True)
    for name, (same, diff) in counts.items():
        print(f"{name}: {same} of {same + diff} combinations identical")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
