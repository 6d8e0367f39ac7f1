#!/usr/bin/env python3
"""The per-token cost of constrained decoding: `mlxrt generate` decode tok/s with a JSON schema
(--json-schema) against the same run unconstrained, on the tiny server fixture (Qwen3's 151,669-token
vocabulary, so the mask work is the real one) and on the generated ~0.6B qwen3-shaped model of
generate_bench.py (4-bit). Temperature 1 with a seed; medians of --runs runs. Overhead = 1 -
constrained tok/s / plain tok/s (the target is at most 10%).

Then the host and device cost of the masking itself, isolated from the model, on the tiny model's
vocabulary: bench/grammar_mask_bench.cpp (compiled here against build/'s static libraries).

Usage: bench/structured_output_bench.py [--runs 3] [--gen-tokens 128] [--models tiny q4 DIR...] [--no-mask-bench]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import generate_bench  # noqa: E402  (the 0.6B-shaped model and paths)

# Long output: an array of objects with a free string, numbers and an enum.
SCHEMA = {"type": "array", "items": {"type": "object", "properties": {
    "name": {"type": "string"}, "score": {"type": "number"}, "tag": {"enum": ["a", "b", "c"]}},
    "required": ["name", "score", "tag"]}}
GEN = re.compile(r"Generation: (\d+) tokens, ([\d.]+) tokens-per-sec")


def tiny_model():
    out = subprocess.run([str(generate_bench.PY), str(ROOT / "tools" / "make_server_fixture.py"), "--out",
                          str(generate_bench.MODELS)], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def decode_rate(model, gen_tokens, seed, extra):
    cmd = [str(generate_bench.BIN), "generate", "--model", str(model), "--prompt", "List some items as JSON.",
           "--ignore-chat-template", "--temp", "1.0", "--seed", str(seed), "--max-tokens", str(gen_tokens), *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    m = GEN.search(out)
    return int(m.group(1)), float(m.group(2))


def mask_bench(model, schema):
    build = ROOT / "build"
    exe = build / "grammar_mask_bench"
    src = ROOT / "bench" / "grammar_mask_bench.cpp"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        sp = next(line.split("=", 1)[1] for line in (build / "CMakeCache.txt").read_text().splitlines()
                  if line.startswith("MLXRT_XGRAMMAR_SITE_PACKAGES:"))
        mlx = subprocess.run([str(generate_bench.PY), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
        subprocess.run(["cmake", "--build", str(build), "--target", "mlxrt_structured"], check=True)
        subprocess.run(["c++", "-std=c++20", "-O2", f"-I{ROOT / 'src'}", f"-I{mlx}/mlx/include", str(src), "-o", str(exe),
                        str(build / "libmlxrt_structured.a"), str(build / "libmlxrt_generate.a"),
                        str(build / "libmlxrt_model.a"), str(build / "libmlxrt_cache.a"), str(build / "libmlxrt_io.a"),
                        str(build / "libmlxrt_tokenizer.a"),
                        str(build / "libmlxrt_util.a"), f"-L{mlx}/mlx/lib", "-lmlx", f"-L{sp}/xgrammar",
                        "-l:libxgrammar_bindings.so", f"-L{sp}/tvm_ffi/lib", "-ltvm_ffi", "-lpcre2-8", "-lutf8proc",
                        "-lsentencepiece", "-lfmt", "-Wl,--disable-new-dtags",
                        f"-Wl,-rpath,{mlx}/mlx/lib:{sp}/xgrammar:{sp}/tvm_ffi/lib"], check=True)
    out = subprocess.run([str(exe), str(model), str(schema), "300"], check=True, capture_output=True, text=True)
    print("mask (tiny vocabulary):", out.stdout.strip(), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--models", nargs="+", default=["tiny", "q4"],
                    help="tiny, q4 (made here) or model directories")
    ap.add_argument("--no-mask-bench", dest="mask_bench", action="store_false",
                    help="skip the masking-alone timing (it compiles against build/)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        schema = Path(tmp) / "schema.json"
        schema.write_text(json.dumps(SCHEMA))
        for name in args.models:
            if Path(name).is_dir():
                model = Path(name)  # a model directory made elsewhere (the GPU benchmark's models)
            else:
                model = tiny_model() if name == "tiny" else generate_bench.ensure_model(name)
            plain, constrained, lengths = [], [], []
            for run in range(args.runs):
                plain.append(decode_rate(model, args.gen_tokens, run, [])[1])
                n, rate = decode_rate(model, args.gen_tokens, run, ["--json-schema", str(schema)])
                constrained.append(rate)
                lengths.append(n)
            p, c = statistics.median(plain), statistics.median(constrained)
            print(f"{name}: plain {p:.1f} tok/s, constrained {c:.1f} tok/s ({statistics.median(lengths)} tokens), "
                  f"overhead {100 * (1 - c / p):.1f}%", flush=True)
        if args.mask_bench:
            mask_bench(tiny_model(), schema)


if __name__ == "__main__":
    main()
