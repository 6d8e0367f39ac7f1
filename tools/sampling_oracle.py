"""The mlx-lm side of the sampling parity tests: what mlx_lm.generate does with a seed (seed, then
build the model, then sample), with the sampler and logits processors of mlx_lm.sample_utils."""
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_logits_processors, make_sampler
from mlx_lm.utils import load_model


def sample_tokens(model_dir, prompt, max_tokens, seed, sampler_args, processor_args, eos_ids):
    """Token ids and their logprobs [T, vocab], stopping at an eos id as mlx_lm.generate does."""
    mx.random.seed(seed)
    model, _ = load_model(Path(model_dir))
    sampler = make_sampler(**sampler_args)
    processors = make_logits_processors(**processor_args)
    tokens, rows = [], []
    for n, (token, logprobs) in enumerate(
        generate_step(mx.array(prompt), model, max_tokens=max_tokens, sampler=sampler, logits_processors=processors)
    ):
        if token in eos_ids:
            break
        tokens.append(token)
        rows.append(logprobs)
        if n + 1 == max_tokens:
            break
    return tokens, (mx.stack(rows) if rows else None)
