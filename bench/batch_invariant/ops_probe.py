"""Which ops give row i of a B-row call the bytes of the same row computed alone (MLX, default device).

Prints one line per op and shape: 'equal' when every row of the batched call is byte-equal to the
1-row call on that row, else how many rows differ. Run: python bench/batch_invariant/ops_probe.py
"""
import mlx.core as mx
import mlx.nn as nn

mx.random.seed(0)


def same(a, b):
    return bool(mx.all(a == b).item())


def report(name, batched, solos):
    bad = sum(0 if same(batched[i : i + 1], s) else 1 for i, s in enumerate(solos))
    print(f"{name:60s} {'equal' if bad == 0 else f'{bad}/{len(solos)} rows differ'}")


for dt in (mx.float32, mx.bfloat16, mx.float16):
    for B in (2, 4, 8):
        for K, N in ((64, 128), (1024, 3072), (2048, 2048)):
            x = mx.random.normal((B, 1, K)).astype(dt)
            w = (mx.random.normal((N, K)) * 0.02).astype(dt)
            report(f"matmul {dt} B={B} [B,1,{K}]x[{K},{N}]", x @ w.T, [x[i : i + 1] @ w.T for i in range(B)])
            # decode batch as [B,1,K] vs prefill-like [1,B,K] rows
    for K, N in ((64, 128), (2048, 2048)):
        w = (mx.random.normal((N, K)) * 0.02).astype(dt)
        for B in (4, 8):
            x = mx.random.normal((B, 1, K)).astype(dt)
            if dt != mx.float32:
                for bits in (4, 8):
                    wq, s, b = mx.quantize(w, group_size=64, bits=bits)
                    f = lambda a: mx.quantized_matmul(a, wq, s, b, transpose=True, group_size=64, bits=bits)
                    report(f"quantized_matmul q{bits} {dt} B={B} K={K} N={N}", f(x), [f(x[i : i + 1]) for i in range(B)])
            g = mx.random.normal((K,)).astype(dt)
            f = lambda a: mx.fast.rms_norm(a, g, 1e-6)
            report(f"rms_norm {dt} B={B} K={K}", f(x), [f(x[i : i + 1]) for i in range(B)])
    # RoPE: batched with per-row offsets (array) vs each row alone with a scalar offset
    for B in (4,):
        H, D = 8, 64
        x = mx.random.normal((B, H, 1, D)).astype(dt)
        offs = [3, 17, 250, 1000][:B]
        batched = mx.fast.rope(x, D, traditional=False, base=1e6, scale=1.0, offset=mx.array(offs))
        report(f"rope per-row offsets {dt}", batched,
               [mx.fast.rope(x[i : i + 1], D, traditional=False, base=1e6, scale=1.0, offset=offs[i]) for i in range(B)])
    # SDPA: decode query against left-padded keys with a mask vs each row's own keys, no mask
    H, Hk, D = 8, 2, 64
    for lens in ((5, 40, 130, 7), (300, 1024, 77, 9)):
        B = len(lens)
        T = max(lens)
        ks = [mx.random.normal((1, Hk, L, D)).astype(dt) for L in lens]
        vs = [mx.random.normal((1, Hk, L, D)).astype(dt) for L in lens]
        q = mx.random.normal((B, H, 1, D)).astype(dt)
        pad = lambda a, L: mx.concatenate([mx.zeros((1, Hk, T - L, D), dtype=dt), a], axis=2)
        K = mx.concatenate([pad(k, L) for k, L in zip(ks, lens)])
        V = mx.concatenate([pad(v, L) for v, L in zip(vs, lens)])
        mask = mx.concatenate([(mx.arange(T) >= T - L)[None, None, None, :] for L in lens])
        batched = mx.fast.scaled_dot_product_attention(q, K, V, scale=D**-0.5, mask=mask)
        solos = [mx.fast.scaled_dot_product_attention(q[i : i + 1], ks[i], vs[i], scale=D**-0.5, mask=None) for i in range(B)]
        report(f"sdpa left-padded+mask vs own keys {dt} lens={lens}", batched, solos)
        # same keys for every row (no padding), batched vs solo: does the batch dimension alone matter?
        Ks = mx.concatenate([ks[0]] * B)
        Vs = mx.concatenate([vs[0]] * B)
        batched = mx.fast.scaled_dot_product_attention(q, Ks, Vs, scale=D**-0.5, mask=None)
        solos = [mx.fast.scaled_dot_product_attention(q[i : i + 1], ks[0], vs[0], scale=D**-0.5, mask=None) for i in range(B)]
        report(f"sdpa same unpadded keys, B rows vs 1 {dt} L={lens[0]}", batched, solos)

# Prefill shapes: rows of a [B, L, K] matmul against [1, L, K], and a chunk of L queries at offset
# T - L under a boolean causal mask (what a batch passes) against mask="causal" (what a solo run does).
for dt in (mx.float32, mx.bfloat16):
    for K, N in ((64, 192), (1024, 3072)):
        w = (mx.random.normal((N, K)) * 0.02).astype(dt)
        for B, L in ((2, 16), (3, 13)):
            x = mx.random.normal((B, L, K)).astype(dt)
            report(f"matmul prefill rows {dt} [{B},{L},{K}]x[{K},{N}]", x @ w.T, [x[i : i + 1] @ w.T for i in range(B)])
    H, Hk, D = 8, 2, 64
    for T, L in ((48, 16), (128, 16), (45, 13)):
        q = mx.random.normal((1, H, L, D)).astype(dt)
        k = mx.random.normal((1, Hk, T, D)).astype(dt)
        v = mx.random.normal((1, Hk, T, D)).astype(dt)
        mask = (mx.arange(T - L, T)[:, None] >= mx.arange(T)[None])[None, None]
        a = mx.fast.scaled_dot_product_attention(q, k, v, scale=D**-0.5, mask=mask)
        b = mx.fast.scaled_dot_product_attention(q, k, v, scale=D**-0.5, mask="causal")
        report(f"sdpa prefill chunk boolean causal mask vs 'causal' {dt} T={T} L={L}", a, [b])
