"""The mlx-lm oracle the parity tests compare against: the same computations the `mlxrt` verbs
do, written with the pinned mlx-lm's own Python API."""
import shutil
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.utils import load_model


def load(path):
    model, config = load_model(Path(path))
    return model, config


def full_logits(model, tokens):
    """One forward over all tokens, no cache: logits [T, vocab]."""
    out = model(mx.array(tokens)[None])[0]
    mx.eval(out)
    return out


def incremental_logits(model, tokens):
    """One token at a time through mlx-lm's KV cache: logits [T, vocab]."""
    cache = make_prompt_cache(model)
    rows = []
    for t in tokens:
        row = model(mx.array([t])[None], cache=cache)[0]
        mx.eval(row)
        rows.append(row)
    return mx.concatenate(rows, axis=0)


def greedy_tokens(model, config, prompt, max_tokens, prefill_step_size=2048):
    """Greedy tokens as mlx_lm.generate streams them: generate_step, stopping at an eos id."""
    eos = config.get("eos_token_id")
    eos = set(eos if isinstance(eos, list) else ([eos] if eos is not None else []))
    out = []
    for n, (token, _) in enumerate(generate_step(mx.array(prompt), model, max_tokens=max_tokens,
                                                 prefill_step_size=prefill_step_size)):
        if token in eos:
            break
        out.append(token)
        if n + 1 == max_tokens:
            break
    return out


def raw_bytes(a):
    """The exact bytes of an MLX array (bfloat16 has no numpy dtype: view it as uint16)."""
    width = {1: mx.uint8, 2: mx.uint16, 4: mx.uint32, 8: mx.uint64}[a.dtype.size]
    return np.array(a.view(width)).tobytes()


def float32_copy(path, out):
    """A copy of the model at `path` in `out` with every 16-bit floating tensor as float32
    (quantized weights as they are)."""
    shutil.copytree(path, out)
    for f in Path(out).glob("*.safetensors"):
        tensors = mx.load(str(f))
        mx.save_safetensors(str(f), {k: v.astype(mx.float32) if v.dtype in (mx.bfloat16, mx.float16) else v
                                     for k, v in tensors.items()}, metadata={"format": "mlx"})
    return Path(out)
