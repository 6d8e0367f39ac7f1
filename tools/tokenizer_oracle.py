"""The tokenizer oracle: what Hugging Face `tokenizers` (and SentencePiece for bare tokenizer.model
files) give for a fixed multi-script corpus plus seeded random Unicode strings, for every tokenizer
in shared/data/tokenizers and for tokenizers trained here with HF tokenizers.

Writes OUT/cases.json: {"tokenizers": [{"name", "dir", "texts": [hex], "encode": [[ids]],
"encode_plain": [[ids]], "decode": [hex], "decode_skip": [hex], "id_seqs": [[ids]],
"id_seq_decode": [hex], "stream": [hex]}]}. Texts and strings are hex-encoded UTF-8 bytes, so
ill-formed input survives JSON."""
import argparse
import json
import os
import random
import shutil
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

FIXED = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n\n", " \n ", "\r\n", "\t\t  \n", "a", "Hello world",
    "Hello, world! How are you?", " leading space", "trailing space ", "  two leading",
    "I'm don't they'll we've you're she'd it's", "HELLO World 'S 'T", "1234567890 3.14159 1,000,000",
    "The quick brown fox jumps over the lazy dog.", "def f(x):\n    return x ** 2  # square\n",
    "https://example.com/path?q=1&b=2#frag", "user@example.com", "C++ && Rust || Go",
    "中文分词测试，你好世界。", "日本語のテキストです。カタカナ、ひらがな。", "한국어 텍스트입니다",
    "Русский текст, ёжик.", "Ελληνικά κείμενα", "العربية نص تجريبي", "עברית טקסט",
    "हिन्दी पाठ परीक्षण", "ภาษาไทยทดสอบ", "Tiếng Việt: Cửa Việt", "Ünïcödé çàfé naïve",
    "e\u0301 a\u0300\u0323 \u1e9b\u0323 Å Å", "ﬁ ﬂ ① ² ½ Ⅻ ｶ ＡＢＣ", "İstanbul ß ẞ Σίσυφος ΣΑΣ",
    "👍 👨‍👩‍👧‍👦 🏳️‍🌈 👋🏽 🇯🇵 ❤️", "emoji🙂inside🙃words", "\u200b\u200c\u200d\ufeff zero widths",
    "\u00a0nbsp\u3000ideo\u2028ls\u2029ps\u0085nel\u1680ogham", "\x00\x01\x02\x1b[31mred\x1b[0m\x7f",
    "tab\there\x0bvt\x0cff", "a\u0000b", "\ufffd replacement", "!!!???...,,,;;;", "¿¡«»„“”‘’",
    "$100 €200 £300 ¥400", "<html><body>Hi</body></html>", "{\"key\": [1, 2, 3]}",
    "    indented\n        more\n", "word" * 30, "x" * 300, " " * 40 + "end",
    "Cửa Việt", "   \n\n   \t\t\t", "ab  cd   ef    gh", "\u3000\u3000全角", "Ꙃ ꙃ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛",
]

INVALID = [b"\xff", b"abc\xc3", b"\xed\xa0\x80x", b"\xf0\x9f\x98", b"\xc0\xaf", b"ok\x80\x80ok",
           b"\xe2\x82", b"\xf4\x90\x80\x80", b"a\xfe\xfeb", b"\xf0\x9f\x98\x80\xf0\x9f"]

RANGES = [(0x20, 0x7E)] * 6 + [(0x09, 0x0D), (0xA0, 0x24F), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0xDFF),
          (0x1100, 0x11FF), (0x2000, 0x206F), (0x2190, 0x2BFF), (0x3000, 0x30FF), (0x4E00, 0x9FFF),
          (0xAC00, 0xD7A3), (0xE000, 0xE0FF), (0xF900, 0xFFFD), (0x1F300, 0x1FAFF), (0x10000, 0x10FFFF),
          (0x0300, 0x036F), (0x00, 0x1F)]


def random_strings(n, seed):
    """Seeded random strings over many scripts. Only characters already assigned in Unicode 3.2 are
    drawn (others become spaces): properties of newer characters depend on the Unicode version of each
    table (PCRE2 and utf8proc here; Oniguruma and several Rust crates of different ages in HF)."""
    import unicodedata
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        chars = []
        for _ in range(rng.randint(0, 24)):
            lo, hi = rng.choice(RANGES)
            c = rng.randint(lo, hi)
            if 0xD800 <= c <= 0xDFFF or unicodedata.ucd_3_2_0.category(chr(c)) == "Cn":
                c = 0x20
            chars.append(chr(c))
        out.append("".join(chars))
    return out


