"""The tokenizer files written from GGUF metadata encode text exactly as the references do:
transformers' tokenizer built from the same GGUF (on a multilingual corpus), and Hugging Face's
own tokenizers for the llama.cpp test vocabularies (llama.cpp's tokenizer test vectors)."""

import json
import os
import shutil

import pytest
from gguf import GGUFReader
from tokenizers import Tokenizer

from gguf_support import VECTORS, convert, smollm2_gguf, transformers_gguf_tokenizer

MULTILINGUAL = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How are you doing today?",
    "Le cœur a ses raisons que la raison ne connaît point.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein.",
    "¿Dónde está la biblioteca? ¡Qué día tan bonito!",
    "Não há nada como um bom café da manhã.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Γειά σου Κόσμε! Η γλώσσα είναι όμορφη.",
    "مرحبا بالعالم، كيف حالك اليوم؟",
    "שלום עולם, מה שלומך?",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "你好，世界！今天天气很好，我们去公园散步吧。",
    "こんにちは世界。東京は日本の首都です。",
    "안녕하세요 세계! 한국어는 아름답습니다.",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Xin chào thế giới, tiếng Việt có nhiều dấu.",
    "Merhaba dünya! İstanbul'da güzel bir gün.",
    "Emoji: 🦙🚀✨👍🏽 and flags 🇫🇷🇯🇵",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < 10; ++i) { sum += a[i]; }",
    "It's 3:45 pm on 2024-05-17; the price was $19.99 (or €18,50).",
    "Tabs\tand\nnewlines\n\n  indented lines\r\n end",
    "I've said they'll go, we're done, you'd know, it's OK, I'm here.",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "Mixed: naïve café résumé coöperate façade Zürich Kraków Ångström",
    "Math: ∀x∈ℝ, x² ≥ 0; ∑ᵢ aᵢ = π/4 ≈ 0.785",
    "URL https://example.org/a?b=c&d=e#f and mail someone@example.com",
    "   leading spaces and trailing spaces   ",
]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = convert(smollm2_gguf(), tmp_path_factory.mktemp("smollm2") / "model")
    yield out
    shutil.rmtree(out)  # 115 MB


@pytest.fixture(scope="module")
def reference():
    return transformers_gguf_tokenizer(smollm2_gguf())


def test_multilingual_corpus_encodes_like_transformers_from_the_gguf(converted, reference):
    from transformers import AutoTokenizer

    ours = Tokenizer.from_file(str(converted / "tokenizer.json"))
    auto = AutoTokenizer.from_pretrained(str(converted))  # what mlx-lm loads
    total = 0
    for text in MULTILINGUAL:
        want = reference.encode(text, add_special_tokens=False)
        assert ours.encode(text, add_special_tokens=False).ids == want, text
        assert auto.encode(text, add_special_tokens=False) == want, text
        assert ours.decode(want, skip_special_tokens=False) == text
        total += len(want)
    print(f"{len(MULTILINGUAL)} texts, {total} tokens, identical")


def test_digits_follow_the_files_pre_tokenizer(converted, reference):
    """tokenizer.ggml.pre = 'smollm': llama.cpp (and SmolLM2's own tokenizer.json) split every
    digit off before the GPT-2 regex. transformers' GGUF builder has no entry for 'smollm' and
    uses the plain GPT-2 regex, so it differs where a digit follows a run of spaces."""
    assert GGUFReader(str(smollm2_gguf())).fields["tokenizer.ggml.pre"].contents() == "smollm"
    ours = Tokenizer.from_file(str(converted / "tokenizer.json"))
    assert ours.encode("a  1", add_special_tokens=False).tokens == ["a", "ĠĠ", "1"]
    assert ours.encode("x 2024", add_special_tokens=False).tokens == ["x", "Ġ", "2", "0", "2", "4"]
    assert ours.encode("4 ½", add_special_tokens=False).tokens == ["4", "Ġ", "Â½"]  # ½ in the byte alphabet
    print("transformers' GGUF builder:", reference.tokenize("a  1"), reference.tokenize("4 ½"))


def test_special_tokens_and_chat_template(converted, reference):
    from transformers import AutoTokenizer

    config = json.loads((converted / "tokenizer_config.json").read_text())
    fields = GGUFReader(str(smollm2_gguf())).fields
    assert config["chat_template"] == fields["tokenizer.chat_template"].contents()
    assert (config["bos_token"], config["eos_token"], config["unk_token"], config["pad_token"]) == (
        "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_end|>")
    assert config["add_bos_token"] is False
    ours = AutoTokenizer.from_pretrained(str(converted))
    assert ours.all_special_tokens and set(reference.all_special_tokens) <= set(ours.all_special_tokens)
    messages = [{"role": "user", "content": "Bonjour ! Quelle heure est-il ?"}]
    rendered = ours.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == reference.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = ours.encode(rendered, add_special_tokens=False)
    assert ids == reference.encode(rendered, add_special_tokens=False)
    assert ids[0] == 1 and ids.count(2) == 2  # <|im_start|> ... <|im_end|> matched whole


# llama.cpp's tokenizer vectors: ids from the models' own Hugging Face tokenizers.
@pytest.mark.parametrize("name", ["gpt-2", "mpt", "refact", "starcoder", "llama-spm", "phi-3"])
def test_llama_cpp_vocabularies_match_their_hf_tokenizers(name, tmp_path):
    gguf = VECTORS / f"ggml-vocab-{name}.gguf"
    out = convert(gguf, tmp_path / "tok", "--tokenizer-only")
    assert sorted(os.listdir(out)) == ["generation_config.json", "tokenizer.json", "tokenizer_config.json"]
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    texts = (VECTORS / f"ggml-vocab-{name}.gguf.inp").read_text().split("\n__ggml_vocab_test__\n")
    expected = (VECTORS / f"ggml-vocab-{name}.gguf.out").read_text().split("\n")
    assert len(texts) == 47
    for text, ids in zip(texts, expected):
        assert tok.encode(text, add_special_tokens=False).ids == [int(x) for x in ids.split()], repr(text)
