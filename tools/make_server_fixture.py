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

The tool-call tests make one model per tool-call format: --name NAME --script TEXT writes TEXT (not
necessarily one tool call) instead, --template-comment TEXT puts a Jinja comment holding TEXT in
front of the chat template (what selects the format, as in the real models' templates), and
--tokenizer-config JSON adds keys to tokenizer_config.json (e.g. tool_parser_type). A script whose
plain tokenization repeats a token is written with some pieces merged into longer tokens, added to
the fixture's BPE vocabulary (unreachable by merges, so prompts tokenize as before), until every
token of the script is distinct.
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


def unique_pieces(tok, text, trigger=TRIGGER, eos=(EOS,)):
    """Splits `text` into token strings that are all different and none of them the trigger, "\\n"
    or an end token: its tokenization, with each repeated (or reserved) piece merged into the piece
    after it (before it, at the end) until none repeats. Returns the pieces, in the byte-level
    alphabet of the vocabulary."""
    reserved = {trigger, "\n", *eos}
    pieces = [tok.convert_tokens_to_string([t]) for t in tok.convert_ids_to_tokens(
        tok.encode(text, add_special_tokens=False))]
    while True:
        seen, bad = set(), None
        for i, p in enumerate(pieces):
            if p in seen or p in reserved:
                bad = i
                break
            seen.add(p)
        if bad is None:
            break
        if len(pieces) == 1:
            sys.exit(f"the script {text!r} cannot be written with distinct tokens")
        j = bad if bad + 1 < len(pieces) else bad - 1
        pieces[j:j + 2] = [pieces[j] + pieces[j + 1]]
    assert "".join(pieces) == text
    return pieces


def scripted_tokenizer(tokenizer_dir: Path, out: Path, text: str, trigger=TRIGGER, eos=(EOS,)):
    """Writes tokenizer.json with the pieces of `text` that are not tokens yet in the BPE vocabulary,
    each in place of a rare token that no merge builds on (its own merge removed, so no merge makes
    the new piece and prompts without that rare token tokenize as before; decoding reads it);
    returns the token ids of `text`."""
    from mlx_lm.tokenizer_utils import _byte_decoder
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    to_char = {b: c for c, b in _byte_decoder().items()}
    data = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    merges = [m.split(" ", 1) if isinstance(m, str) else list(m) for m in data["model"]["merges"]]
    parts = {p for m in merges for p in m}
    by_id = {i: t for t, i in vocab.items()}
    victims = (i for i in sorted(by_id, reverse=True) if by_id[i] not in parts)
    added = {t["content"]: t["id"] for t in data["added_tokens"]}
    ids, replaced = [], set()
    for piece in unique_pieces(tok, text, trigger, eos):
        if piece in added:
            ids.append(added[piece])
            continue
        key = "".join(to_char[b] for b in piece.encode("utf-8"))
        if key not in vocab:
            victim = next(victims)
            replaced.add(by_id[victim])
            del vocab[by_id[victim]]
            vocab[key] = victim
        ids.append(vocab[key])
    data["model"]["merges"] = [m for m in merges if "".join(m) not in replaced]
    (out / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False))
    check = AutoTokenizer.from_pretrained(out)
    assert check.decode(ids) == text, (check.decode(ids), text)
    return ids


