#!/usr/bin/env python3
"""What MLX's CUDA backend spends when a prefill comes at a length the process has not run before
(issue 14), measured through mlx-lm itself (the same MLX kernels mlxrt runs).

`costs`: in one process, prefills (mlx-lm's generate_step split: all tokens but the last as one
chunk, the cache evaluated, then the last token's logits) at each --lengths entry in turn, a
fresh KVCache each time; per run the wall time and, when api_timer.so is preloaded (API_TIMER
names it), the count and milliseconds of NVRTC compiles, module loads, cuDNN finalizes
(SDPA graph builds), cuDNN graph populations and cuBLASLt heuristics spent in it. MLX's own
switches (MLX_USE_CUDA_GRAPHS, MLX_CUDA_USE_CUDNN_SDPA, CUDA_MODULE_LOADING) are set by the
caller. --pad-sdpa G runs attention as mlxrt's padded prefill attention does (see
src/mlxrt/model/nn/attention.cpp), to see what is left once its shapes repeat.

`bytes`: whether the padded attention gives the real rows the bytes of the plain one: on the op
(random q/k/v in mlx-lm's layouts, many lengths and offsets) and end to end (first-token logits
and the KV cache of a prefill, optionally in chunks), after a control: the plain prefill run a
second time against the first (on the H200 that already differs for some prompts).

Usage: shape_cost.py costs MODEL_DIR --lengths 512 512 500 500 ... [--pad-sdpa 256] [--json OUT]
       shape_cost.py bytes MODEL_DIR [--lengths ...] [--chunk N] [--op-heads 16 8] [--op-mask-rows 1 3]
"""
import argparse
import ctypes
import json
import os
import random
import sys
import time

import mlx.core as mx
from mlx_lm import load
from mlx_lm.models import base, cache as cache_mod

PADDED_CALLS = [0]
TIMER = ctypes.CDLL(os.environ["API_TIMER"]) if os.environ.get("API_TIMER") else None
SHORT = {"nvrtcCompileProgram": "nvrtc", "cuModuleLoadDataEx": "modload", "cudnnBackendFinalize": "dnn_final",
         "cudnnBackendExecute": "dnn_exec", "cudnnBackendPopulateCudaGraph": "dnn_pop",
         "cudnnBackendUpdateCudaGraph": "dnn_upd", "cublasLtMatmulAlgoGetHeuristic": "lt_heur"}


def counters():
    if TIMER is None:
        return {}
    buf = ctypes.create_string_buffer(4096)
    TIMER.api_timer_report(buf, 4096)
    TIMER.api_timer_reset()
    out = {}
    for line in buf.value.decode().splitlines():
        name, n, ms = line.split()
        out[SHORT[name]] = (int(n), float(ms))
    return out


