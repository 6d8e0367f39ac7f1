"""The mlx-lm side of the speculative-decoding parity tests: what mlx_lm.generate does with
--draft-model (seed, build the main model, build the draft model, make the sampler), run through
mlx_lm.generate.speculative_generate_step on token ids."""
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import speculative_generate_step
from mlx_lm.sample_utils import make_logits_processors, make_sampler
from mlx_lm.utils import load_model


def speculative_tokens(model_dir, draft_dir, prompt, max_tokens, seed, sampler_args, processor_args, eos_ids,
                       num_draft_tokens=3, prefill_step_size=2048):
    """Token ids, their logprobs [T, vocab] and from_draft flags, stopping at an eos id as
    mlx_lm.generate's stream_generate does."""
    if seed is not None:
        mx.random.seed(seed)
    model, _ = load_model(Path(model_dir))
    draft, _ = load_model(Path(draft_dir))
    sampler = make_sampler(**sampler_args)
    processors = make_logits_processors(**processor_args)
    tokens, rows, flags = [], [], []
    steps = speculative_generate_step(mx.array(prompt), model, draft, num_draft_tokens=num_draft_tokens,
                                      max_tokens=max_tokens, sampler=sampler, logits_processors=processors,
                                      prefill_step_size=prefill_step_size)
    for n, (token, logprobs, from_draft) in enumerate(steps):
        if token in eos_ids:
            break
        tokens.append(token)
        rows.append(logprobs)
        flags.append(from_draft)
        if n + 1 == max_tokens:
            break
    return tokens, (mx.stack(rows) if rows else None), flags


def make_chat_pair(fixtures, tokenizers):
    """A tiny random llama with Qwen3's tokenizer and chat template (the generate tests' chat
    fixture recipe, seed 41) and its 4-bit copy as the draft, made once under the fixtures lock."""
    import fcntl
    import json
    import shutil

    import make_fixtures

    config = {**make_fixtures.LLAMA, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
              "bos_token_id": None, "eos_token_id": 151645}
    fixtures = Path(fixtures)
    fixtures.mkdir(parents=True, exist_ok=True)
    made = []
    with open(fixtures / ".generate-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            for name, quant in (("llama_qwen3_tokenizer_spec_main", None),
                                ("llama_qwen3_tokenizer_spec_q4", {"bits": 4, "group_size": 64})):
                recipe = make_fixtures.fx(config, quant=quant, seed=41)
                target = fixtures / name
                stamp = target / "chat-fixture.json"
                want = json.dumps({**recipe, "tokenizer": "qwen3"}, sort_keys=True)
                if not (stamp.exists() and stamp.read_text() == want):
                    make_fixtures.build(name, recipe, target)
                    for f in (Path(tokenizers) / "qwen3").iterdir():
                        shutil.copy(f, target / f.name)
                    stamp.write_text(want)
                made.append(target)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return made[0], made[1]
