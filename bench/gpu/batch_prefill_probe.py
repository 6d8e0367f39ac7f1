#!/usr/bin/env python3
"""What a batched prefill costs in mlx-lm itself, on the model directory given (issue 17):
- one forward of B rows x L tokens, fresh caches, the caches' state evaluated, three times each
  (the first at a shape new to the process): with KVCache (the causal mask) and with BatchKVCache
  (the left-padding mask array that every batched prefill attends under);
- mlx-lm's BatchGenerator with 32 prompts of the server bench's shape inserted at once (prefill 8 at
  a time, as mlx_lm.server's default --prompt-concurrency), three runs: the steps that prefilled and
  what each took, the first decode steps, and when each prompt's first token came (p50, last).
Usage: batch_prefill_probe.py MODEL_DIR"""
import sys, time
import mlx.core as mx
from mlx_lm import load
from mlx_lm.generate import BatchGenerator
from mlx_lm.models.cache import make_prompt_cache, BatchKVCache

model, tok = load(sys.argv[1])
nl = len(model.layers)

def fwd(B, L, batched, reps=3):
    ts = []
    for r in range(reps):
        cache = [BatchKVCache([0] * B) for _ in range(nl)] if batched else make_prompt_cache(model)
        x = mx.array([[(i * 7 + j) % 1000 + 10 for j in range(L)] for i in range(B)])
        mx.synchronize()
        t = time.perf_counter()
        out = model(x, cache=cache)
        mx.eval(out, [c.state for c in cache])
        ts.append(time.perf_counter() - t)
    print(f"forward {'BatchKVCache' if batched else 'KVCache':12} B={B} L={L}: " + " ".join(f"{1e3*v:.1f}" for v in ts) + " ms", flush=True)

for B, L in [(8, 64), (8, 57), (8, 1), (30, 1)]:
    fwd(B, L, False)
    fwd(B, L, True)

prompt = " ".join(["the quick brown fox jumps over the lazy dog"] * 7)
prompts = [tok.encode(f"{i}: {prompt}") for i in range(32)]
print("prompt lengths", sorted(set(len(p) for p in prompts)))
for rep in range(3):
    gen = BatchGenerator(model, max_tokens=24, completion_batch_size=32, prefill_batch_size=8)
    gen.insert(prompts)
    steps, first = [], {}
    t0 = time.perf_counter()
    while True:
        t = time.perf_counter()
        pr, gr = gen.next()
        dt = time.perf_counter() - t
        if not pr and not gr:
            break
        steps.append((len(pr), len(gr), round(1e3 * dt, 1)))
        now = time.perf_counter() - t0
        for r in gr:
            first.setdefault(r.uid, now)
    f = sorted(first.values())
    print(f"run {rep}: steps with prompts (prompts, generated, ms): {[s for s in steps if s[0]]}")
    print(f"run {rep}: decode-only steps ms: {[s[2] for s in steps if not s[0]][:12]}")
    print(f"run {rep}: first token p50 {1e3*f[len(f)//2]:.0f} ms, last {1e3*f[-1]:.0f} ms; prompt_time {gen._counters.prompt_time:.3f} s decode_time {gen._counters.decode_time:.3f} s", flush=True)
    gen.close()
