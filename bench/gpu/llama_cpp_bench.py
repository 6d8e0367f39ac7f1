#!/usr/bin/env python3
"""llama.cpp's llama-bench beside `mlxrt benchmark` and mlx_lm.benchmark, on the same weights, in one
run (bench/gpu/llama_cpp.sh makes the files): a 512-token prefill and 128 decoded tokens.

- llama-bench: `-p P -n G -d 0,P -ngl 99 -r R -o json`, its defaults otherwise (flash attention
  `auto`, batch 2048, micro-batch 512). Prefill is pp P from an empty cache; decode is tg G at depth
  P (after a P-token prompt, the positions the MLX programs decode at) and, as llama-bench reports
  by default, at depth 0. Figures are medians of its R samples.
- `mlxrt benchmark` and mlx_lm.benchmark: `-p P -g G -n R` (one untimed warm-up run, then R trials
  of the same random prompt; seed 0 on both, so the same tokens). Figures are medians of the trials.
- With --l3, `mlxrt benchmark --fidelity l3` too, on the first checkpoint of each case, with the
  fidelity of l3 against l1 on it (`mlxrt fidelity --against l1 --tokens N`: mean and max KL, greedy
  agreement), which every L3 figure carries.

Each MLX checkpoint is the GGUF converted by `mlxrt convert --gguf` (float32 scales and norms, as
the converter writes them: MLX then computes in float32) and, where given, the same checkpoint with
those arrays in float16 (bench/gpu/half_scales.py: every value unchanged; MLX computes in float16).

Usage: llama_cpp_bench.py --llama-bench BIN --mlxrt BIN --out DIR
         --case NAME GGUF MLX_DIR[,MLX_DIR...] [--case ...] [--prompt 512] [--gen 128] [--runs 3]
         [--deadline UNIX_TIME] [--l3] [--fidelity-tokens 1024]
Writes DIR/results.json and DIR/table.txt; prints the table.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

TRIAL = re.compile(r"Trial \d+:\s+prompt_tps=([\d.]+), generation_tps=([\d.]+), peak_memory=([\d.]+)")


def run(cmd, log, env=None):
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    log.write(f"$ {' '.join(map(str, cmd))}\n(rc {proc.returncode}, {time.perf_counter() - t:.1f} s)\n"
              f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}\n")
    log.flush()
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return proc.stdout


def llama_bench(binary, gguf, prompt, gen, runs, log):
    out = run([binary, "-m", gguf, "-p", str(prompt), "-n", str(gen), "-d", f"0,{prompt}", "-ngl", "99",
               "-r", str(runs), "-o", "json"], log)
    rows = json.loads(out)
    pp = next(r for r in rows if r["n_prompt"] == prompt and r["n_gen"] == 0 and r.get("n_depth", 0) == 0)
    tg = {r.get("n_depth", 0): r for r in rows if r["n_gen"] == gen and r["n_prompt"] == 0}
    med = lambda r: statistics.median(r["samples_ts"])  # noqa: E731
    info = {k: pp.get(k) for k in ("build_commit", "gpu_info", "backends", "flash_attn", "n_batch", "n_ubatch",
                                   "type_k", "type_v", "model_type", "model_size", "model_n_params")}
    return ({"prompt_tps": med(pp), "gen_tps": med(tg[prompt]), "samples": {"pp": pp["samples_ts"],
             "tg": tg[prompt]["samples_ts"]}, "info": info},
            {"prompt_tps": med(pp), "gen_tps": med(tg[0]), "samples": {"tg": tg[0]["samples_ts"]}})


def mlx_bench(cmd, prompt, gen, runs, log):
    out = run(cmd + ["-p", str(prompt), "-g", str(gen), "-n", str(runs)], log)
    trials = [tuple(map(float, m.groups())) for m in TRIAL.finditer(out)]
    if len(trials) != runs:
        raise RuntimeError(f"{cmd[0]}: expected {runs} trials in its output, found {len(trials)}")
    return {"prompt_tps": statistics.median(t[0] for t in trials), "gen_tps": statistics.median(t[1] for t in trials),
            "peak_gb": max(t[2] for t in trials), "trials": trials}


def fidelity(binary, model, tokens, log):
    """l3 against l1 on this checkpoint: {"modes": {"decode": {...}, "prefill": {...}}} as the verb writes it."""
    out = run([binary, "fidelity", "--model", model, "--against", "l1", "--tokens", str(tokens), "--json"], log)
    return json.loads(out[out.index("{"):])


def variant_label(mlx_dir):
    """'fp16' for a half_scales.py copy, 'f32' for the converter's own output."""
    return "fp16" if mlx_dir.rstrip("/").endswith("-fp16") else "f32"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--mlxrt", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--case", nargs=3, action="append", required=True, metavar=("NAME", "GGUF", "MLX_DIRS"))
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--deadline", type=float, help="a Unix time after which no program is started")
    ap.add_argument("--l3", action="store_true", help="also mlxrt at --fidelity l3, with its fidelity against l1")
    ap.add_argument("--fidelity-tokens", type=int, default=1024)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = open(args.out / "bench.log", "a")
    results = {"prompt": args.prompt, "gen": args.gen, "runs": args.runs, "cases": []}
    # First what the comparison needs (llama.cpp, then both MLX programs on the float16 checkpoint) for
    # every case, then the converter's float32 checkpoints: past --deadline, the rest is skipped.
    cases = []
    for name, gguf, dirs in args.case:
        case = {"name": name, "gguf": gguf, "programs": {}}
        results["cases"].append(case)
        cases.append((case, sorted(dirs.split(","), key=lambda d: variant_label(d) != "fp16")))

    def out_of_time(case, program):
        if args.deadline and time.time() > args.deadline:
            case["programs"][program] = {"error": "skipped: past the run's deadline"}
            return True
        return False

    for phase in (0, 1):
        for case, dirs in cases:
            name = case["name"]
            if phase == 0 and not out_of_time(case, "llama.cpp"):
                try:
                    at_prompt, at_zero = llama_bench(args.llama_bench, case["gguf"], args.prompt, args.gen, args.runs,
                                                     log)
                    case["programs"]["llama.cpp"] = at_prompt
                    case["programs"]["llama.cpp (decode at 0)"] = at_zero
                    print(f"{name}: llama.cpp pp{args.prompt} {at_prompt['prompt_tps']:.0f} tok/s, tg{args.gen} "
                          f"{at_prompt['gen_tps']:.1f} (depth {args.prompt}) / {at_zero['gen_tps']:.1f} (depth 0); "
                          f"{at_prompt['info']}", file=sys.stderr)
                except (RuntimeError, StopIteration, KeyError, json.JSONDecodeError) as e:
                    case["programs"]["llama.cpp"] = {"error": str(e)[-1500:]}
                    print(f"{name}: llama.cpp: {e}", file=sys.stderr)
            for mlx_dir in dirs[:1] if phase == 0 else dirs[1:]:
                v = variant_label(mlx_dir)
                programs = [(f"mlxrt ({v})", [args.mlxrt, "benchmark", "--model", mlx_dir])]
                if args.l3 and phase == 0:
                    programs.append((f"mlxrt L3 ({v})", [args.mlxrt, "benchmark", "--model", mlx_dir, "--fidelity", "l3"]))
                programs.append((f"mlx-lm ({v})", [sys.executable, "-m", "mlx_lm", "benchmark", "--model", mlx_dir]))
                for program, cmd in programs:
                    if out_of_time(case, program):
                        continue
                    try:
                        case["programs"][program] = r = mlx_bench(cmd, args.prompt, args.gen, args.runs, log)
                        print(f"{name}: {program}: prefill {r['prompt_tps']:.0f} tok/s, decode {r['gen_tps']:.1f} "
                              f"tok/s, peak {r['peak_gb']:.2f} GB", file=sys.stderr)
                    except RuntimeError as e:
                        case["programs"][program] = {"error": str(e)[-1500:]}
                        print(f"{name}: {program}: {e}", file=sys.stderr)
                l3 = case["programs"].get(f"mlxrt L3 ({v})")
                if l3 and "error" not in l3 and not out_of_time(case, "fidelity"):
                    try:
                        l3["fidelity"] = fidelity(args.mlxrt, mlx_dir, args.fidelity_tokens, log)
                    except (RuntimeError, ValueError) as e:
                        l3["fidelity"] = {"error": str(e)[-1500:]}
            (args.out / "results.json").write_text(json.dumps(results, indent=1))
    rows = [case for case, _ in cases]
    text = table(rows, args)
    (args.out / "table.txt").write_text(text + "\n")
    print(text)


