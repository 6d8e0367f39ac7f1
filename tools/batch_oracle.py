"""The mlx-lm side of the batched-generation parity tests: mlx-lm's BatchGenerator driven as
batch_generate drives it (insert everything, then next_generated() until empty), with per-request
samplers and logits processors as BatchGenerator.insert takes them, seeded the way mlx_lm.generate
seeds (before the model is built)."""
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import BatchGenerator
from mlx_lm.sample_utils import make_logits_processors, make_sampler
from mlx_lm.tuner.utils import load_adapters
from mlx_lm.utils import load_model


def batch_tokens(model_dir, requests, eos_ids, seed=None, max_tokens=128, sampler_args=None, processor_args=None,
                 adapter_path=None, **generator_args):
    """Per request: (tokens, logprobs of the sampled tokens, finish reason), the stop token left out
    as batch_generate leaves it out. `requests` are the dicts `mlxrt batch-generate --requests`
    reads; `sampler_args` / `processor_args` are the defaults (the CLI's flags). `adapter_path`: an
    mlx_lm.lora adapter applied as mlx_lm's load(adapter_path=...) applies it."""
    if seed is not None:
        mx.random.seed(seed)
    model, _ = load_model(Path(model_dir))
    if adapter_path is not None:
        load_adapters(model, str(adapter_path))
        model.eval()
    default_sampler = make_sampler(**sampler_args) if sampler_args else None
    gen = BatchGenerator(model, max_tokens=max_tokens, stop_tokens=[[t] for t in eos_ids], sampler=default_sampler,
                         **generator_args)
    samplers = [make_sampler(**r["sampler"]) if "sampler" in r else None for r in requests]
    processors = [make_logits_processors(**{**(processor_args or {}), **r.get("logits_processors", {})})
                  for r in requests]
    uids = gen.insert([r["prompt_tokens"] for r in requests], [r.get("max_tokens", max_tokens) for r in requests],
                      samplers=samplers, logits_processors=processors)
    tokens = {u: [] for u in uids}
    logprobs = {u: [] for u in uids}
    finish = {}
    while responses := gen.next_generated():
        for r in responses:
            if r.finish_reason is not None:
                finish[r.uid] = r.finish_reason
            if r.finish_reason != "stop":
                tokens[r.uid].append(r.token)
                logprobs[r.uid].append(r.logprobs[r.token].item())
    gen.close()
    return [(tokens[u], logprobs[u], finish[u]) for u in uids]
