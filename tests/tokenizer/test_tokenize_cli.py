"""`mlxrt tokenize` / `mlxrt detokenize` against HF tokenizers, and their error messages."""
import json
import os
import subprocess
from pathlib import Path

from tokenizers import Tokenizer

BIN = os.environ["MLXRT_BIN"]
DATA = Path(os.environ["MLXRT_SHARED_DIR"]) / "data" / "tokenizers"


def run(*args):
    return subprocess.run([BIN, *args], capture_output=True)


def hf(name):
    return Tokenizer.from_file(str(DATA / name / "tokenizer.json"))


def test_tokenize_prints_hf_ids_with_and_without_specials():
    text = "Hello world! <start_of_turn>user\n你好 👋🏽"
    for add in (True, False):
        flags = [] if add else ["--no-add-special"]
        out = run("tokenize", "--model", str(DATA / "gemma3"), "--text", text, *flags)
        assert out.returncode == 0, out.stderr
        want = hf("gemma3").encode(text, add_special_tokens=add).ids
        assert out.stdout.decode() == " ".join(map(str, want)) + "\n"


def test_tokenize_json_and_file(tmp_path):
    text = "def f(x):\n    return x  # ok\n\n<|im_start|>assistant\n"
    f = tmp_path / "in.txt"
    f.write_bytes(text.encode())
    out = run("tokenize", "--model", str(DATA / "qwen3"), "--file", str(f), "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    enc = hf("qwen3").encode(text)
    assert got == {"ids": enc.ids, "pieces": enc.tokens}


def test_detokenize_round_trips():
    text = "Grüße, мир — 🌍!"
    ids = hf("llama3_1").encode(text).ids
    out = run("detokenize", "--model", str(DATA / "llama3_1"), "--ids", ",".join(map(str, ids)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode() == hf("llama3_1").decode(ids, skip_special_tokens=False) + "\n"
    out = run("detokenize", "--model", str(DATA / "llama3_1"), "--ids", ",".join(map(str, ids)), "--skip-special")
    assert out.stdout.decode() == text + "\n"


def test_errors_name_the_problem(tmp_path):
    out = run("tokenize", "--model", str(tmp_path / "missing"), "--text", "x")
    assert out.returncode != 0 and b"missing" in out.stderr
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "tokenizer.json").write_text('{"model": {"type": "Unigram", "vocab": []}}')
    out = run("tokenize", "--model", str(bad), "--text", "x")
    assert out.returncode != 0 and b"tokenizer.json" in out.stderr and b"Unigram" in out.stderr
    (bad / "tokenizer.json").write_text('{"model": ')
    out = run("tokenize", "--model", str(bad), "--text", "x")
    assert out.returncode != 0 and b"tokenizer.json" in out.stderr
    out = run("detokenize", "--model", str(DATA / "qwen3"), "--ids", "1,x")
    assert out.returncode != 0 and b"--ids" in out.stderr
    out = run("detokenize", "--model", str(DATA / "qwen3"), "--ids", "99999999")
    assert out.returncode != 0 and b"--ids" in out.stderr
    out = run("tokenize", "--model", str(DATA / "qwen3"))
    assert out.returncode != 0 and b"--text" in out.stderr