def with_special_tokens(tokenizer_dir: Path, out: Path, tokens, drop=()):
    """A copy of the tokenizer in `out` with `tokens` added as special tokens (new ids after the
    last one), as a model whose chat format uses its own control tokens has them, and the added
    tokens `drop` renamed <|reserved_ID|> (so mlx-lm infers no format from them)."""
    out.mkdir(parents=True)
    data = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    next_id = 1 + max(max(data["model"]["vocab"].values()), *(t["id"] for t in data["added_tokens"]))
    for t in data["added_tokens"]:  # dropped ones become reserved tokens (ids stay contiguous)
        if t["content"] in drop:
            t["content"] = f"<|reserved_{t['id']}|>"
            config["added_tokens_decoder"][str(t["id"])]["content"] = t["content"]
    for i, content in enumerate(tokens):
        entry = {"id": next_id + i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                 "normalized": False, "special": True}
        data["added_tokens"].append(entry)
        config.setdefault("added_tokens_decoder", {})[str(entry["id"])] = {
            k: v for k, v in entry.items() if k != "id"}
    (out / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
    return out


def build(out: Path, tokenizer_dir: Path, hidden: int, layers: int, seed: int, script=None,
          template_comment=None, tokenizer_config=None, model_type="qwen3", trigger=TRIGGER, eos=(EOS,),
          special_tokens=(), drop_tokens=(), chat_template=None):
    """`eos`: the end tokens of the model (its config's eos_token_id); the script ends with the
    first. `model_type` qwen3 (bf16) or gpt_oss (float32: MLX's CPU gather_mm runs float32 only).
    `special_tokens` / `drop_tokens`: added tokens to add to / remove from the tokenizer."""
    from transformers import AutoTokenizer

    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if special_tokens or drop_tokens:
        tokenizer_dir = with_special_tokens(tokenizer_dir, tmp / "base-tokenizer", special_tokens, drop_tokens)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    eos_ids = [tok.convert_tokens_to_ids(e) for e in eos]
    if script is None:
        text, chain = pick_script(tok)
    else:
        text = script
        trigger_ids = tok.encode(trigger, add_special_tokens=False)
        assert len(trigger_ids) == 1, trigger_ids
        chain = trigger_ids + scripted_tokenizer(tokenizer_dir, tmp, script, trigger, eos) + eos_ids[:1]
    vocab = max(151936, len(tok), max(chain) + 1)
    k = len(chain)
    assert len(set(chain)) == k
    if script is not None:  # room for the script's reserved dimensions
        hidden = max(hidden, 32 * ((2 * k + 2 + 31) // 32))
    config = {
        "model_type": "qwen3", "hidden_size": hidden, "num_hidden_layers": layers,
        "intermediate_size": 2 * hidden, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": hidden // 4, "rms_norm_eps": 1e-6, "vocab_size": vocab,
        "max_position_embeddings": 40960, "rope_theta": 1000000.0, "tie_word_embeddings": False,
        "eos_token_id": eos_ids[0] if len(eos_ids) == 1 else eos_ids, "bos_token_id": None,
    }
    if model_type == "gpt_oss":
        config.update(model_type="gpt_oss", num_local_experts=4, num_experts_per_tok=2, sliding_window=128,
                      rope_theta=150000.0, rms_norm_eps=1e-5)
    else:
        assert model_type == "qwen3", model_type
    assert k < hidden // 2, "the script needs fewer reserved dimensions than half the hidden size: raise --hidden"
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
            w[..., :k, :] = 0.0  # (stacked experts: each expert's rows)
            updates.append((name, w))
        elif name.endswith("o_proj.bias") or name.endswith("down_proj.bias"):
            w[..., :k] = 0.0
            updates.append((name, w))
        elif name.endswith("norm.weight"):
            # Norm weights start at ones; randomise them (positive) so a wrong binding shows.
            updates.append((name, 1.0 + 0.1 * mx.random.normal(w.shape)))
    model.load_weights(updates, strict=False)
    model.set_dtype(mx.float32 if model_type == "gpt_oss" else mx.bfloat16)
    mx.eval(model.parameters())

    # Several test processes may build it at once: each in its own directory, first rename wins.
    lm_utils.save_model(tmp, model)
    lm_utils.save_config(config, config_path=tmp / "config.json")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if not (tmp / f).exists():
            shutil.copy(tokenizer_dir / f, tmp / f)
    shutil.rmtree(tmp / "base-tokenizer", ignore_errors=True)
    if template_comment is not None or tokenizer_config or chat_template is not None:
        tc = json.loads((tmp / "tokenizer_config.json").read_text())
        if chat_template is not None:
            tc["chat_template"] = chat_template
        if template_comment is not None:
            tc["chat_template"] = "{#- " + template_comment + " -#}\n" + tc["chat_template"]
        tc.update(tokenizer_config or {})
        (tmp / "tokenizer_config.json").write_text(json.dumps(tc, indent=2, ensure_ascii=False))
    (tmp / "script.json").write_text(json.dumps({"trigger": trigger, "tool_call": text, "chain": chain}))
    return tmp


def ensure(out_root, name="server_qwen3", tokenizer_dir=None, hidden=64, layers=2, seed=40, script=None,
           template_comment=None, tokenizer_config=None, **variant):
    """`variant`: build's model_type, trigger, eos, special_tokens, drop_tokens and chat_template."""
    """The fixture directory out_root/name, built unless it is there with the same recipe."""
    shared = Path(__file__).resolve().parents[1].parent / "shared"
    tokenizer_dir = Path(tokenizer_dir) if tokenizer_dir else shared / "data" / "tokenizers" / "qwen3"
    out = Path(out_root) / name
    recipe = {"hidden": hidden, "layers": layers, "seed": seed, "tokenizer": str(tokenizer_dir), "version": 2}
    if script is not None or template_comment is not None or tokenizer_config:
        recipe.update(script=script, template_comment=template_comment, tokenizer_config=tokenizer_config)
    if variant:
        recipe.update(variant={k: list(v) if isinstance(v, tuple) else v for k, v in variant.items()})
    recipe = json.dumps(recipe, sort_keys=True)
    stamp = out / "fixture.json"
    if stamp.exists() and stamp.read_text() == recipe:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = build(out, tokenizer_dir, hidden, layers, seed, script, template_comment, tokenizer_config, **variant)
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
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer-dir", default=None)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--name", default="server_qwen3")
    ap.add_argument("--seed", type=int, default=40)
    ap.add_argument("--script", default=None)
    ap.add_argument("--template-comment", default=None)
    ap.add_argument("--tokenizer-config", default=None, help="JSON object of keys for tokenizer_config.json")
    args = ap.parse_args()
    extra = json.loads(args.tokenizer_config) if args.tokenizer_config else None
    print(ensure(args.out, args.name, args.tokenizer_dir, args.hidden, args.layers, args.seed, args.script,
                 args.template_comment, extra))


if __name__ == "__main__":
    main()
