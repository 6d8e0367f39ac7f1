"""mlx-lm itself on this machine's MLX device: rows of its BatchGenerator (driven as batch_generate
drives it, tools/batch_oracle.py) against generate_step of each prompt alone, greedy, the same
prefill step. Shows whether the L1 batch (which mlxrt's default mode equals) is row-invariant here.

Run: python bench/batch_invariant/mlx_lm_solo_vs_batch.py build/fixtures/qwen3_bf16 [more model dirs]
"""
import sys
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.utils import load_model

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from batch_oracle import batch_tokens  # noqa: E402

STEP = 32
EOS = 2


def requests(n):
    return [{"prompt_tokens": [10 + (13 * i + 7 * j) % 480 for j in range(1 + (37 * i) % 300)],
             "max_tokens": 16 + (11 * i) % 40} for i in range(n)]


for model_dir in map(Path, sys.argv[1:]):
    reqs = requests(8)
    rows = batch_tokens(model_dir, reqs, [EOS], completion_batch_size=4, prefill_batch_size=4, prefill_step_size=STEP)
    model, _ = load_model(model_dir)
    tok = lp = 0
    for r, (tokens, logprobs, _) in zip(reqs, rows):
        st, sl = [], []
        for (t, l), _ in zip(generate_step(mx.array(r["prompt_tokens"]), model, max_tokens=r["max_tokens"],
                                           prefill_step_size=STEP), range(r["max_tokens"])):
            if t == EOS:
                break
            st.append(t)
            sl.append(l[t].item())
        tok += st == tokens
        lp += st == tokens and sl == logprobs
    print(f"mlx-lm {model_dir.name} on {mx.default_device()}: {tok}/{len(reqs)} batch rows with the solo tokens, "
          f"{lp}/{len(reqs)} with the solo logprobs too", flush=True)
