#!/usr/bin/env python3
"""The copy bandwidth of the default MLX device: an elementwise pass over a large bf16 array
(x * 1: each element read once and written once), counting bytes read plus bytes written;
median of timed repeats after warm-ups. Prints one JSON line. With PyTorch on a GPU, also its
device-to-device copy, as a cross-check."""
import argparse
import json
import statistics
import time

import mlx.core as mx


def mlx_copy_gbps(n_bytes: int, repeats: int) -> float:
    x = mx.random.uniform(shape=(n_bytes // 2 // 4096, 4096)).astype(mx.bfloat16)  # < 2**31 per axis
    mx.eval(x)
    times = []
    for i in range(repeats + 3):
        mx.synchronize()
        t = time.perf_counter()
        y = x * 1
        mx.eval(y)
        mx.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t)
        del y
    return 2 * x.nbytes / statistics.median(times) / 1e9


def torch_copy_gbps(n_bytes: int, repeats: int):
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    x = torch.rand(n_bytes // 2, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    times = []
    for i in range(repeats + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        y.copy_(x)
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) / 1e3)
    return 2 * x.numel() * 2 / statistics.median(times) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    n = int(args.gib * 2**30)
    out = {"device": str(mx.default_device()), "bytes": n, "mlx_copy_GBps": mlx_copy_gbps(n, args.repeats),
           "torch_copy_GBps": torch_copy_gbps(n, args.repeats)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
