"""mlx-lm's side of the KV-cache parity tests: the computations `mlxrt logits` does through a
prompt cache (make_prompt_cache, maybe_quantize_kv_cache after every model call as generate_step
does, load_prompt_cache), and a tiny tokenizer so that mlx_lm.cache_prompt can run on a fixture."""
import json
import shutil
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import maybe_quantize_kv_cache
from mlx_lm.models.cache import make_prompt_cache


def cached_logits(model, tokens, chunk, max_kv_size=None, kv_bits=None, kv_group_size=64,
                  quantized_kv_start=5000, cache=None):
    """Logits [T, vocab] from `chunk` tokens per model call through the cache."""
    if cache is None:
        cache = make_prompt_cache(model, max_kv_size)
    rows = []
    for i in range(0, len(tokens), chunk):
        out = model(mx.array(tokens[i:i + chunk])[None], cache=cache)[0]
        maybe_quantize_kv_cache(cache, quantized_kv_start, kv_group_size, kv_bits)
        mx.eval(out)
        rows.append(out)
    return mx.concatenate(rows, axis=0)


SPECIALS = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|end|>"]
WORDS = ["the", "a", "cache", "prompt", "model", "token", "rotates", "quantized", "window", "hello",
         "world"] + [f"w{i}" for i in range(100)]
CHAT_TEMPLATE = ("{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} <|end|> "
                 "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")


def model_with_tokenizer(fixture_dir, out_dir, chat_template=True):
    """A copy of a fixture with a word-level tokenizer (117 ids, inside every fixture's vocabulary)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    out_dir = Path(out_dir)
    shutil.copytree(fixture_dir, out_dir)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(SPECIALS + WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(out_dir / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>"}
    if chat_template:
        config["chat_template"] = CHAT_TEMPLATE
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config))
    return out_dir


# Qwen3.5's pre-tokenizer pattern: transformers builds Qwen3_5Tokenizer for model_type qwen3_5 whatever
# tokenizer.json declares (NFC, this split, byte-level), keeping only the file's vocabulary and merges.
QWEN3_5_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"""
                   r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")


def model_with_byte_tokenizer(fixture_dir, out_dir):
    """A copy of a fixture with a byte-level BPE tokenizer without merges (256 byte ids, then the
    specials) in Qwen3.5's pipeline, so that transformers' Qwen3_5Tokenizer, which replaces a
    qwen3_5 model's declared tokenizer by that pipeline over the same vocabulary, encodes alike."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    out_dir = Path(out_dir)
    shutil.copytree(fixture_dir, out_dir)
    alphabet = ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet, key=lambda c: ord(c)))}
    for s in SPECIALS:
        vocab[s] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN3_5_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(out_dir / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>"}
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config))
    return out_dir


def greedy_tokens(model, config, prompt, max_tokens, **generate_kwargs):
    """Greedy tokens from mlx-lm's generate_step with cache options (max_kv_size, kv_bits, ...),
    stopping at an eos id as mlx_lm.generate does."""
    from mlx_lm.generate import generate_step
    eos = config.get("eos_token_id")
    eos = set(eos if isinstance(eos, list) else ([eos] if eos is not None else []))
    out = []
    for n, (token, _) in enumerate(generate_step(mx.array(prompt), model, max_tokens=max_tokens,
                                                 **generate_kwargs)):
        if token in eos:
            break
        out.append(token)
        if n + 1 == max_tokens:
            break
    return out
