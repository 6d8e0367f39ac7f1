#!/usr/bin/env python3
"""Makes the tiny model the server tests and benchmark use: a random-initialised qwen3 (made and
saved by the pinned mlx-lm) whose vocabulary covers the real Qwen3 tokenizer, copied beside it with
its chat template, so requests go through real tokenization and templating.

One continuation is scripted into the weights: after the token "\\n\\n" (what the Qwen3 template
ends with when enable_thinking is false) the model writes a fixed <tool_call>...</tool_call> and
then <|im_end|>, so tool-call parsing can be tested end to end. Everything else is random.

How the script is wired: dimensions 0..K-1 of the residual stream are reserved. Only the embeddings
of the scripted tokens write there (token i of the script: a large value in dimension i), and the
attention and MLP output projections have those rows zeroed, so the final hidden state of a
scripted token is dominated by its dimension. The lm_head row of the token that follows it reads
only that dimension. Every other token's embedding and lm_head row leave the reserved dimensions
at zero, so elsewhere the scripted tokens score exactly 0 and the random tokens win.

Usage: make_server_fixture.py --out DIR [--tokenizer-dir DIR] [--hidden 64 --layers 2]
Writes DIR/server_qwen3 (kept when its recipe is unchanged). Nothing here is committed.
"""
import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm import utils as lm_utils

TOOL_CALL_CANDIDATES = [
    # No "\n" inside: every chat prompt ends with one, which would start the script.
    '<tool_call>{"name":"get_weather","arguments":{"city": "Paris"}}</tool_call>',
]
TRIGGER = "\n\n"
EOS = "<|im_end|>"


def pick_script(tok):
    trigger = tok.encode(TRIGGER, add_special_tokens=False)
    eos = tok.convert_tokens_to_ids(EOS)
    assert len(trigger) == 1, trigger
    for text in TOOL_CALL_CANDIDATES:
        ids = tok.encode(text, add_special_tokens=False)
        chain = trigger + ids + [eos]
        if len(set(chain)) == len(chain) and tok.encode("\n", add_special_tokens=False)[0] not in chain:
            return text, chain
    sys.exit("no tool-call text with distinct tokens: extend TOOL_CALL_CANDIDATES")


def build(out: Path, tokenizer_dir: Path, hidden: int, layers: int, seed: int):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    text, chain = pick_script(tok)
    vocab = max(151936, len(tok))
    config = {
        "model_type": "qwen3", "hidden_size": hidden, "num_hidden_layers": layers,
        "intermediate_size": 2 * hidden, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": hidden // 4, "rms_norm_eps": 1e-6, "vocab_size": vocab,
        "max_position_embeddings": 40960, "rope_theta": 1000000.0, "tie_word_embeddings": False,
        "eos_token_id": tok.convert_tokens_to_ids(EOS), "bos_token_id": None,
    }
    k = len(chain)
    assert k < hidden // 2, "the script needs fewer reserved dimensions than half the hidden size"
    mx.random.seed(seed)
    model_class, args_class = lm_utils._get_classes(config=config)
    model = model_class(args_class.from_dict(config))
    params = dict(tree_flatten(model.parameters()))

    embed = params["model.embed_tokens.weight"]
    head = params["lm_head.weight"]
    embed[:, :k] = 0.0
    head[:, :k] = 0.0
    ids = mx.array(chain)
    embed[ids] = 0.0
    head[ids] = 0.0
    for i in range(k - 1):
        embed[chain[i], i] = 20.0
        head[chain[i + 1], i] = 10.0
    updates = [("model.embed_tokens.weight", embed), ("lm_head.weight", head)]
    for name, w in params.items():
        if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
            w[:k, :] = 0.0
            updates.append((name, w))
        elif name.endswith("norm.weight"):
            # Norm weights start at ones; randomise them (positive) so a wrong binding shows.
            updates.append((name, 1.0 + 0.1 * mx.random.normal(w.shape)))
    model.load_weights(updates, strict=False)
    model.set_dtype(mx.bfloat16)
    mx.eval(model.parameters())

    # Several test processes may build it at once: each in its own directory, first rename wins.
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    lm_utils.save_model(tmp, model)
    lm_utils.save_config(config, config_path=tmp / "config.json")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / f, tmp / f)
    (tmp / "script.json").write_text(json.dumps({"trigger": TRIGGER, "tool_call": text, "chain": chain}))
    return tmp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer-dir", default=None)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--name", default="server_qwen3")
    ap.add_argument("--seed", type=int, default=40)
    args = ap.parse_args()
    shared = Path(__file__).resolve().parents[1].parent / "shared"
    tokenizer_dir = Path(args.tokenizer_dir) if args.tokenizer_dir else shared / "data" / "tokenizers" / "qwen3"
    out = Path(args.out) / args.name
    recipe = json.dumps({"hidden": args.hidden, "layers": args.layers, "seed": args.seed,
                         "tokenizer": str(tokenizer_dir), "version": 2}, sort_keys=True)
    stamp = out / "fixture.json"
    if stamp.exists() and stamp.read_text() == recipe:
        print(out)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = build(out, tokenizer_dir, args.hidden, args.layers, args.seed)
    (tmp / "fixture.json").write_text(recipe)
    if stamp.exists() and stamp.read_text() == recipe:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        shutil.rmtree(out, ignore_errors=True)
        try:
            tmp.rename(out)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not (stamp.exists() and stamp.read_text() == recipe):
                raise
    print(out)


if __name__ == "__main__":
    main()
