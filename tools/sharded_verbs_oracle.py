"""The reference for the distributed perplexity, cache_prompt, batch-generate and embed runs: mlx-lm's
own code for each (mlx_lm.perplexity's main, mlx_lm.cache_prompt's main, BatchGenerator, the model's
hidden states) over the model sharded as tools/sharded_oracle.py shards it, in one rank of a run
started by mlx.launch. Only rank 0 writes what it records.

  sharded_verbs_oracle.py [--pipeline] perplexity --model DIR --record OUT (--text-file F | --rows F) [flags]
  sharded_verbs_oracle.py [--pipeline] cache_prompt --model DIR --prompt P --prompt-cache-file OUT [flags]
  sharded_verbs_oracle.py [--pipeline] batch --model DIR --requests F.json --out OUT.json
  sharded_verbs_oracle.py [--pipeline] hidden --model DIR --tokens 1,2,3 --out OUT.safetensors
  sharded_verbs_oracle.py [--pipeline] logits --model DIR --prompt-cache-file F --tokens 1,2,3 --out OUT.safetensors

mlx_lm.cache_prompt has no distributed mode, and a rank's cache holds only its part of the model:
here its save_prompt_cache first gathers the ranks' parts into the whole model's cache (key/value
heads joined in rank order for tensor parallel, each layer from the rank that ran it for a pipeline);
`logits` continues such a whole-model cache file on the sharded model, each rank keeping its part.
"""
import json
import sys
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import KVCache, RotatingKVCache

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sharded_oracle import sharded_model  # noqa: E402


def gather_parts(x, group):
    """Every rank's x (same shape and dtype everywhere), in rank order."""
    all_ = mx.distributed.all_gather(x[None], group=group)
    return [all_[r] for r in range(group.size())]


def layer_meta(c):
    """kind (0 KVCache, 1 RotatingKVCache), offset, keep, max_size, idx."""
    if isinstance(c, RotatingKVCache):
        return [1, c.offset, c.keep, c.max_size, c._idx]
    return [0, c.offset, 0, 0, 0]


def make_layer(keys, values, meta):
    kind, offset, keep, max_size, idx = meta
    if kind == 1:
        layer = RotatingKVCache(max_size, keep)
        layer.state = (keys, values, offset, keep, max_size, idx)
    else:
        layer = KVCache()
        layer.state = (keys, values, offset)
    return layer


def gather_cache(cache, group, pipeline):
    if not pipeline:  # each layer's key/value heads joined in rank order
        for c in cache:
            c.keys = mx.concatenate(gather_parts(c.keys, group), axis=1)
            c.values = mx.concatenate(gather_parts(c.values, group), axis=1)
        return cache
    counts = [int(n) for n in gather_parts(mx.array(len(cache)), group)]
    whole = []
    for owner in reversed(range(group.size())):
        for j in range(counts[owner]):
            mine = cache[j] if owner == group.rank() else None
            header = list(mine.keys.shape) + layer_meta(mine) if mine else [0] * 9
            header = gather_parts(mx.array(header), group)[owner].tolist()
            dtype = cache[0].keys.dtype
            k = gather_parts(mine.keys if mine else mx.zeros(header[:4], dtype), group)[owner]
            v = gather_parts(mine.values if mine else mx.zeros(header[:4], dtype), group)[owner]
            whole.append(make_layer(k, v, header[4:]))
    return whole


def main():
    pipeline = "--pipeline" in sys.argv[1:3]
    args = [a for a in sys.argv[1:] if a != "--pipeline"] if pipeline else sys.argv[1:]
    verb, rest = args[0], args[1:]
    model_dir = rest[rest.index("--model") + 1]
    model, group = sharded_model(model_dir, pipeline)
    rank0 = group.rank() == 0

    def load(path, **kwargs):
        from mlx_lm.utils import load_tokenizer
        eos = json.loads((Path(path) / "config.json").read_text()).get("eos_token_id")
        return model, load_tokenizer(Path(path), kwargs.get("tokenizer_config") or {}, eos_token_ids=eos)

    if verb == "perplexity":
        import perplexity_oracle
        from mlx_lm import perplexity
        perplexity.load = load
        if not rank0:  # every rank records; rank 0's file is the one kept
            i = rest.index("--record") + 1
            rest[i] += f".rank{group.rank()}"
        sys.argv = ["perplexity_oracle.py", *rest]
        perplexity_oracle.main()
    elif verb == "cache_prompt":
        from mlx_lm import cache_prompt
        save = cache_prompt.save_prompt_cache

        def save_whole(path, cache, metadata):
            whole = gather_cache(cache, group, pipeline)
            mx.eval([c.state for c in whole])
            if rank0:
                save(path, whole, metadata)

        cache_prompt.load = load
        cache_prompt.save_prompt_cache = save_whole
        sys.argv = ["mlx_lm.cache_prompt", *rest]
        cache_prompt.main()
    elif verb == "batch":
        import batch_oracle
        batch_oracle.load_model = lambda path: (model, None)
        requests = json.loads(Path(rest[rest.index("--requests") + 1]).read_text())["requests"]
        eos = json.loads((Path(model_dir) / "config.json").read_text())["eos_token_id"]
        rows = batch_oracle.batch_tokens(model_dir, requests, eos if isinstance(eos, list) else [eos])
        if rank0:
            Path(rest[rest.index("--out") + 1]).write_text(json.dumps([list(r) for r in rows]))
    elif verb == "hidden":
        ids = [int(t) for t in rest[rest.index("--tokens") + 1].split(",")]
        hidden = model.model(mx.array([ids]))[0].astype(mx.float32)
        mx.eval(hidden)
        if rank0:
            mx.save_safetensors(rest[rest.index("--out") + 1], {"hidden": hidden})
    elif verb == "logits":
        from mlx_lm.models.cache import load_prompt_cache
        cache = load_prompt_cache(rest[rest.index("--prompt-cache-file") + 1])
        r, n = group.rank(), group.size()
        if pipeline:
            cache = cache[model.model.start_idx:model.model.end_idx]
        else:
            for c in cache:
                h = c.keys.shape[1] // n
                c.keys, c.values = c.keys[:, r * h:(r + 1) * h], c.values[:, r * h:(r + 1) * h]
        ids = [int(t) for t in rest[rest.index("--tokens") + 1].split(",")]
        logits = model(mx.array([ids]), cache=cache)[0]
        mx.eval(logits)
        if rank0:
            mx.save_safetensors(rest[rest.index("--out") + 1], {"logits": logits})
    else:
        raise SystemExit(f"unknown verb {verb!r}")
    # Meet before leaving, so that no rank exits while another still talks to it.
    mx.synchronize()
    mx.eval(mx.distributed.all_sum(mx.array(1.0), stream=mx.cpu))


if __name__ == "__main__":
    main()