def table(cases, args):
    lines = [f"prompt {args.prompt} tokens, {args.gen} generated, medians of {args.runs}; llama.cpp's decode at depth "
             f"{args.prompt} (as the MLX programs decode), '(decode at 0)' from an empty cache; f32 = the checkpoint "
             "`mlxrt convert --gguf` writes (float32 scales, MLX computes in float32), fp16 = the same values in float16",
             f"{'model':<14} {'program':<24} {'prefill tok/s':>13} {'decode tok/s':>12} {'vs llama.cpp':>16} "
             f"{'vs mlx-lm':>16}"]
    for case in cases:
        progs = case["programs"]
        ref = progs.get("llama.cpp", {})
        for program, r in progs.items():
            if "error" in r:
                lines.append(f"{case['name']:<14} {program:<24} failed: {r['error'].strip().splitlines()[-1][:80]}")
                continue
            versus = ""
            if "prompt_tps" in ref and not program.startswith("llama.cpp"):
                versus = f"{r['prompt_tps'] / ref['prompt_tps']:>7.2f}x {r['gen_tps'] / ref['gen_tps']:>6.2f}x"
            base = ""
            peer = program.replace("mlxrt L3", "mlx-lm").replace("mlxrt", "mlx-lm")
            if program.startswith("mlxrt") and "prompt_tps" in progs.get(peer, {}):
                p = progs[peer]
                base = f"{r['prompt_tps'] / p['prompt_tps']:>7.2f}x {r['gen_tps'] / p['gen_tps']:>6.2f}x"
            lines.append(f"{case['name']:<14} {program:<24} {r['prompt_tps']:>13.0f} {r['gen_tps']:>12.1f} "
                         f"{versus:>16} {base:>16}{fidelity_note(r)}")
    lines.append("ratios: prefill, decode; L3 rows: l3 against l1 over --fidelity-tokens tokens (decode mode)")
    return "\n".join(lines)


def fidelity_note(r):
    f = r.get("fidelity")
    if not f:
        return ""
    if "error" in f:
        return "  fidelity failed"
    d = f.get("modes", f).get("decode", {})
    return (f"  KL mean {d.get('mean_kl', float('nan')):.2e} max {d.get('max_kl', float('nan')):.2e}, "
            f"greedy agreement {d.get('agreement', float('nan')):.2%}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
