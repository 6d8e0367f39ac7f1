#!/usr/bin/env python3
"""mlxrt's tokenizer vs HF tokenizers (Rust), encode throughput on one thread, side by side in one
run over the same ~4 MB of mixed text (Python source, multi-script prose, emoji, random Unicode).
Both encode each document once with add_special_tokens=False after loading; the ids are compared
by checksum. Ratio = HF seconds / mlxrt seconds (above 1: mlxrt is faster).

The C++ driver (bench/tokenizer_bench.cpp) is compiled against a build directory's static
libraries (--build, default build/; it needs the mlxrt_tokenizer and mlxrt_util targets).

Usage: bench/tokenizer_bench.py [--build build] [--mb 4] [--tokenizers qwen3 llama3_1 gemma3 phi-3-mini]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MLXRT_SHARED_DIR", ROOT.parent / "shared"))
sys.path.insert(0, str(ROOT / "tools"))
from tokenizer_oracle import FIXED, random_strings  # noqa: E402


def corpus(megabytes, seed=5):
    rng = random.Random(seed)
    site = Path(json.__file__).parent.parent  # the standard library: real code and docstrings
    sources = sorted(site.glob("*.py"))
    docs, size, target = [], 0, megabytes * 1_000_000
    while size < target:
        kind = rng.random()
        if kind < 0.5:
            text = rng.choice(sources).read_text(encoding="utf-8", errors="replace")[:20000]
        elif kind < 0.85:
            text = " ".join(rng.choice(FIXED) for _ in range(40))
        else:
            text = "\n".join(random_strings(50, rng.randrange(1 << 30)))
        docs.append(text.replace("\0", " "))  # NUL separates documents in the driver's input
        size += len(text.encode())
    return docs


def build_driver(build):
    exe = build / "tokenizer_bench"
    src = ROOT / "bench" / "tokenizer_bench.cpp"
    if exe.exists() and exe.stat().st_mtime > src.stat().st_mtime:
        return exe
    subprocess.run(["cmake", "--build", str(build), "--target", "mlxrt_tokenizer", "mlxrt_util"], check=True)
    subprocess.run(["c++", "-std=c++20", "-O2", f"-I{ROOT / 'src'}", str(src), "-o", str(exe),
                    str(build / "libmlxrt_tokenizer.a"), str(build / "libmlxrt_util.a"),
                    "-lpcre2-8", "-lutf8proc", "-lsentencepiece", "-lfmt"], check=True)
    return exe


def hf_run(tok_dir, docs):
    from tokenizers import Tokenizer
    t0 = time.perf_counter()
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    t1 = time.perf_counter()
    tokens, checksum = 0, 0
    t2 = time.perf_counter()
    all_ids = [tok.encode(d, add_special_tokens=False).ids for d in docs]
    t3 = time.perf_counter()
    for ids in all_ids:
        for i in ids:
            checksum = (checksum * 1000003 + i) % (1 << 64)
        tokens += len(ids)
    return {"load_s": t1 - t0, "encode_s": t3 - t2, "tokens": tokens, "checksum": checksum}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--mb", type=float, default=4)
    ap.add_argument("--tokenizers", nargs="+", default=["qwen3", "llama3_1", "gemma3", "phi-3-mini"])
    args = ap.parse_args()
    exe = build_driver(Path(args.build))
    docs = corpus(args.mb)
    with tempfile.NamedTemporaryFile(suffix=".txt", delete=False) as f:
        f.write("\0".join(docs).encode())
        path = f.name
    mb = sum(len(d.encode()) for d in docs) / 1e6
    print(f"corpus: {len(docs)} documents, {mb:.2f} MB; one thread each")
    print(f"{'tokenizer':<12} {'HF s':>8} {'mlxrt s':>8} {'HF MB/s':>8} {'mlxrt MB/s':>10} {'ratio':>6}  ids")
    for name in args.tokenizers:
        tok_dir = SHARED / "data" / "tokenizers" / name
        ours = json.loads(subprocess.run([str(exe), str(tok_dir), path], check=True, capture_output=True,
                                         text=True).stdout)
        hf = hf_run(tok_dir, docs)
        same = "equal" if (ours["tokens"], ours["checksum"]) == (hf["tokens"], hf["checksum"]) else "DIFFER"
        print(f"{name:<12} {hf['encode_s']:>8.3f} {ours['encode_s']:>8.3f} {mb / hf['encode_s']:>8.2f} "
              f"{mb / ours['encode_s']:>10.2f} {hf['encode_s'] / ours['encode_s']:>6.2f}  {same} "
              f"(load: HF {hf['load_s']:.2f}s, mlxrt {ours['load_s']:.2f}s)")
    os.unlink(path)


if __name__ == "__main__":
    main()