def padded_sdpa(bucket, original):
    """mlx-lm's scaled_dot_product_attention, with a causal prefill's queries padded with zero rows
    and its keys/values read further into the cache's own buffer, to the next multiple of `bucket`
    positions (never past the buffer): the real rows see the same keys under the same mask."""

    def sdpa(queries, keys, values, cache, scale, mask, sinks=None):
        L, Tk = queries.shape[2], keys.shape[2]
        if (isinstance(mask, str) and mask == "causal" and L > 1 and sinks is None
                and type(cache) is cache_mod.KVCache and cache.offset == Tk):
            room = cache.keys.shape[2]
            Tp = min(-(-Tk // bucket) * bucket, room)
            if Tp > Tk:
                B, H, _, D = queries.shape
                PADDED_CALLS[0] += 1
                q = mx.concatenate([queries, mx.zeros((B, H, Tp - Tk, D), queries.dtype)], axis=2)
                o = mx.fast.scaled_dot_product_attention(q, cache.keys[..., :Tp, :], cache.values[..., :Tp, :],
                                                         scale=scale, mask="causal")
                return o[:, :, :L, :]
        return original(queries, keys, values, cache, scale, mask, sinks)

    return sdpa


def install_padding(model, bucket):
    # The family's module calls the name it imported from base.
    sys.modules[type(model).__module__].scaled_dot_product_attention = \
        padded_sdpa(bucket, base.scaled_dot_product_attention)


def prefill(model, tokens, chunk=None):
    """(prefill s, last-token s, logits, cache) as mlx-lm's generate_step runs a prompt."""
    cache = cache_mod.make_prompt_cache(model)
    prompt = mx.array(tokens, mx.int32)
    mx.synchronize()
    t0 = time.perf_counter()
    done, total = 0, len(tokens)
    while total - done > 1:
        n = min(chunk or total, total - done - 1)
        model(prompt[done:done + n][None], cache=cache)
        mx.eval([c.state for c in cache])
        done += n
    t1 = time.perf_counter()
    logits = model(prompt[done:][None], cache=cache)[:, -1, :]
    mx.eval(logits)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, logits, cache


def tokens_for(n, vocab, seed):
    rng = random.Random(seed)
    return [rng.randrange(1000, min(vocab, 150000)) for _ in range(n)]


def costs(args):
    model, _ = load(args.model)
    if args.pad_sdpa:
        install_padding(model, args.pad_sdpa)
    vocab = model.args.vocab_size
    counters()
    seen, rows = set(), []
    label = os.environ.get("SHAPE_COST_LABEL", "default")
    print(f"# {os.path.basename(args.model.rstrip('/'))} [{label}{', pad-sdpa %d' % args.pad_sdpa if args.pad_sdpa else ''}]")
    print(f"{'len':>5} {'run':>5} {'total ms':>9} {'prefill':>8} {'last':>6}  " +
          "  ".join(f"{k:>14}" for k in SHORT.values()))
    for i, n in enumerate(args.lengths):
        p, s, _, _ = prefill(model, tokens_for(n, vocab, i))
        c = counters()
        kind = "again" if n in seen else "new"
        seen.add(n)
        rows.append({"len": n, "run": kind, "ms": (p + s) * 1e3, "prefill_ms": p * 1e3, "last_ms": s * 1e3, **c})
        print(f"{n:>5} {kind:>5} {(p + s) * 1e3:>9.1f} {p * 1e3:>8.1f} {s * 1e3:>6.1f}  " +
              "  ".join(f"{c.get(k, (0, 0))[0]:>4}/{c.get(k, (0, 0))[1]:>8.1f}" for k in SHORT.values()), flush=True)
    # One line for the caller's table: each length's first and second time, and what the first
    # runs after the first two (the process's own start-up) spent in the counted calls.
    new = [r for r in rows[2:] if r["run"] == "new"]
    again = {r["len"]: r["ms"] for r in rows[2:] if r["run"] == "again"}
    spent = {k: (sum(r.get(k, (0, 0))[0] for r in new), sum(r.get(k, (0, 0))[1] for r in new)) for k in SHORT.values()}
    print(f"SUMMARY {os.path.basename(args.model.rstrip('/'))} {label}{'+pad' if args.pad_sdpa else ''}: first runs "
          f"{rows[0]['ms']:.0f}/{rows[1]['ms']:.0f} ms; new/again " +
          " ".join(f"{r['len']}:{r['ms']:.0f}/{again.get(r['len'], float('nan')):.0f}" for r in new) + " | new runs spent " +
          " ".join(f"{k} {n}/{ms:.0f}ms" for k, (n, ms) in spent.items() if n), flush=True)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps({"model": args.model, "label": label, "pad": args.pad_sdpa, "rows": rows}) + "\n")


def batch_causal_mask(n, offset, left_padding):
    """create_causal_mask(n, offset, left_padding=...) of mlx_lm/models/base.py: [B, 1, n, offset + n]."""
    rinds = mx.arange(offset + n)
    linds = mx.arange(offset, offset + n)[:, None]
    mask = linds >= rinds[None]
    return mask & (mx.array(left_padding)[:, None, None, None] <= rinds)


def padded_query_count(n):
    """mlxrt's padded_query_count (model/nn/attention.cpp): a power of two from 16, then multiples of 256."""
    if n > 256:
        return -(-n // 256) * 256
    q = 16
    while q < n:
        q *= 2
    return q


def padded_row_count(n):
    """mlxrt's padded_row_count (model/nn/attention.cpp): the next power of two."""
    r = 1
    while r < n:
        r *= 2
    return r


def op_bytes(heads, bucket, lengths, offsets, rows=0, any_offset=False, contiguous=False, pad_rows=False):
    """Padded against plain fused attention on random inputs laid out as mlx-lm's are. rows > 0:
    the batched path's attention instead, `rows` left-padded rows under create_causal_mask's array
    (padded as mlxrt pads it: every added row and key column masked). any_offset: under the mask
    array, chunks at offsets off the 256 step pad their queries to padded_query_count (mlxrt's
    MLXRT_PAD_MASKED_ANY_OFFSET=1) instead of to the bucket's end. contiguous: under the mask array,
    the cache's buffer holds exactly the keys (as a batched cache's merge leaves it: capacity Tk),
    and the padded attention reads a contiguous copy padded with zeros to the next multiple of 256
    (mlxrt's MLXRT_PAD_MASKED_CONTIGUOUS=1), while the plain one reads the buffer as mlx-lm does.
    pad_rows (with contiguous): the padded call also has its batch rows padded to
    padded_row_count (zero queries, keys and values, every mask entry masked) and its queries as a
    fresh row-major copy even when no position is added (mlxrt's MLXRT_PAD_MASKED_ROWS, default on)."""
    hq, hkv = heads
    D, bad, total = 128, [], 0
    B = max(rows, 1)
    for p in offsets:
        for L in lengths:
            Tk = p + L
            room = Tk if rows and contiguous else -(-Tk // 256) * 256
            Tp = -(-Tk // 256) * 256 if rows and contiguous else min(-(-Tk // bucket) * bucket, room)
            Lp = L + Tp - Tk
            if rows and any_offset and p % 256:
                Lp = padded_query_count(L)
            elif p % 256 and any_offset:
                continue  # the causal path pads only on the step
            if (Tp == Tk and Lp == L and not (rows and contiguous)) or L == 1:
                continue
            mx.random.seed(L * 7919 + p)
            q = mx.random.normal((B, L, hq, D)).astype(mx.bfloat16).transpose(0, 2, 1, 3)
            kb = mx.random.normal((B, hkv, room, D)).astype(mx.bfloat16)
            vb = mx.random.normal((B, hkv, room, D)).astype(mx.bfloat16)
            mask = padded_mask = "causal"
            if rows:
                # Row b left-padded by b * L // (2 * B) positions (row 0 by none).
                mask = batch_causal_mask(L, p, [b * L // (2 * B) for b in range(B)])
                padded_mask = mx.pad(mask, [(0, 0), (0, 0), (0, Lp - L), (0, Tp - Tk)], constant_values=False)
            mx.eval(q, kb, vb)
            plain = mx.fast.scaled_dot_product_attention(q, kb[..., :Tk, :], vb[..., :Tk, :], scale=D ** -0.5,
                                                         mask=mask)
            Bp = padded_row_count(B) if rows and contiguous and pad_rows else B
            if Bp > B or (rows and contiguous and pad_rows):
                qp = mx.contiguous(mx.pad(q, [(0, Bp - B), (0, 0), (0, Lp - L), (0, 0)]))
                padded_mask = mx.pad(padded_mask, [(0, Bp - B), (0, 0), (0, 0), (0, 0)], constant_values=False)
            else:
                qp = mx.concatenate([q, mx.zeros((B, hq, Lp - L, D), q.dtype)], axis=2)
            if rows and contiguous:
                kp = mx.contiguous(mx.pad(kb[..., :Tk, :], [(0, Bp - B), (0, 0), (0, Tp - Tk), (0, 0)]))
                vp = mx.contiguous(mx.pad(vb[..., :Tk, :], [(0, Bp - B), (0, 0), (0, Tp - Tk), (0, 0)]))
            else:
                kp, vp = kb[..., :Tp, :], vb[..., :Tp, :]
            padded = mx.fast.scaled_dot_product_attention(qp, kp, vp, scale=D ** -0.5, mask=padded_mask)[:B, :, :L, :]
            total += 1
            if not mx.array_equal(plain, padded).item():
                bad.append((p, L))
    return total, bad


def bytes_check(args):
    lengths = args.lengths or [2, 3, 63, 65, 255, 257, 500, 513, 777, 1000, 1500, 2047]
    if args.op_heads:
        for heads in (tuple(args.op_heads[i:i + 2]) for i in range(0, len(args.op_heads), 2)):
            op_lengths = args.op_lengths or sorted(set(lengths) | set(range(2, 2100, 131)))
            for rows in [0] + (args.op_mask_rows or []):
                contiguous = bool(rows and args.op_contiguous)
                if not args.op_skip_step:
                    total, bad = op_bytes(heads, args.bucket, op_lengths, [0, 2048, 300], rows, contiguous=contiguous,
                                          pad_rows=args.op_pad_rows)
                    kind = (f"mask array, {rows} rows" + (", contiguous" if contiguous else "")
                            + (f", rows padded to {padded_row_count(rows)}" if contiguous and args.op_pad_rows else "")
                            ) if rows else "causal"
                    print(f"op heads {heads[0]}/{heads[1]} ({kind}): {total - len(bad)}/{total} padded = plain"
                          + (f"; differ at (offset, len) {bad[:20]}" if bad else ""), flush=True)
                if not (rows and args.op_any_offset):
                    continue
                # Queries padded to padded_query_count at offsets off the step: short chunks (a
                # prompt batch's second step, a chat turn after a prompt-cache hit) and long ones.
                any_lengths = args.op_lengths or sorted(set(op_lengths) | {2, 3, 5, 8, 9, 15, 17, 31, 33, 100, 200})
                total, bad = op_bytes(heads, args.bucket, any_lengths, [37, 300, 1000, 2100], rows, any_offset=True,
                                      contiguous=contiguous, pad_rows=args.op_pad_rows)
                kind = (f"mask array, {rows} rows, any offset" + (", contiguous" if contiguous else "")
                        + (f", rows padded to {padded_row_count(rows)}" if contiguous and args.op_pad_rows else ""))
                print(f"op heads {heads[0]}/{heads[1]} ({kind}): {total - len(bad)}/{total} padded = plain"
                      + (f"; differ at (offset, len) {bad[:20]}" if bad else ""), flush=True)
    if not args.model:
        return
    model, _ = load(args.model)
    vocab = model.args.vocab_size
    plain = {n: prefill(model, tokens_for(n + 1, vocab, n), args.chunk) for n in lengths}
    name = os.path.basename(args.model.rstrip('/'))
    # The control first: the plain prefill again, in the same process (MLX's CUDA backend is
    # deterministic for a given shape; any difference here would make the padded check moot).
    for label in ("plain again", "padded"):
        if label == "padded":
            install_padding(model, args.bucket)
        equal = 0
        for n in lengths:
            _, _, logits, cache = plain[n]
            _, _, lp, cp = prefill(model, tokens_for(n + 1, vocab, n), args.chunk)
            first = None
            for layer, (a, b) in enumerate(zip(cache, cp)):
                off = a.offset
                if not (mx.array_equal(a.keys[..., :off, :], b.keys[..., :off, :]).item()
                        and mx.array_equal(a.values[..., :off, :], b.values[..., :off, :]).item()):
                    first = layer
                    break
            same = first is None and mx.array_equal(logits, lp).item()
            equal += same
            if not same:
                where = f"layer {first}'s K/V" if first is not None else "logits only"
                diff = mx.abs(logits.astype(mx.float32) - lp.astype(mx.float32)).max().item()
                print(f"  {label} prompt {n + 1}: differs from the first plain run from {where} "
                      f"(logits max |diff| {diff:.3g})", flush=True)
        print(f"end to end {name} chunk {args.chunk}: {label} = plain for {equal}/{len(lengths)} prompts "
              f"(first-token logits and every layer's K/V; {PADDED_CALLS[0]} padded attention calls)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["costs", "bytes"])
    ap.add_argument("model", nargs="?")
    ap.add_argument("--lengths", type=int, nargs="*")
    ap.add_argument("--pad-sdpa", type=int, default=0)
    ap.add_argument("--bucket", type=int, default=256)
    ap.add_argument("--chunk", type=int)
    ap.add_argument("--op-heads", type=int, nargs="*")
    ap.add_argument("--op-mask-rows", type=int, nargs="*",
                    help="also check the batched path's padded attention (mask array) with these row counts")
    ap.add_argument("--op-any-offset", action="store_true",
                    help="with --op-mask-rows: also check queries padded to padded_query_count at offsets off "
                         "the 256 step (MLXRT_PAD_MASKED_ANY_OFFSET=1)")
    ap.add_argument("--op-lengths", type=int, nargs="*",
                    help="the op checks' query lengths (default: --lengths and every 131st from 2 to 2100)")
    ap.add_argument("--op-skip-step", action="store_true",
                    help="skip the checks on the 256 step (causal and mask array): with --op-any-offset, "
                         "only the any-offset one runs")
    ap.add_argument("--op-contiguous", action="store_true",
                    help="with --op-mask-rows: the keys a buffer of exactly Tk positions (a merged batched cache), "
                         "padded as a contiguous copy (MLXRT_PAD_MASKED_CONTIGUOUS=1)")
    ap.add_argument("--op-pad-rows", action="store_true",
                    help="with --op-contiguous: the padded call's rows padded to a power of two and its queries a "
                         "row-major copy (MLXRT_PAD_MASKED_ROWS)")
    ap.add_argument("--json")
    args = ap.parse_args()
    costs(args) if args.mode == "costs" else bytes_check(args)


if __name__ == "__main__":
    main()
