#!/usr/bin/env python3
"""Which ops of a decoding step give row i of an M-row call the bytes of a one-row call, on MLX's
default device (docs/exact-mode.md, the CUDA table; bench/batch_invariant/ops_probe.py asks the
same of a batch). Each line: the op and shape, then for every M the rows that differ from the
one-row call ('-' = every row equal). The one-row call has a decoding step's shape ([1, 1, D]);
the M rows come as a prefill chunk or a speculative verification has them ([1, M, D]).

Usage: python bench/gpu/exact_probe.py [--quick]
"""
import argparse
import sys

import mlx.core as mx
import mlx.nn as nn

mx.random.seed(0)
ROWS = (2, 3, 4, 5, 7, 8, 9, 16)
STEP = 256  # mlx-lm's KVCache step
results = []


def differs(a, b):
    return not bool(mx.array_equal(a, b).item())


def report(name, by_m):
    """by_m: {M: number of rows that differ}."""
    cells = " ".join(f"{m if isinstance(m, str) else f'M={m}'}:{'-' if n == 0 else n}" for m, n in by_m.items())
    verdict = "equal" if all(n == 0 for n in by_m.values()) else "DIFFERS"
    results.append((name, verdict))
    print(f"{name:58s} {verdict:8s} {cells}", flush=True)


def row_probe(name, f, make_x, rows=ROWS):
    """f over x [1, M, ...] against f over each row alone as [1, 1, ...]."""
    by_m = {}
    for m in rows:
        x = make_x(m)
        mx.eval(x)
        many = f(x)
        ones = [f(x[:, i : i + 1]) for i in range(m)]
        mx.eval(many, *ones)
        by_m[m] = sum(differs(many[:, i : i + 1], ones[i]) for i in range(m))
    report(name, by_m)


def matmuls(quick):
    shapes = [(128, 256), (256, 128), (1024, 3072), (4096, 4096), (4096, 12288), (12288, 4096)]
    if quick:
        shapes = shapes[:3]
    for dt in (mx.bfloat16, mx.float16, mx.float32):
        for k, n in shapes:
            w = (mx.random.normal((n, k)) * 0.02).astype(dt)
            row_probe(f"matmul {dt} K={k} N={n}", lambda x: x @ w.T, lambda m: mx.random.normal((1, m, k)).astype(dt))
        k, n = 1024, 3072
        w = (mx.random.normal((n, k)) * 0.02).astype(dt)
        b = mx.random.normal((n,)).astype(dt)
        row_probe(f"addmm (bias) {dt} K={k} N={n}", lambda x: mx.addmm(b, x, w.T),
                  lambda m: mx.random.normal((1, m, k)).astype(dt))
    # The quantized configurations the tests and benchmarks load (bits, group, activation dtype).
    # M up to 8 only: each GEMM row tile past qmv is a kernel MLX compiles at run time (~12 s each).
    quants = [(4, 64, mx.bfloat16), (8, 64, mx.bfloat16), (8, 32, mx.bfloat16), (4, 64, mx.float32)]
    qshapes = [(256, 256), (1024, 3072), (4096, 12288), (12288, 4096)]
    if quick:
        qshapes = qshapes[:2]
    for bits, gs, dt in quants:
        for k, n in qshapes:
            w = (mx.random.normal((n, k)) * 0.02).astype(dt)
            wq, s, b = mx.quantize(w, group_size=gs, bits=bits)
            f = lambda x: mx.quantized_matmul(x, wq, s, b, transpose=True, group_size=gs, bits=bits)
            row_probe(f"quantized_matmul q{bits} g{gs} {dt} K={k} N={n}", f,
                      lambda m: mx.random.normal((1, m, k)).astype(dt), rows=(2, 3, 4, 5, 6, 7, 8))
    # One group per row (group_size >= K): MLX's sm_90 quantized GEMM takes it.
    w = (mx.random.normal((256, 128)) * 0.02).astype(mx.bfloat16)
    wq, s, b = mx.quantize(w, group_size=128, bits=4)
    f = lambda x: mx.quantized_matmul(x, wq, s, b, transpose=True, group_size=128, bits=4)
    row_probe("quantized_matmul q4 g128 bf16 K=128 (one group/row)", f,
              lambda m: mx.random.normal((1, m, 128)).astype(mx.bfloat16), rows=(2, 4, 7))


