// Loading, configuration, errors, concurrency and the llama.cpp tokenizer vectors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "mlxrt/tokenizer/tokenizer.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::tokenizer {
namespace {

namespace fs = std::filesystem;

const fs::path kData = fs::path(MLXRT_SHARED_DIR) / "data";

// A scratch directory removed when the test ends.
struct TempDir {
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("mlxrt_tok_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  operator const fs::path&() const { return path; }
  fs::path operator/(const std::string& f) const { return path / f; }
  fs::path path;
};

void write(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

const char* kTinyBpe = R"({
  "added_tokens": [{"id": 5, "content": "<s>", "special": true, "normalized": false}],
  "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [5], "tokens": ["<s>"]}}},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4}, "merges": ["a b", "Ġ ab"]}})";

TEST(TokenizerLoad, TinyBpeEncodesDecodesAndAddsSpecials) {
  Tokenizer t = Tokenizer::from_json_text(kTinyBpe);
  EXPECT_EQ(t.encode("ab ab"), (std::vector<int32_t>{5, 2, 4}));
  EXPECT_EQ(t.encode("ab ab", false), (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(t.encode("<s>ab", false), (std::vector<int32_t>{5, 2}));
  std::vector<int32_t> ids{5, 2, 4};
  EXPECT_EQ(t.decode(ids), "<s>ab ab");
  EXPECT_EQ(t.decode(ids, true), "ab ab");
  EXPECT_TRUE(t.is_special(5));
  EXPECT_FALSE(t.is_special(2));
  EXPECT_EQ(t.token_to_id("Ġab"), 4);
  EXPECT_EQ(t.id_to_token(4), "Ġab");
  EXPECT_EQ(t.vocab_size(), 6u);
  EXPECT_EQ(t.streaming_kind(), StreamingKind::bpe);
}

TEST(TokenizerLoad, CopiesShareStateAndMovesWork) {
  Tokenizer a = Tokenizer::from_json_text(kTinyBpe);
  Tokenizer b = a;
  Tokenizer c = std::move(a);
  EXPECT_EQ(b.encode("ab"), c.encode("ab"));
}

TEST(TokenizerErrors, MissingDirectoryNamesIt) {
  EXPECT_NE(error_of([] { Tokenizer::from_dir("/nonexistent/model"); }).find("/nonexistent/model"), std::string::npos);
}

TEST(TokenizerErrors, DirectoryWithoutTokenizerFilesListsWhatIsExpected) {
  TempDir d("empty");
  std::string msg = error_of([&] { Tokenizer::from_dir(d); });
  EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tokenizer.model"), std::string::npos) << msg;
}

TEST(TokenizerErrors, MalformedJsonNamesTheFile) {
  TempDir d("malformed");
  write(d / "tokenizer.json", "{\"model\": ");
  std::string msg = error_of([&] { Tokenizer::from_dir(d); });
  EXPECT_NE(msg.find((d.path / "tokenizer.json").string()), std::string::npos) << msg;
}

TEST(TokenizerErrors, UnknownTypesNameTheField) {
  std::string doc = kTinyBpe;
  std::string unigram = doc;
  unigram.replace(unigram.find("\"type\": \"BPE\""), 13, "\"type\": \"Unigram\"");
  std::string msg = error_of([&] { Tokenizer::from_json_text(unigram); });
  EXPECT_NE(msg.find("model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Unigram"), std::string::npos) << msg;
  std::string pre = doc;
  pre.replace(pre.find("\"type\": \"ByteLevel\", \"add_prefix_space\""), 19, "\"type\": \"Mystery\"");
  msg = error_of([&] { Tokenizer::from_json_text(pre); });
  EXPECT_NE(msg.find("pre_tokenizer"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Mystery"), std::string::npos) << msg;
}

TEST(TokenizerErrors, MergeOfUnknownTokensIsRejected) {
  std::string doc = kTinyBpe;
  doc.replace(doc.find("\"a b\""), 5, "\"a z\"");
  std::string msg = error_of([&] { Tokenizer::from_json_text(doc); });
  EXPECT_NE(msg.find("merges[0]"), std::string::npos) << msg;
}

TEST(TokenizerErrors, Llama2TokenizerJsonHasAMergeHfAlsoRejects) {
  // HF tokenizers refuses this file too ("Merges text file invalid"): one merge has three parts.
  std::string msg = error_of([] { Tokenizer::from_dir(kData / "tokenizers" / "llama2"); });
  EXPECT_NE(msg.find("merges["), std::string::npos) << msg;
}

TEST(TokenizerConfig, QwenSpecialsTemplateAndEos) {
  Tokenizer t = Tokenizer::from_dir(kData / "tokenizers" / "qwen3");
  EXPECT_EQ(t.config().eos_token, "<|im_end|>");
  EXPECT_TRUE(t.config().chat_template.is_string());
  EXPECT_EQ(t.eos_token_ids(), std::vector<int32_t>{151645});
  EXPECT_FALSE(t.bos_token_id().has_value());
  EXPECT_EQ(t.streaming_kind(), StreamingKind::bpe);
  EXPECT_EQ(t.vocab_size(), 151669u);
}

TEST(TokenizerConfig, GenerationConfigEosListIsMerged) {
  TempDir d("gencfg");
  fs::copy_file(kData / "tokenizers" / "phi-3-mini" / "tokenizer.json", d / "tokenizer.json");
  fs::copy_file(kData / "tokenizers" / "phi-3-mini" / "tokenizer_config.json", d / "tokenizer_config.json");
  write(d / "config.json", R"({"eos_token_id": 7})");
  write(d / "generation_config.json", R"({"eos_token_id": [32000, 32007]})");
  Tokenizer t = Tokenizer::from_dir(d);
  EXPECT_EQ(t.bos_token_id(), 1);
  auto eos = t.eos_token_ids();
  EXPECT_EQ(eos.front(), 32000);
  EXPECT_NE(std::find(eos.begin(), eos.end(), 32007), eos.end());
  EXPECT_EQ(std::find(eos.begin(), eos.end(), 7), eos.end());
  EXPECT_EQ(t.streaming_kind(), StreamingKind::spm);
}

TEST(TokenizerThreads, ConcurrentEncodeEqualsSerial) {
  Tokenizer t = Tokenizer::from_dir(kData / "tokenizers" / "qwen3");
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back("text " + std::to_string(i * 7919) + " héllo wörld 你好 " + std::string(i % 13, ' '));
  std::vector<std::vector<int32_t>> serial;
  for (const auto& s : texts) serial.push_back(t.encode(s));
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (size_t i = 0; i < texts.size(); ++i) bad[k] += t.encode(texts[(i + k * 50) % texts.size()]) != serial[(i + k * 50) % texts.size()];
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char b = s[i];
    size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

TEST(StreamingDetokenizer, SegmentsAreCompleteUtf8AndSumToTheText) {
  const std::string text = "Emoji 👨‍👩‍👧 and 中文 and e\u0301 — done.\nNext line ✅";
  for (const char* name : {"qwen3", "phi-3-mini", "gemma3"}) {
    Tokenizer t = Tokenizer::from_dir(kData / "tokenizers" / name);
    auto ids = t.encode(text, false);
    StreamingDetokenizer d = t.streaming_detokenizer();
    std::string all;
    for (int32_t id : ids) {
      d.add_token(id);
      std::string seg = d.take_segment();
      EXPECT_TRUE(valid_utf8(seg)) << name;
      all += seg;
    }
    d.finalize();
    all += d.take_segment();
    EXPECT_EQ(all, d.text()) << name;
    EXPECT_EQ(all, t.decode(ids)) << name;
    EXPECT_EQ(d.tokens(), ids);
    d.reset();
    EXPECT_EQ(d.text(), "");
  }
}

// llama.cpp's vectors: the ids HF gave (add_special_tokens=False) for each input.
void check_vectors(const std::string& vocab, const fs::path& model_dir) {
  fs::path base = kData / "tokenizer-vectors" / ("ggml-vocab-" + vocab + ".gguf");
  std::string inp = read(base.string() + ".inp"), out = read(base.string() + ".out");
  std::vector<std::string> inputs, outputs;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0;;) {
    size_t next = inp.find(sep, pos);
    inputs.push_back(inp.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + sep.size();
  }
  std::stringstream lines(out);
  for (std::string line; std::getline(lines, line);) outputs.push_back(line);
  while (outputs.size() < inputs.size()) outputs.emplace_back();
  ASSERT_EQ(inputs.size(), outputs.size()) << vocab;
  Tokenizer t = Tokenizer::from_dir(model_dir);
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int32_t> want;
    std::stringstream ids(outputs[i]);
    for (int32_t id; ids >> id;) want.push_back(id);
    EXPECT_EQ(t.encode(inputs[i], false), want) << vocab << " input #" << i << ": '" << inputs[i] << "'";
  }
}

TEST(TokenizerVectors, Gpt2) { check_vectors("gpt-2", kData / "tokenizers" / "gpt2"); }
TEST(TokenizerVectors, Llama3) { check_vectors("llama-bpe", kData / "tokenizers" / "llama3_1"); }
TEST(TokenizerVectors, Qwen2FromTokenizerJson) { check_vectors("qwen2", kData / "tokenizers" / "qwen3"); }
TEST(TokenizerVectors, Qwen2FromVocabAndMerges) { check_vectors("qwen2", kData / "tokenizers" / "qwen2.5"); }
TEST(TokenizerVectors, Phi3) { check_vectors("phi-3", kData / "tokenizers" / "phi-3-mini"); }
TEST(TokenizerVectors, LlamaSentencePiece) {
  TempDir d("llama_spm");
  fs::copy_file(kData / "tokenizers" / "llama2" / "tokenizer.model", d / "tokenizer.model");
  check_vectors("llama-spm", d);
}

}  // namespace
}  // namespace mlxrt::tokenizer