def vector_inputs(shared):
    inp = shared / "data" / "tokenizer-vectors" / "ggml-vocab-qwen35.gguf.inp"
    return inp.read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n") if inp.exists() else []


def training_corpus():
    return FIXED + random_strings(400, 7) * 2 + ["hello world " * 5, "the cat sat on the mat " * 5]


def train_byte_level(path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(), trainer)
    tok.post_processor = processors.TemplateProcessing(single="<|im_start|> $A <|im_end|>",
                                                       special_tokens=[("<|im_start|>", 1), ("<|im_end|>", 2)])
    tok.save(str(path))


def train_spm_bpe(path, metaspace):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=specials, limit_alphabet=300)
    tok.train_from_iterator(training_corpus(), trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(str(path))


def train_wordpiece(path):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=1500, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok.train_from_iterator(training_corpus(), trainer)
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]")))
    tok.save(str(path))


def train_mixed(path):
    """Many components at once: normalizer and pre-tokenizer sequences, added-token flags."""
    from tokenizers import AddedToken
    tok = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##", end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip(),
                                           normalizers.Replace(Regex(r"\d{4,}"), "#")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Split(Regex(r"[aeiou]"), behavior="merged_with_next")])
    tok.decoder = decoders.Sequence([decoders.Replace("</w>", " "), decoders.Strip(" ", 0, 1)])
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["[UNK]", "[BOS]"],
                                  continuing_subword_prefix="##", end_of_word_suffix="</w>")
    tok.train_from_iterator(training_corpus(), trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True)])
    tok.add_tokens([AddedToken("hello", single_word=True), AddedToken("WORLD", normalized=True),
                    AddedToken("Raw!", normalized=False), AddedToken(" x ", normalized=False)])
    tok.post_processor = processors.TemplateProcessing(single="[BOS] $A", special_tokens=[("[BOS]", 1)])
    tok.save(str(path))


def train_roberta(path):
    """Byte-level BPE with a prefix space and Roberta's post-processor."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<s>", "<pad>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(), trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tok.save(str(path))


def train_wordlevel(path):
    """WordLevel over Whitespace words, with accent stripping and lowercasing."""
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(vocab_size=800, special_tokens=["[UNK]"])
    tok.train_from_iterator(training_corpus(), trainer)
    tok.save(str(path))


def texts_for(tok, specials, base):
    extra = []
    for s in specials[:25]:
        extra += [s, f"x{s}y", f" {s} ", f"{s}{s}", f"a {s}\nb", f"hello{s}world "]
    return base + extra


class HfTok:
    def __init__(self, tok):
        self.tok = tok

    def specials(self):
        return [t.content for t in self.tok.get_added_tokens_decoder().values()]

    def vocab_limit(self):
        return max(self.tok.get_vocab().values()) + 1

    def encode(self, text, add):
        return self.tok.encode(text, add_special_tokens=add).ids

    def decode(self, ids, skip):
        return self.tok.decode(ids, skip_special_tokens=skip)


class SpmTok:
    def __init__(self, model):
        import sentencepiece as spm
        self.sp = spm.SentencePieceProcessor(model_file=str(model))

    def specials(self):
        return ["<s>", "</s>"]

    def vocab_limit(self):
        return self.sp.get_piece_size()

    def encode(self, text, add):
        ids = self.sp.encode(text)
        return [self.sp.bos_id()] + ids if add else ids

    def decode(self, ids, skip):
        out, run = "", []
        for i in ids:
            if self.sp.is_control(i):
                out += self.sp.decode(run) + ("" if skip else self.sp.id_to_piece(i))
                run = []
            else:
                run.append(i)
        return out + self.sp.decode(run)


def stream_text(wrapper, ids):
    """mlx-lm's streaming detokenizer over ids, concatenating last_segment after every token."""
    d = wrapper.detokenizer
    out = ""
    for i in ids:
        d.add_token(i)
        out += d.last_segment
    d.finalize()
    return out + d.last_segment


def hexs(s):
    return (s.encode("utf-8", "surrogatepass") if isinstance(s, str) else s).hex()