def elementwise_and_norms():
    for dt in (mx.bfloat16, mx.float32):
        for d in (128, 1024, 4096):
            g = mx.random.normal((d,)).astype(dt)
            row_probe(f"rms_norm {dt} D={d}", lambda x: mx.fast.rms_norm(x, g, 1e-6),
                      lambda m: mx.random.normal((1, m, d)).astype(dt))
        # q_norm / k_norm: per head of a [1, M, H, D] projection
        g = mx.random.normal((128,)).astype(dt)
        row_probe(f"rms_norm per head {dt} [1,M,32,128]", lambda x: mx.fast.rms_norm(x, g, 1e-6),
                  lambda m: mx.random.normal((1, m, 32, 128)).astype(dt))
        swiglu = mx.compile(lambda a, b: nn.silu(a) * b)
        row_probe(f"compiled silu(a)*b {dt} D=12288", lambda x: swiglu(x[..., :12288], x[..., 12288:]),
                  lambda m: mx.random.normal((1, m, 2 * 12288)).astype(dt))
        row_probe(f"add {dt} D=4096", lambda x: x[..., :4096] + x[..., 4096:],
                  lambda m: mx.random.normal((1, m, 8192)).astype(dt))
        for v in (256, 151936):
            row_probe(f"logsumexp {dt} V={v}", lambda x: mx.logsumexp(x, axis=-1, keepdims=True),
                      lambda m: (mx.random.normal((1, m, v)) * 4).astype(dt))
            row_probe(f"argmax {dt} V={v}", lambda x: mx.argmax(x, axis=-1, keepdims=True),
                      lambda m: (mx.random.normal((1, m, v)) * 4).astype(dt))
            row_probe(f"x - logsumexp(x) {dt} V={v}", lambda x: x - mx.logsumexp(x, axis=-1, keepdims=True),
                      lambda m: (mx.random.normal((1, m, v)) * 4).astype(dt))


def ropes():
    """Queries as mlx-lm makes them ([1, L, H, D] transposed to [1, H, L, D]), rotated at offset T,
    against each position alone at offset T + i (a decoding step's call)."""
    for dt in (mx.bfloat16, mx.float32):
        for h, d, base in ((32, 128, 1e6), (4, 32, 1e6), (16, 64, 1e4)):
            for t in (0, 300):
                by_m = {}
                for m in ROWS:
                    x = mx.random.normal((1, m, h, d)).astype(dt)
                    mx.eval(x)
                    many = mx.fast.rope(x.transpose(0, 2, 1, 3), d, traditional=False, base=base, scale=1.0, offset=t)
                    ones = [mx.fast.rope(x[:, i : i + 1].transpose(0, 2, 1, 3), d, traditional=False, base=base,
                                         scale=1.0, offset=t + i) for i in range(m)]
                    mx.eval(many, *ones)
                    by_m[m] = sum(differs(many[:, :, i : i + 1], ones[i]) for i in range(m))
                report(f"rope {dt} H={h} D={d} base={base:g} offset={t}", by_m)


def buffer_with(keys, capacity, fill=None):
    """keys [1, H, n, D] written at the start of a [1, H, capacity, D] buffer (zeros, or `fill`
    after the keys), returned as the [..., :n, :] view a KVCache gives."""
    n = keys.shape[2]
    buf = mx.zeros((1, keys.shape[1], capacity, keys.shape[3]), dtype=keys.dtype) if fill is None else fill
    buf[:, :, :n, :] = keys
    mx.eval(buf)
    return buf[:, :, :n, :] if n < capacity else buf


