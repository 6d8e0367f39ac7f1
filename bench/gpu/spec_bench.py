#!/usr/bin/env python3
"""Draft-model speculation on the GPU, mlxrt beside mlx-lm in one run (issue 19): a main model with
and without a draft (its own 4-bit copy, and a small model of the family), greedy, decode tok/s and
the share of tokens that came from the draft; mlxrt also with --spec-exact. Then whether the exact
runs give the bytes of decoding one token at a time (`--prefill-step-size 1`), with a second
one-token run as the control of run-to-run stability.

Models are bench/gpu/models.py's (random weights, published dims). mlx-lm runs in one process
(stream_generate with draft_model, its speculative_generate_step), each configuration once to warm
up and then timed; each mlxrt configuration is one process per run, its footer's decode tok/s.

Usage: spec_bench.py --bin build-gpu/mlxrt --work DIR --tokenizer DIR [--main qwen3-8b-bf16]
       [--drafts qwen3-8b-q4 qwen3-0.6b-bf16] [--prompt 512] [--gen 256] [--num-draft 3] [--runs 2]
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import models
from bench import FOOTER, prompt_ids

MLX_LM = r"""
import json, sys, time
import mlx.core as mx
from mlx_lm import load, stream_generate
main, drafts, prompt, gen, k, runs = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
model, tok = load(main)
loaded = {d: load(d)[0] for d in drafts}
out = {}
for name in [None] + drafts:
    tps, accepted = [], []
    for r in range(runs + 1):
        kw = {} if name is None else {"draft_model": loaded[name], "num_draft_tokens": k}
        resp, n_draft = None, 0
        for resp in stream_generate(model, tok, prompt, max_tokens=gen, **kw):
            n_draft += int(getattr(resp, "from_draft", False))
        if r:
            tps.append(resp.generation_tps)
            accepted.append(n_draft / resp.generation_tokens)
        mx.clear_cache()
    out[name or "none"] = {"gen_tps": tps, "from_draft": accepted}
