#!/usr/bin/env python3
"""The batch generator alone, without a server: `mlxrt batch-generate` against mlx-lm's
BatchGenerator (driven as batch_generate drives it), the same prompts, one process each: greedy, or
with --temp (and --top-p, --top-k) one sampler for the whole batch, as batch_generate's, seeded by
--seed on both sides (so the draws, too, must be equal).

Both sides log each decode step's wall time; the table gives the mean step time over segments of
the generation (so a step that grows with the context shows), the decode tok/s over the whole
generation, and whether the two produced the same tokens (they must at L1; with
--mlxrt-args=--batch-invariant each row is its solo run instead, which mlx-lm's batch need not equal).

--step-timing adds each side's mean decode-step split: building the step's lazy graph, dispatching it
(mx.async_eval: MLX encoding its kernels) and waiting for the step before it (the device still busy).
A split whose wait is near zero is bound by the host: fewer graph nodes, not faster kernels, shorten it.

Usage: bench/batch_generate_bench.py --model DIR [--mlxrt build/mlxrt] [--batch 8] [--prompt-tokens 80]
       [--gen-tokens 256] [--segments 4] [--runs 1] [--log-dir DIR] [--graphs] [--step-timing] [--no-bias]
       [--mlxrt-args ARGS] [--temp T] [--top-p P] [--top-k K] [--seed S]
A model: bench/gpu/models.py makes random ones with Qwen3 dims (python bench/gpu/models.py).
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MLX_LM_SIDE = r"""
import json, sys, time
from pathlib import Path
import mlx.core as mx
from mlx_lm.generate import BatchGenerator
from mlx_lm.sample_utils import make_logits_processors
from mlx_lm.utils import load_model

model_dir, requests_file, eos, steps_file = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
graph_file = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] else None
step_timing = len(sys.argv) > 6 and sys.argv[6] == "timing"
sampling = json.loads(sys.argv[7]) if len(sys.argv) > 7 else {}
requests = json.loads(Path(requests_file).read_text())["requests"]
from mlx_lm.generate import GenerationBatch
# The generation batch's _step builds the step's graph, hands it to mx.async_eval, then reads the
# step before it with mx.eval: wrapped here to export the fourth step's graph (as `mlxrt
# batch-generate --step-graph` does) and to time the three parts (as its --step-timing does).
dispatch, wait, seen = mx.async_eval, mx.eval, [0]
split = {"build": 0.0, "dispatch": 0.0, "wait": 0.0, "steps": 0, "t0": 0.0, "t1": 0.0, "t2": 0.0}


def in_step():
    caller = sys._getframe(2)
    return caller.f_code.co_name == "_step" and isinstance(caller.f_locals.get("self"), GenerationBatch)


def async_eval(*arrays):
    if not in_step():
        return dispatch(*arrays)
    seen[0] += 1
    if graph_file and seen[0] == 4:
        flat = [a for x in arrays for a in (x if isinstance(x, list) else [x])]
        mx.export_to_dot(graph_file, *flat)
    split["t1"] = time.perf_counter()
    out = dispatch(*arrays)
    split["t2"] = time.perf_counter()
    return out


def eval_(*arrays):
    out = wait(*arrays)
    # A step after a batch's first reads what the step before it dispatched.
    if in_step() and sys._getframe(1).f_locals.get("self")._current_logprobs:
        split["build"] += split["t1"] - split["t0"]
        split["dispatch"] += split["t2"] - split["t1"]
        split["wait"] += time.perf_counter() - split["t2"]
        split["steps"] += 1
    return out


step_method = GenerationBatch._step


def timed_step(self):
    split["t0"] = time.perf_counter()
    return step_method(self)


mx.async_eval, mx.eval, GenerationBatch._step = async_eval, eval_, timed_step
sampler = None
if sampling:
    from mlx_lm.sample_utils import make_sampler
    mx.random.seed(sampling.pop("seed"))  # before the model is built: its layers draw from the same key
    sampler = make_sampler(**sampling)
model, _ = load_model(Path(model_dir))
gen = BatchGenerator(model, stop_tokens=[[t] for t in eos], sampler=sampler)
processors = [make_logits_processors(**{k: ({int(t): b for t, b in v.items()} if k == "logit_bias" else v)
                                         for k, v in r["logits_processors"].items()})
              if "logits_processors" in r else None for r in requests]
uids = gen.insert([r["prompt_tokens"] for r in requests], [r["max_tokens"] for r in requests],
                  logits_processors=processors)
