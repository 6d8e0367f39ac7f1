"""`mlxrt detokenize --token-bytes`: the raw bytes of each token that constrained decoding matches
(grammar_constraint.cpp builds the engine's vocabulary from them), against HF tokenizers, for a
byte-level BPE (qwen3), a SentencePiece-style BPE with byte fallback (gemma3) and one whose decoder
strips the leading space (phi-3-mini)."""
import json
import os
import subprocess
from pathlib import Path

import pytest
from tokenizers import Tokenizer

BIN = os.environ["MLXRT_BIN"]
DATA = Path(os.environ["MLXRT_SHARED_DIR"]) / "data" / "tokenizers"
TEXT = "Hello world!\n  def f(x):\treturn {\"a\": [1, 2.5e-3]}  你好, 世界 👋🏽 naïve café — ok\n\n"


def token_bytes(name, ids):
    out = subprocess.run([BIN, "detokenize", "--model", str(DATA / name), "--ids", ",".join(map(str, ids)),
                          "--token-bytes"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [bytes.fromhex(h) for h in json.loads(out.stdout)]


@pytest.mark.parametrize("name", ["qwen3", "gemma3", "phi-3-mini"])
def test_token_bytes_concatenate_to_the_text(name):
    hf = Tokenizer.from_file(str(DATA / name / "tokenizer.json"))
    ids = hf.encode(TEXT, add_special_tokens=False).ids
    got = b"".join(token_bytes(name, ids))
    # phi-3-mini's normalizer puts "▁" in front of the text: its bytes start with that space (which
    # its decoder strips).
    want = (" " + TEXT if name == "phi-3-mini" else TEXT).encode()
    assert got == want


@pytest.mark.parametrize("name", ["qwen3", "gemma3"])
def test_token_bytes_match_hf_decode_of_each_token(name):
    hf = Tokenizer.from_file(str(DATA / name / "tokenizer.json"))
    size = hf.get_vocab_size(with_added_tokens=True)
    ids = list(range(0, size, 37)) + [size - 1]
    special = {t.content for t in hf.get_added_tokens_decoder().values() if t.special}
    checked = 0
    for i, b in zip(ids, token_bytes(name, ids)):
        if hf.id_to_token(i) in special:
            assert b == b"", i
            continue
        try:
            text = b.decode("utf-8")
        except UnicodeDecodeError:  # part of a character: HF shows the replacement character
            assert "\ufffd" in hf.decode([i], skip_special_tokens=False), i
            continue
        assert text == hf.decode([i], skip_special_tokens=False), i
        checked += 1
    assert checked > len(ids) // 2
