#!/usr/bin/env python3
"""What one graph node of each kind costs MLX's host (issue 14: a decode step on the H200 is bound by
MLX's per-node host work, about 4 µs a node on average; which kinds cost most decides what our L3
kernels should fuse next).

For each kind of node a decoding step has, this builds a chain of --nodes nodes of that kind on
decode-sized operands (each node reads the one before, so none can be dropped), then times:
  build     making the lazy graph (Python and MLX's op constructors),
  dispatch  mx.async_eval returning (MLX walking the graph and encoding each node's work),
  wait      the eval after it (the device finishing),
each per node, the median of --rounds rounds after one untimed round (compiles, graph capture).
The operands are decode-sized, so on a GPU the device's share is small and the dispatch column
is the host's cost per node (the two matmul rows read a 4096 x 4096 weight a node: their device
time can reach into dispatch once MLX throttles the buffers in flight). Runs on any MLX device,
but on the CPU `dispatch` holds the computing too (MLX's CPU stream throttles the enqueue), so
there it only checks the script; the custom-kernel row needs CUDA.
On a GPU machine: `L3_STEPS=nodecost bench/gpu/l3_run.sh` (NODE_COST_ARGS: these options).

Usage: bench/gpu/node_cost.py [--nodes 400] [--rounds 5] [--dims 4096] [--heads 32 8] [--head-dim 128]
       [--kinds add ...] [--json FILE]
"""
import argparse
import json
import statistics
import time

import mlx.core as mx


def kinds(dims, heads, kv_heads, head_dim, dtype):
    """name -> (setup() -> state, step(state, x) -> x, nodes per step): each step's nodes as a
    decoding layer makes them, x the running value (shaped [1, 1, dims] between steps)."""
    w_norm = mx.ones((dims,), dtype)
    w_dense = (mx.random.normal((dims, dims)) * 0.02).astype(dtype)
    w_q, s_q, b_q = mx.quantize(w_dense, group_size=64, bits=4)
    hd = head_dim
    cache_len = 256
    keys = (mx.random.normal((1, kv_heads, cache_len, hd)) * 0.1).astype(dtype)
    values = (mx.random.normal((1, kv_heads, cache_len, hd)) * 0.1).astype(dtype)
    mx.eval(w_norm, w_dense, w_q, s_q, b_q, keys, values)

    def to_heads(x, n):
        return x[..., : n * hd].reshape(1, 1, n, hd).transpose(0, 2, 1, 3)

    def from_heads(y):
        return y.transpose(0, 2, 1, 3).reshape(1, 1, -1)

    def widen(y):
        return mx.pad(y, [(0, 0), (0, 0), (0, dims - y.shape[-1])]) if y.shape[-1] < dims else y[..., :dims]

    out = {
        "add": (lambda x: x + 1, 1),
        "views (reshape + transpose, x2)": (lambda x: from_heads(to_heads(x, dims // hd)), 4),
        "rms_norm": (lambda x: mx.fast.rms_norm(x, w_norm, 1e-6), 1),
        "rope": (lambda x: from_heads(mx.fast.rope(to_heads(x, dims // hd), hd, traditional=False, base=1e6,
                                                   scale=1.0, offset=100)), 5),
        "matmul (dense gemv)": (lambda x: x @ w_dense.T, 1),
        "quantized_matmul (4-bit)": (lambda x: mx.quantized_matmul(x, w_q, s_q, b_q, True, 64, 4), 1),
        "sdpa (one query, 256 keys)": (lambda x: widen(from_heads(mx.fast.scaled_dot_product_attention(
            to_heads(x, heads), keys, values, scale=hd ** -0.5))), 7),
    }

    # A KV cache's update: the new key written into the buffer at the next position (a
    # slice_update), then the prefix read back (a slice view), as mlx-lm's KVCache does.
    state = {"buf": None, "pos": 0}

    def cache_update(x):
        if state["buf"] is None or state["pos"] >= cache_len:
            state["buf"], state["pos"] = mx.zeros((1, kv_heads, cache_len, hd), dtype), 0
        k = to_heads(x, kv_heads)
        buf = state["buf"]
        buf[..., state["pos"]:state["pos"] + 1, :] = k
        state["pos"] += 1
        return widen(from_heads(buf[..., state["pos"] - 1:state["pos"], :]))

    out["slice_update (cache write)"] = (cache_update, 6)
    if mx.default_device() == mx.gpu and hasattr(mx, "cuda") and mx.cuda.is_available():
        kernel = mx.fast.cuda_kernel(name="node_cost_copy", input_names=["inp"], output_names=["out"],
                                     source="unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;"
                                            " if (i < N) out[i] = inp[i];")

        def custom(x):
            return kernel(inputs=[x], output_shapes=[x.shape], output_dtypes=[x.dtype], grid=(dims, 1, 1),
                          threadgroup=(256, 1, 1), template=[("N", x.size)])[0]
        out["custom kernel (mx.fast.cuda_kernel)"] = (custom, 1)
    return out


def time_chain(step, per_step, nodes, rounds, dims, dtype):
    steps = max(1, nodes // per_step)
    results = []
    for r in range(rounds + 1):
        x = mx.ones((1, 1, dims), dtype)
        mx.eval(x)
        t0 = time.perf_counter()
        for _ in range(steps):
            x = step(x)
        t1 = time.perf_counter()
        mx.async_eval(x)
        t2 = time.perf_counter()
        mx.eval(x)
        t3 = time.perf_counter()
        if r > 0:
            n = steps * per_step
            results.append(((t1 - t0) / n, (t2 - t1) / n, (t3 - t2) / n))
    return [statistics.median(c[i] for c in results) for i in range(3)], steps * per_step


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dims", type=int, default=4096)
    ap.add_argument("--heads", type=int, nargs=2, default=[32, 8], metavar=("Q", "KV"))
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--kinds", nargs="*", help="only these kinds (names as printed, a prefix is enough)")
    ap.add_argument("--json", help="also write the table here")
    args = ap.parse_args()
    dtype = mx.bfloat16
    table = kinds(args.dims, args.heads[0], args.heads[1], args.head_dim, dtype)
    print(f"device {mx.default_device()}, {args.nodes} nodes a chain, bf16 operands of {args.dims}; "
          f"µs per node (median of {args.rounds} rounds)")
    print(f"{'kind':<40} {'nodes':>6} {'build':>8} {'dispatch':>9} {'wait':>8}")
    rows = []
    for name, (step, per_step) in table.items():
        if args.kinds and not any(name.startswith(k) for k in args.kinds):
            continue
        (build, dispatch, wait), n = time_chain(step, per_step, args.nodes, args.rounds, args.dims, dtype)
        rows.append({"kind": name, "nodes": n, "build_us": build * 1e6, "dispatch_us": dispatch * 1e6,
                     "wait_us": wait * 1e6})
        print(f"{name:<40} {n:>6} {build * 1e6:>8.2f} {dispatch * 1e6:>9.2f} {wait * 1e6:>8.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