def case(name, tok_dir, tok, base, rng, n_id_seqs, stream_ids=None):
    texts = texts_for(tok, tok.specials(), base)
    enc_texts = [t if isinstance(t, str) else t.decode("utf-8", "replace") for t in texts]
    encode = [tok.encode(t, True) for t in enc_texts]
    plain = [tok.encode(t, False) for t in enc_texts]
    limit = tok.vocab_limit()
    id_seqs = [[rng.randrange(limit) for _ in range(rng.randint(1, 12))] for _ in range(n_id_seqs)]
    out = {
        "name": name, "dir": str(tok_dir), "texts": [hexs(t) for t in texts], "encode": encode,
        "encode_plain": plain, "decode": [hexs(tok.decode(ids, False)) for ids in encode],
        "decode_skip": [hexs(tok.decode(ids, True)) for ids in encode], "id_seqs": id_seqs,
        "id_seq_decode": [hexs(tok.decode(s, False)) for s in id_seqs],
    }
    if stream_ids is not None:
        seqs = [p for p in plain if p][:stream_ids]
        out["stream_ids"] = seqs
        from mlx_lm.tokenizer_utils import load
        wrapper = load(Path(tok_dir))
        out["stream"] = [hexs(stream_text(wrapper, s)) for s in seqs]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shared", default=os.environ.get("MLXRT_SHARED_DIR", "../shared"))
    ap.add_argument("--random", type=int, default=10000)
    args = ap.parse_args()
    out, shared = Path(args.out), Path(args.shared)
    out.mkdir(parents=True, exist_ok=True)
    data = shared / "data" / "tokenizers"
    base = FIXED + vector_inputs(shared) + random_strings(args.random, 1234) + INVALID
    rng = random.Random(99)
    cases = []

    trained = {"trained_byte_level": train_byte_level, "trained_spm_bpe": lambda p: train_spm_bpe(p, False),
               "trained_metaspace": lambda p: train_spm_bpe(p, True), "trained_wordpiece": train_wordpiece,
               "trained_mixed": train_mixed, "trained_roberta": train_roberta, "trained_wordlevel": train_wordlevel}
    for name, train in trained.items():
        d = out / name
        d.mkdir(exist_ok=True)
        train(d / "tokenizer.json")
        cases.append(case(name, d, HfTok(Tokenizer.from_file(str(d / "tokenizer.json"))), base, rng, 300,
                          stream_ids=60))

    # llama2/tokenizer.json is not loadable by HF tokenizers (a merge with three parts): see the unit test.
    for name in ["qwen3", "llama3_1", "gemma3", "phi-3-mini"]:
        d = data / name
        tok = HfTok(Tokenizer.from_file(str(d / "tokenizer.json")))
        cases.append(case(name, d, tok, base, rng, 500, stream_ids=60))

    # vocab.json + merges.txt: the Qwen ones equal qwen3/tokenizer.json's model; GPT-2 built as
    # transformers' GPT2 tokenizer builds it.
    qwen = Tokenizer.from_file(str(data / "qwen3" / "tokenizer.json"))
    cfg = json.loads((data / "qwen2.5" / "tokenizer_config.json").read_text())
    qwen25 = json.loads(qwen.to_str())
    qwen25["added_tokens"] = [dict(v, id=int(k)) for k, v in cfg["added_tokens_decoder"].items()]
    cases.append(case("qwen2.5", data / "qwen2.5", HfTok(Tokenizer.from_str(json.dumps(qwen25))), base, rng, 200))
    gpt2 = Tokenizer(models.BPE.from_file(str(data / "gpt2" / "vocab.json"), str(data / "gpt2" / "merges.txt")))
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    gpt2.decoder = decoders.ByteLevel()
    gpt2.add_special_tokens(["<|endoftext|>"])
    cases.append(case("gpt2", data / "gpt2", HfTok(gpt2), base, rng, 200))

    for name, model in [("llama2_spm", data / "llama2" / "tokenizer.model"),
                        ("mistral_spm", data / "mistral-7b" / "tokenizer.model.v1")]:
        d = out / name
        d.mkdir(exist_ok=True)
        shutil.copy(model, d / "tokenizer.model")
        cases.append(case(name, d, SpmTok(d / "tokenizer.model"), base, rng, 200))

    (out / "cases.json").write_text(json.dumps({"tokenizers": cases}))


if __name__ == "__main__":
    main()
