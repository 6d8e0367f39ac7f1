#!/usr/bin/env python3
"""MLX's own behaviour on this device, for telling an mlxrt difference from an MLX one:

1. small shapes: is the quantized matmul right (against the dequantized product in float32),
   the same bytes run to run, and blind to the strides of x?
2. real sizes (Qwen3-8B's layers, 512-token prefill and one-token decode): does each op of a
   forward pass give the same bytes every time it runs on the same inputs?

3. with --model: the whole forward pass of that model over a 512-token prompt.

Usage: op_probe.py [--reps 4] [--skip-small] [--skip-real] [--model DIR]
Prints one line per check; exit status 0 always (it reports, the parity tests judge).
"""
import argparse
import hashlib
import sys
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import oracle  # noqa: E402


def digest(a):
    mx.eval(a)
    return hashlib.sha256(oracle.raw_bytes(a)).hexdigest()[:12]


def qmm(x, q, bits, gs):
    return mx.quantized_matmul(x, *q, transpose=True, group_size=gs, bits=bits)


def small_checks(reps):
    mx.random.seed(0)
    for bits, gs, n, k in ((8, 128, 512, 128), (8, 128, 256, 256), (8, 64, 512, 128), (8, 32, 512, 128),
                           (4, 64, 512, 128), (4, 128, 512, 128), (6, 128, 512, 128)):
        w = mx.random.normal((n, k)).astype(mx.bfloat16)
        q = mx.quantize(w, group_size=gs, bits=bits)
        x = mx.random.normal((1, 12, k)).astype(mx.bfloat16)
        try:
            runs = {digest(qmm(x, q, bits, gs)) for _ in range(reps)}
            flat = digest(qmm(x.reshape(12, k), q, bits, gs))
            strided = mx.swapaxes(mx.random.normal((1, k, 12)).astype(mx.bfloat16), 1, 2)
            layout = digest(qmm(strided, q, bits, gs)) == digest(qmm(mx.contiguous(strided), q, bits, gs))
            ref = x.astype(mx.float32) @ mx.dequantize(*q, group_size=gs, bits=bits).astype(mx.float32).T
            err = (mx.max(mx.abs(qmm(x, q, bits, gs).astype(mx.float32) - ref)) / mx.max(mx.abs(ref))).item()
            print(f"qmm bits {bits} g{gs} {n}x{k}, x 1x12: {len(runs)} distinct results in {reps} runs; "
                  f"2-D x same bytes: {flat in runs}; strided x same as contiguous: {layout}; "
                  f"max |qmm - dequantized matmul in fp32| / max |ref| {err:.2g}", flush=True)
        except Exception as e:  # an unsupported shape on this device: reported
            print(f"qmm bits {bits} g{gs} {n}x{k}: {type(e).__name__}: {str(e)[:200]}", flush=True)


def real_checks(reps):
    """Qwen3-8B: hidden 4096, 32 query and 8 KV heads of 128, MLP 12288."""
    mx.random.seed(1)
    bf = mx.bfloat16
    w = mx.random.normal((12288, 4096)).astype(bf) * 0.02
    q4 = mx.quantize(w, group_size=64, bits=4)
    scale = 128 ** -0.5
    ops = {}
    for rows in (512, 1):
        x = mx.random.normal((1, rows, 4096)).astype(bf)
        ops[f"quantized_matmul 4-bit g64, {rows} x 4096 -> 12288"] = lambda x=x: qmm(x, q4, 4, 64)
        ops[f"matmul bf16, {rows} x 4096 -> 12288"] = lambda x=x: x @ w.T
        ops[f"rms_norm, {rows} x 4096"] = lambda x=x: mx.fast.rms_norm(x, mx.ones((4096,), dtype=bf), 1e-6)
        ops[f"rope, {rows} x 32 heads"] = lambda x=x, rows=rows: mx.fast.rope(
            x.reshape(1, rows, 32, 128).transpose(0, 2, 1, 3), 128, traditional=False, base=1e6, scale=1.0, offset=7)
    q = mx.random.normal((1, 32, 512, 128)).astype(bf)
    k = mx.random.normal((1, 8, 512, 128)).astype(bf)
    v = mx.random.normal((1, 8, 512, 128)).astype(bf)
    ops["sdpa causal, 512 queries x 512 keys"] = lambda: mx.fast.scaled_dot_product_attention(
        q, k, v, scale=scale, mask="causal")
    ops["sdpa, 1 query x 512 keys"] = lambda: mx.fast.scaled_dot_product_attention(q[:, :, -1:], k, v, scale=scale)
    logits = mx.random.normal((1, 151936)).astype(bf) * 4
    ops["argmax + logsumexp, 151936"] = lambda: mx.concatenate(
        [mx.argmax(logits, axis=-1).astype(mx.float32), mx.logsumexp(logits.astype(mx.float32), axis=-1)])
    for name, op in ops.items():
        try:
            seen = {digest(op()) for _ in range(reps)}
            print(f"{name}: {len(seen)} distinct results in {reps} runs", flush=True)
        except Exception as e:
            print(f"{name}: {type(e).__name__}: {str(e)[:200]}", flush=True)


def model_checks(model_dir, reps):
    """The whole forward pass of a model over a 512-token prompt, in this process."""
    import random
    model, _ = oracle.load(model_dir)
    rng = random.Random(512)
    tokens = [rng.randrange(1000, 150000) for _ in range(512)]
    full = {digest(oracle.full_logits(model, tokens)) for _ in range(reps)}
    print(f"{model_dir.name} full logits, 512 tokens: {sorted(full)} in {reps} runs", flush=True)
    # One token at a time through the KV cache, each step evaluated before the next.
    steps = {digest(oracle.incremental_logits(model, tokens[:96])) for _ in range(reps)}
    print(f"{model_dir.name} incremental logits, 96 tokens: {sorted(steps)} in {reps} runs", flush=True)
    # mlx-lm's generate_step: the 512-token prompt, then 256 greedy tokens with the next step
    # queued before the current token is read (its generation stream).
    config = {"eos_token_id": None}
    runs = [oracle.greedy_tokens(model, config, tokens, 256) for _ in range(reps)]
    first = [next((i for i, (a, b) in enumerate(zip(runs[0], r)) if a != b), None) for r in runs[1:]]
    print(f"{model_dir.name} generate_step greedy, 256 tokens: {len({tuple(r) for r in runs})} distinct "
          f"sequences in {reps} runs; first difference from run 1 at token {first}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--skip-small", action="store_true")
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--model", type=Path, help="also the whole forward pass of this model")
    args = ap.parse_args()
    print("device", mx.default_device(), flush=True)
    if not args.skip_small:
        small_checks(args.reps)
    if not args.skip_real:
        real_checks(args.reps)
    if args.model:
        model_checks(args.model, args.reps)


if __name__ == "__main__":
    main()
