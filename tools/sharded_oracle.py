"""The reference for distributed runs: mlx-lm's sharded load and forward, in one rank of a run started
by mlx.launch (or any launcher that sets MLX's environment). The model is loaded as
mlx_lm.utils.sharded_load loads it (load_model lazily and non-strictly, then model.shard(group) or
model.model.pipeline(group), then every parameter evaluated and an all_sum barrier); tokenizer
files are not needed, so that the tiny fixtures without one can be used.

Rank 0 writes --out: tensor "logits" [T, vocab] of one forward over --tokens, and, with
--max-tokens N, tensor "tokens" [N]: the greedy continuation through a KV cache (mlx-lm's
generate_step with an argmax sampler).
"""
import argparse
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.utils import load_model


def sharded_model(path, pipeline):
    group = mx.distributed.init()
    model, _ = load_model(Path(path), lazy=True, strict=False)
    if group.size() > 1:
        if pipeline:
            model.model.pipeline(group)
        else:
            model.shard(group)
    mx.eval(model.parameters())
    mx.eval(mx.distributed.all_sum(mx.array(1.0), stream=mx.cpu))
    return model, group


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--tokens", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--pipeline", action="store_true")
    p.add_argument("--max-tokens", type=int, default=0)
    args = p.parse_args()
    ids = [int(t) for t in args.tokens.split(",")]
    model, group = sharded_model(args.model, args.pipeline)
    logits = model(mx.array([ids]))[0]
    mx.eval(logits)
    out = {"logits": logits}
    if args.max_tokens:
        tokens = []
        for (tok, _), _ in zip(generate_step(mx.array(ids), model, sampler=lambda x: mx.argmax(x, axis=-1)),
                               range(args.max_tokens)):
            tokens.append(int(tok))
        out["tokens"] = mx.array(tokens, dtype=mx.int32)
    # generate_step leaves the step after the last token in flight: let every rank finish it, then
    # meet, so that no rank exits while another still talks to it.
    mx.synchronize()
    mx.eval(mx.distributed.all_sum(mx.array(1.0), stream=mx.cpu))
    if group.rank() == 0:
        mx.save_safetensors(args.out, out)


if __name__ == "__main__":
    main()