def sdpas(quick):
    """One query over `keep` keys: the decoding step's buffer (capacity ceil(keep/256)*256, zeros
    after the keys) against other buffers holding the same keys; and each query of a causal
    many-query call against that query alone."""
    keeps = (100, 255, 256, 300, 511, 700, 1100) if not quick else (100, 300)
    for dt in (mx.bfloat16, mx.float32):
        for h, hk, d in ((32, 8, 128), (16, 8, 64), (4, 2, 32)):
            rows = []
            for keep in keeps:
                cap = (keep + STEP - 1) // STEP * STEP
                k = mx.random.normal((1, hk, keep, d)).astype(dt)
                v = mx.random.normal((1, hk, keep, d)).astype(dt)
                q = mx.random.normal((1, 1, h, d)).astype(dt).transpose(0, 2, 1, 3)
                mx.eval(k, v, q)
                sdpa = lambda q_, k_, v_: mx.fast.scaled_dot_product_attention(q_, k_, v_, scale=d**-0.5)
                ref = sdpa(q, buffer_with(k, cap), buffer_with(v, cap))
                garbage = lambda: mx.random.normal((1, hk, cap, d)).astype(dt)
                variants = {
                    "later keys after": sdpa(q, buffer_with(k, cap, garbage()), buffer_with(v, cap, garbage())),
                    "capacity +256": sdpa(q, buffer_with(k, cap + STEP), buffer_with(v, cap + STEP)),
                    "capacity +100": sdpa(q, buffer_with(k, cap + 100), buffer_with(v, cap + 100)),
                    "contiguous keys": sdpa(q, mx.contiguous(k), mx.contiguous(v)),
                }
                # The query as a slice of a many-query projection (attend_each_query's view).
                qs = mx.random.normal((1, 5, h, d)).astype(dt)
                qs[:, 2:3] = q.transpose(0, 2, 1, 3)
                variants["query sliced from L=5"] = sdpa(qs.transpose(0, 2, 1, 3)[:, :, 2:3], buffer_with(k, cap),
                                                         buffer_with(v, cap))
                mx.eval(ref, *variants.values())
                rows.append((keep, {name: differs(out, ref) for name, out in variants.items()}))
            for name in rows[0][1]:
                bad = [keep for keep, r in rows if r[name]]
                verdict = "equal" if not bad else "DIFFERS"
                results.append((f"sdpa one query {dt} H={h}/{hk} D={d}: {name}", verdict))
                print(f"{'sdpa one query ' + str(dt) + f' H={h}/{hk} D={d}: ' + name:58s} {verdict:8s} "
                      f"keys {keeps}: {'-' if not bad else 'differ at ' + str(bad)}", flush=True)
            # Causal many-query chunk at the end of T keys against each query alone over its prefix.
            by_m = {}
            for t, m in ((40, 4), (300, 4), (600, 8)):
                k = mx.random.normal((1, hk, t, d)).astype(dt)
                v = mx.random.normal((1, hk, t, d)).astype(dt)
                q = mx.random.normal((1, h, m, d)).astype(dt)
                many = mx.fast.scaled_dot_product_attention(q, k, v, scale=d**-0.5, mask="causal")
                ones = [mx.fast.scaled_dot_product_attention(q[:, :, i : i + 1], k[:, :, : t - m + i + 1],
                                                             v[:, :, : t - m + i + 1], scale=d**-0.5)
                        for i in range(m)]
                mx.eval(many, *ones)
                by_m[f"T={t},M={m}"] = sum(differs(many[:, :, i : i + 1], ones[i]) for i in range(m))
            report(f"sdpa causal chunk vs each query {dt} H={h}/{hk} D={d}", by_m)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer shapes (a CPU check of the script)")
    args = ap.parse_args()
    print(f"mlx {mx.__version__}, device {mx.default_device()}", flush=True)
    matmuls(args.quick)
    elementwise_and_norms()
    ropes()
    sdpas(args.quick)
    print(f"\nSUMMARY {sum(v == 'equal' for _, v in results)} equal, {sum(v != 'equal' for _, v in results)} differ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