tokens = {u: [] for u in uids}
lines = []
last = time.perf_counter()
while responses := gen.next_generated():
    now = time.perf_counter()
    lines.append(f"{len(responses)} {(now - last) * 1e3:.3f}")
    last = now
    for r in responses:
        if r.finish_reason != "stop":
            tokens[r.uid].append(r.token)
gen.close()
Path(steps_file).write_text("\n".join(lines) + "\n")
if step_timing and split["steps"]:
    n = split["steps"]
    print(f"[mlx_lm] decode step: build={split['build'] / n * 1e3:.3f} ms, dispatch={split['dispatch'] / n * 1e3:.3f} ms, "
          f"wait={split['wait'] / n * 1e3:.3f} ms (mean of {n} steps)", file=sys.stderr)
for u in uids:
    print(json.dumps({"tokens": tokens[u]}))
"""


def graph_ops(dot_file):
    """{primitive name: count} of the op nodes in a DOT file MLX wrote (export_to_dot): op nodes
    are the ones drawn as rectangles, labelled with the primitive."""
    counts = {}
    for line in Path(dot_file).read_text().splitlines():
        m = re.search(r'label\s*=\s*"([^"]+)"[^\]]*shape\s*=\s*"?rectangle', line)
        if m:
            name = m.group(1).split()[0]
            counts[name] = counts.get(name, 0) + 1
    return counts


def print_graph_table(dots):
    ops = {side: graph_ops(path) for side, path in dots.items()}
    names = sorted(set().union(*ops.values()), key=lambda n: -max(o.get(n, 0) for o in ops.values()))
    print("\nops in one batched decode step (the fourth), by primitive:")
    print("| primitive | mlx_lm | mlxrt |")
    print("| --- | ---: | ---: |")
    for n in names:
        print(f"| {n} | {ops['mlx_lm'].get(n, 0)} | {ops['mlxrt'].get(n, 0)} |")
    print(f"| all | {sum(ops['mlx_lm'].values())} | {sum(ops['mlxrt'].values())} |")


def make_requests(batch, prompt_tokens, gen_tokens, vocab, eos, seed=0):
    rng = random.Random(seed)
    # Prompts of different lengths (left padding in the batch), as a server's clients send them;
    # each row with its own logit bias against the end token, as bench/batch_bench.py's clients ask,
    # so that every row runs its full length.
    requests = []
    for i in range(batch):
        # Ids past the special tokens of a real vocabulary; the lower half of a tiny test model's.
        r = {"prompt_tokens": [rng.randrange(min(1000, vocab // 2), min(vocab, 100000))
                               for _ in range(prompt_tokens - (i * 7) % max(1, prompt_tokens // 2))],
             "max_tokens": gen_tokens}
        if eos is not None:
            r["logits_processors"] = {"logit_bias": {str(t): -100 for t in eos}}
        requests.append(r)
    return {"requests": requests}


SPLIT = re.compile(r"decode step: build=([\d.]+) ms, dispatch=([\d.]+) ms, wait=([\d.]+) ms")


def read_steps(path):
    return [(int(a), float(b)) for a, b in (line.split() for line in Path(path).read_text().split("\n") if line)]


def run_side(cmd, steps_file, env, stderr_file=None):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if stderr_file:
        stderr_file.write_text(p.stderr)
    if p.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    rows = [json.loads(line)["tokens"] for line in p.stdout.splitlines() if line.startswith("{")]
    split = SPLIT.search(p.stderr)
    return rows, read_steps(steps_file), wall, tuple(float(v) for v in split.groups()) if split else None


def segment_means(steps, segments):
    """Mean ms per step over equal segments of the decode steps (the first step, which holds the
    prefill, left out)."""
    decode = [ms for _, ms in steps[1:]]
    if not decode:
        return []
    n = max(1, len(decode) // segments)
    return [statistics.mean(decode[i:i + n]) for i in range(0, n * segments, n) if decode[i:i + n]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--mlxrt", default=str(ROOT / "build" / "mlxrt"))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=80)
    ap.add_argument("--gen-tokens", type=int, default=256)
    ap.add_argument("--segments", type=int, default=4)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--mlxrt-args", default="", help="more options for `mlxrt batch-generate` (e.g. --batch-invariant)")
    ap.add_argument("--no-bias", action="store_true", help="no logit bias against the end token")
    ap.add_argument("--graphs", action="store_true", help="also count the ops of one decode step on each side")
    ap.add_argument("--step-timing", action="store_true",
                    help="also split each side's decode step into build / dispatch / wait")
    ap.add_argument("--temp", type=float, default=0.0, help="sample at this temperature (one sampler for the batch)")
    ap.add_argument("--top-p", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0, help="both sides' seed when sampling")
    args = ap.parse_args()
    sampling = {}
    if args.temp:
        sampling = {"temp": args.temp, "top_p": args.top_p, "top_k": args.top_k, "seed": args.seed}

    config = json.loads((Path(args.model) / "config.json").read_text())
    eos = config.get("eos_token_id", [])
    eos = eos if isinstance(eos, list) else [eos]
    work = Path(args.log_dir or tempfile.mkdtemp(prefix="batch-generate-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    requests = work / "requests.json"
    requests.write_text(json.dumps(make_requests(args.batch, args.prompt_tokens, args.gen_tokens,
                                                 config["vocab_size"], None if args.no_bias else eos)))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    results = {"mlx_lm": [], "mlxrt": []}
    splits = {"mlx_lm": [], "mlxrt": []}
    tokens = {}
    for run in range(args.runs):
        for side in ("mlx_lm", "mlxrt"):
            steps_file = work / f"{side}-steps-{run}.txt"
            graph = work / f"{side}-step.dot"
            if side == "mlxrt":
                cmd = [args.mlxrt, "batch-generate", "--model", args.model, "--requests", str(requests),
                       "--max-tokens", str(args.gen_tokens), "--step-log", str(steps_file), *args.mlxrt_args.split()]
                cmd += ["--step-graph", str(graph)] if args.graphs and run == 0 else []
                cmd += ["--step-timing"] if args.step_timing else []
                if sampling:
                    cmd += ["--temp", str(args.temp), "--top-p", str(args.top_p), "--top-k", str(args.top_k),
                            "--seed", str(args.seed)]
            else:
                cmd = [sys.executable, "-c", MLX_LM_SIDE, args.model, str(requests), json.dumps(eos), str(steps_file),
                       str(graph) if args.graphs and run == 0 else "", "timing" if args.step_timing else "",
                       json.dumps(sampling)]
            # With --log-dir, each side's stderr is kept beside its step log.
            stderr_file = work / f"{side}-stderr-{run}.txt" if args.log_dir else None
            rows, steps, wall, split = run_side(cmd, steps_file, env, stderr_file)
            tokens[side] = rows
            results[side].append((steps, wall))
            if split:
                splits[side].append(split)

    same = tokens["mlx_lm"] == tokens["mlxrt"]
    print(f"model {Path(args.model).name}, {args.batch} prompts of ~{args.prompt_tokens} tokens, "
          f"{args.gen_tokens} generated each, {args.runs} run(s), "
          f"{'sampling ' + json.dumps(sampling) if sampling else 'greedy'}; tokens equal: {same}")
    header = ["side", "first step (prefill) ms"] + [f"decode ms/step, part {i + 1}/{args.segments}"
                                                    for i in range(args.segments)] + ["decode tok/s", "process s"]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    tps = {}
    for side, runs in results.items():
        first = statistics.median(s[0][1] for s, _ in runs)
        segs = [statistics.median(v) for v in zip(*(segment_means(s, args.segments) for s, _ in runs))]
        rates = []
        for s, _ in runs:
            decode = s[1:]
            rates.append(sum(n for n, _ in decode) / (sum(ms for _, ms in decode) / 1e3) if decode else 0.0)
        tps[side] = statistics.median(rates)
        wall = statistics.median(w for _, w in runs)
        print("| " + " | ".join([side, f"{first:.1f}"] + [f"{v:.2f}" for v in segs]
                                + [f"{tps[side]:.1f}", f"{wall:.1f}"]) + " |")
    if tps["mlx_lm"]:
        print(f"decode tok/s mlxrt / mlx-lm: {tps['mlxrt'] / tps['mlx_lm']:.2f}")
    if args.step_timing:
        # "other" is the rest of a step's wall time (the step log's): the loop around the step, and
        # any wait MLX does outside it (it blocks any eval while more than 10 command buffers are
        # in flight, so device time can land there too).
        print("\ndecode step split, ms (median over runs):")
        print("| side | build | dispatch | wait | sum | step | other |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for side, runs in splits.items():
            if runs:
                b, d, w = (statistics.median(v) for v in zip(*runs))
                step = statistics.median(statistics.mean(ms for _, ms in s[1:]) for s, _ in results[side] if s[1:])
                print(f"| {side} | {b:.2f} | {d:.2f} | {w:.2f} | {b + d + w:.2f} | {step:.2f} | {step - b - d - w:.2f} |")
    if args.graphs:
        print_graph_table({side: work / f"{side}-step.dot" for side in ("mlx_lm", "mlxrt")})
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
