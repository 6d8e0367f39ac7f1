#!/usr/bin/env python3
"""L1 checks beyond tests/parity, on whatever device MLX picks (the GPU on a CUDA machine):

1. greedy: `mlxrt generate` gives the same 128 greedy tokens as mlx-lm's generate_step.
2. determinism of mlx-lm itself: the oracle's full and incremental logits and greedy tokens,
   hashed in two separate processes and twice within each; any difference is named.
3. real dimensions: `mlxrt logits` (full and --incremental) byte-equal to mlx-lm on the
   benchmark models given with --models (Qwen3-0.6B shapes, say).

Usage: gpu_checks.py --bin MLXRT --fixtures DIR [--models DIR ...] --out FILE.json
Exit status 1 when a check fails.
"""
import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

GREEDY_FIXTURES = ["qwen3_bf16", "qwen3_q4_g64", "qwen3_mixed", "llama_bf16", "llama_q8_g128_sharded", "mistral_bf16"]
DETERMINISM_FIXTURES = ["qwen3_bf16", "qwen3_fp16_untied", "qwen3_fp32", "qwen3_q4_g64", "qwen3_q8_g32",
                        "qwen3_mxfp4", "qwen3_nvfp4", "qwen3_yarn", "llama_bf16", "llama_q4_g64",
                        "llama_q8_g128_sharded"]
TOKENS = [1, 17, 300, 42, 5, 511, 77, 8, 256, 3, 99, 150]
PROMPT = [1, 5, 9, 200, 33]


def digest(a):
    import oracle
    return hashlib.sha256(oracle.raw_bytes(a)).hexdigest()[:16]


def oracle_hashes(fixtures: Path, names):
    """{fixture: {full, incremental, greedy}} computed twice in this process."""
    import oracle
    out = {}
    for name in names:
        path = fixtures / name
        if not path.exists():
            continue
        try:
            model, config = oracle.load(path)
            for rep in range(2):
                h = {"full": digest(oracle.full_logits(model, TOKENS)),
                     "incremental": digest(oracle.incremental_logits(model, TOKENS)),
                     "greedy": hashlib.sha256(str(oracle.greedy_tokens(model, config, PROMPT, 128)).encode()).hexdigest()[:16]}
                out.setdefault(name, []).append(h)
        except Exception as e:  # an op this device lacks: reported, the other fixtures still run
            out[name] = [{"error": f"{type(e).__name__}: {e}"[:300]}]
    return out


def run(cmd):
    proc = subprocess.run(list(map(str, cmd)), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd[:2]))} failed: {proc.stderr[-1500:]}")
    return proc.stdout


def check_greedy(binary, fixtures: Path):
    import oracle
    results = {}
    for name in GREEDY_FIXTURES:
        path = fixtures / name
        try:
            model, config = oracle.load(path)
            ref = oracle.greedy_tokens(model, config, PROMPT, 128)
            out = run([binary, "generate", "--model", path, "--prompt-tokens", ",".join(map(str, PROMPT)),
                       "--max-tokens", 128])
            body = out.split("==========\n")[1].strip()
            ours = [int(t) for t in body.split()] if body and not body.startswith("No text") else []
            results[name] = {"equal": ours == ref, "tokens": len(ref)}
        except Exception as e:
            results[name] = {"equal": False, "error": f"{type(e).__name__}: {e}"[:300]}
    return results


def check_logits(binary, model_dir: Path, n_tokens=32):
    import mlx.core as mx
    import oracle
    model, config = oracle.load(model_dir)
    tokens = [1000 + (i * 7919) % 140000 for i in range(n_tokens)]
    res = {}
    for mode, ref in (("full", oracle.full_logits(model, tokens)), ("incremental", oracle.incremental_logits(model, tokens))):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "l.safetensors"
            run([binary, "logits", "--model", model_dir, "--tokens", ",".join(map(str, tokens)), "--out", out,
                 *(["--incremental"] if mode == "incremental" else [])])
            ours = mx.load(str(out))["logits"]
            equal = ours.dtype == ref.dtype and ours.shape == ref.shape and oracle.raw_bytes(ours) == oracle.raw_bytes(ref)
            diff = None
            if not equal and ours.shape == ref.shape:
                diff = float(mx.max(mx.abs(ours.astype(mx.float32) - ref.astype(mx.float32))).item())
            res[mode] = {"equal": equal, "max_abs_diff": diff}
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--fixtures", required=True, type=Path)
    ap.add_argument("--models", nargs="*", type=Path, default=[])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--skip-fixture-checks", action="store_true", help="only the --models checks")
    ap.add_argument("--hashes-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hashes_only:  # the second process of the determinism check
        print(json.dumps(oracle_hashes(args.fixtures, DETERMINISM_FIXTURES)))
        return
    import mlx.core as mx
    report = {"device": str(mx.default_device())}
    report["greedy_128"], nondet = {}, {}
    if not args.skip_fixture_checks:
        report["greedy_128"] = check_greedy(args.bin, args.fixtures)
        mine = oracle_hashes(args.fixtures, DETERMINISM_FIXTURES)
        other = json.loads(run([sys.executable, __file__, "--bin", args.bin, "--fixtures", args.fixtures,
                                "--out", "-", "--hashes-only"]).strip().splitlines()[-1])
        for name, reps in mine.items():
            for key in reps[0]:
                seen = {r.get(key) for r in reps + other.get(name, [])}
                if len(seen) > 1:
                    nondet.setdefault(name, []).append(key)
        report["mlx_lm_determinism_checked"] = sorted(mine)
    report["mlx_lm_nondeterministic"] = nondet
    report["real_dims_logits"] = {}
    for m in args.models:
        try:
            report["real_dims_logits"][m.name] = check_logits(args.bin, m)
        except Exception as e:
            report["real_dims_logits"][m.name] = {"run": {"equal": False, "error": f"{type(e).__name__}: {e}"[:300]}}
    args.out.write_text(json.dumps(report, indent=1))
    failed = [n for n, r in report["greedy_128"].items() if not r["equal"]]
    failed += [f"{m}:{k}" for m, r in report["real_dims_logits"].items() for k, v in r.items() if not v["equal"]]
    print(json.dumps(report, indent=1))
    print(f"gpu_checks: greedy-128 {len(report['greedy_128']) - sum(1 for r in report['greedy_128'].values() if not r['equal'])}"
          f"/{len(report['greedy_128'])} equal; mlx-lm nondeterministic: {nondet or 'none'}; failures: {failed or 'none'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