print("RESULT " + json.dumps(out))
"""


def mlxrt_run(binary, model, prompt, gen, flags, log, record=False, env=None):
    """One `mlxrt generate`: its footer's figures; with `record`, also the greedy ids, the logprobs'
    bytes and the share of tokens from the draft (--logprobs-file, kept out of the timed runs)."""
    import os
    with tempfile.TemporaryDirectory() as tmp:
        lp = Path(tmp) / "lp.safetensors"
        cmd = [binary, "generate", "--model", str(model), "--prompt-tokens", ",".join(map(str, prompt)),
               "-m", str(gen), *flags, *(["--logprobs-file", str(lp)] if record else [])]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
        log.write(f"$ mlxrt generate {' '.join(flags)} (rc {proc.returncode}, {time.perf_counter() - t0:.1f} s)\n"
                  f"{proc.stdout[-300:]}\n{proc.stderr[-1500:]}\n")
        log.flush()
        if proc.returncode != 0:
            raise RuntimeError(f"mlxrt generate {flags} failed: {proc.stderr[-800:]}")
        p, g = FOOTER["prompt"].search(proc.stdout), FOOTER["gen"].search(proc.stdout)
        out = {"prompt_tps": float(p.group(2)), "gen_tps": float(g.group(2)), "gen_tokens": int(g.group(1))}
        if record:
            import mlx.core as mx  # the logprobs file's reader, imported only here

            arrays = mx.load(str(lp))
            fd = arrays["from_draft"].tolist() if "from_draft" in arrays else []
            out.update(from_draft=sum(fd) / len(fd) if fd else 0.0, logprobs=bytes(memoryview(arrays["logprobs"])),
                       ids=mx.argmax(arrays["logprobs"], axis=-1).tolist())
        return out


def first_difference(a, b):
    """The first generated position whose token or logprobs row differs (None: equal)."""
    n = min(len(a["ids"]), len(b["ids"]))
    row = len(a["logprobs"]) // max(len(a["ids"]), 1)
    for i in range(n):
        if a["ids"][i] != b["ids"][i] or a["logprobs"][i * row:(i + 1) * row] != b["logprobs"][i * row:(i + 1) * row]:
            return i
    return None if len(a["ids"]) == len(b["ids"]) else n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--tokenizer", required=True, type=Path)
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--main", default="qwen3-8b-bf16")
    ap.add_argument("--drafts", nargs="+", default=["qwen3-8b-q4", "qwen3-0.6b-bf16"])
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--num-draft", type=int, default=3)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--skip-mlx-lm", action="store_true")
    ap.add_argument("--skip-plain-exact", action="store_true", help="leave out --spec-exact without a draft")
    ap.add_argument("--no-cudnn-row", action="store_true",
                    help="also the first draft with MLX_CUDA_USE_CUDNN_SDPA=0 (MLX's own attention kernels: no "
                         "cuDNN graph to build for each verify step's new shape)")
    ap.add_argument("--exact-check", action="store_true", help="compare the exact runs with one-token decoding")
    ap.add_argument("--exact-only", action="store_true",
                    help="only the --spec-exact runs with a draft, recorded once, no timing (with --exact-check)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = open(args.out / "spec_bench.log", "a")
    py = Path(sys.executable)

    def model(name):
        shape, quant = name.rsplit("-", 1)
        return models.ensure_model(py, args.work, shape, quant, args.tokenizer)

    main_dir = model(args.main)
    drafts = {d: model(d) for d in args.drafts}
    prompt = prompt_ids(args.prompt, 151936, seed=1)
    k = ["--num-draft-tokens", str(args.num_draft)]
    configs = [("none", [], {}), ("none +exact", ["--spec-exact"], {})]
    for d, path in drafts.items():
        configs += [(d, ["--draft-model", str(path), *k], {}),
                    (d + " +exact", ["--draft-model", str(path), *k, "--spec-exact"], {})]
    if args.skip_plain_exact:
        configs = [c for c in configs if c[0] != "none +exact"]
    if args.no_cudnn_row:
        d, path = next(iter(drafts.items()))
        off = {"MLX_CUDA_USE_CUDNN_SDPA": "0"}
        configs += [("none, no cuDNN attn", [], off), (d + ", no cuDNN attn", ["--draft-model", str(path), *k], off)]
    if args.exact_only:
        configs = [(n, f, e) for n, f, e in configs if n.endswith("+exact") and n != "none +exact"]
    rows, recorded = {}, {}
    for i, (name, flags, env) in enumerate(configs):
        if i == 0 and not args.exact_only:
            mlxrt_run(args.bin, main_dir, prompt, 16, flags, log)  # warm-up: kernel cache, page cache
        runs = [mlxrt_run(args.bin, main_dir, prompt, args.gen, flags, log, env=env)
                for _ in range(0 if args.exact_only else args.runs)]
        recorded[name] = mlxrt_run(args.bin, main_dir, prompt, args.gen, flags, log, record=True, env=env)
        for r in runs:
            r["from_draft"] = recorded[name]["from_draft"]
        if not runs and not args.exact_only:  # --runs 0: the recorded run is the timed one
            runs = [{k: recorded[name][k] for k in ("prompt_tps", "gen_tps", "gen_tokens", "from_draft")}]
        rows[name] = runs
        timed = runs or [recorded[name]]
        print(f"mlxrt {name:28s} decode {statistics.median(r['gen_tps'] for r in timed):8.1f} tok/s  prefill "
              f"{statistics.median(r['prompt_tps'] for r in timed):8.0f} tok/s  from draft "
              f"{recorded[name]['from_draft']:.2f}", flush=True)
    lm = {}
    if not args.skip_mlx_lm:
        proc = subprocess.run([str(py), "-c", MLX_LM, str(main_dir), json.dumps([str(p) for p in drafts.values()]),
                               json.dumps(prompt), str(args.gen), str(args.num_draft), str(max(1, args.runs))],
                              capture_output=True, text=True)
        log.write(proc.stdout[-2000:] + proc.stderr[-3000:])
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line:
            raw = json.loads(line[7:])
            lm = {("none" if key == "none" else next(d for d, p in drafts.items() if str(p) == key)): v
                  for key, v in raw.items()}
        else:
            print("mlx-lm run failed: " + proc.stderr[-800:])
    exact = {}
    if args.exact_check:
        ref = [mlxrt_run(args.bin, main_dir, prompt, args.gen, ["--prefill-step-size", "1"], log, record=True)
               for _ in range(2)]
        exact["control: one-token run twice"] = first_difference(ref[0], ref[1])
        for name, run in recorded.items():
            exact[name] = first_difference(run, ref[0])
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    if args.exact_only:
        print("\n".join(f"bytes vs one-token decoding, {n}: " + ("equal" if at is None else f"first differs at token {at}")
                        for n, at in exact.items()))
        return
    base_rt = med([r["gen_tps"] for r in rows["none"]])
    base_lm = med(lm.get("none", {}).get("gen_tps", []))
    runs_text = f"median of {args.runs}" if args.runs else "one run"
    lines = [f"main {args.main}, prompt {args.prompt}, {args.gen} tokens, {args.num_draft} drafts, {runs_text}",
             f"{'draft':<26} {'mlxrt tok/s':>11} {'vs plain':>8} {'from draft':>10} {'prefill tok/s':>13} "
             f"{'mlx-lm tok/s':>12} {'vs plain':>8} {'from draft':>10} {'mlxrt/mlx-lm':>12}"]
    for name, runs in rows.items():
        tps = med([r["gen_tps"] for r in runs])
        acc = med([r["from_draft"] for r in runs])
        ptps = med([r["prompt_tps"] for r in runs])
        l = lm.get(name, {})
        ltps, lacc = med(l.get("gen_tps", [])), med(l.get("from_draft", []))
        lines.append(f"{name:<26} {tps:>11.1f} {tps / base_rt:>7.2f}x {acc:>10.2f} {ptps:>13.0f} "
                     + (f"{ltps:>12.1f} {ltps / base_lm:>7.2f}x {lacc:>10.2f} {tps / ltps:>11.2f}x" if l else ""))
    for name, at in exact.items():
        lines.append(f"bytes vs one-token decoding, {name}: " + ("equal" if at is None else f"first differs at token {at}"))
    table = "\n".join(lines)
    print(table)
    (args.out / f"spec_table_{args.main}.txt").write_text(table + "\n")
    (args.out / f"spec_results_{args.main}.json").write_text(json.dumps(
        {"rows": rows, "mlx_lm": lm, "exact": exact}, indent=1))


if __name__ == "__main__":
    main()
