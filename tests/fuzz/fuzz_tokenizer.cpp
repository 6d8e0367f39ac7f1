// The tokenizer under arbitrary bytes. The first byte picks the target:
//  0: the rest is a tokenizer.json document: loading must succeed or throw ConfigError; a tokenizer
//     that loads is then run on a short fixed text;
//  otherwise: the rest is text for two fixed tokenizers built here (byte-level BPE with added tokens
//     and normalizers; SentencePiece-style BPE with byte fallback), and also read as token ids for
//     decode and the streaming detokenizer. Nothing may crash, hang or throw.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "mlxrt/tokenizer/tokenizer.h"
#include "mlxrt/util/errors.h"

namespace {

using mlxrt::tokenizer::Tokenizer;

std::string byte_level_json() {
  nlohmann::json vocab = nlohmann::json::object();
  // The GPT-2 byte alphabet, then a few merged tokens.
  int32_t next = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    uint32_t cp = printable ? b : 256 + next++;
    std::string s;
    if (cp < 0x80) s += static_cast<char>(cp);
    else { s += static_cast<char>(0xC0 | (cp >> 6)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
    vocab[s] = b;
  }
  vocab["Ġt"] = 256; vocab["he"] = 257; vocab["Ġthe"] = 258; vocab["in"] = 259; vocab["Ġin"] = 260;
  nlohmann::json doc = {
      {"added_tokens", nlohmann::json::array({
           {{"id", 300}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}},
           {{"id", 301}, {"content", "<mask>"}, {"special", true}, {"normalized", false}, {"lstrip", true}, {"rstrip", true}},
           {{"id", 302}, {"content", "word"}, {"single_word", true}, {"normalized", true}}})},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", nlohmann::json::array({{{"type", "NFKC"}}, {{"type", "Lowercase"}}})}}},
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array({
           {{"type", "Split"}, {"pattern", {{"Regex", R"('s|'t| ?\p{L}+| ?\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+(?!\S)|\s+)"}}}, {"behavior", "Isolated"}, {"invert", false}},
           {{"type", "Digits"}, {"individual_digits", true}},
           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"post_processor", {{"type", "TemplateProcessing"},
                          {"single", nlohmann::json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"SpecialToken", {{"id", "<|end|>"}, {"type_id", 0}}}}})},
                          {"special_tokens", {{"<|end|>", {{"id", "<|end|>"}, {"ids", {300}}, {"tokens", {"<|end|>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"Ġ t", "h e", "Ġt he", "i n", "Ġ in"}}, {"ignore_merges", true}}}};
  return doc.dump();
}

std::string spm_json() {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"▁", 259}, {"a", 260}, {"b", 261}, {"▁a", 262}, {"ab", 263}};
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  nlohmann::json doc = {
      {"added_tokens", nlohmann::json::array({{{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", true}}},
      {"decoder", {{"type", "Sequence"}, {"decoders", nlohmann::json::array({
           {{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}}, {{"type", "ByteFallback"}},
           {{"type", "Fuse"}}, {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"▁ a", "a b"}}, {"unk_token", "<unk>"},
                 {"byte_fallback", true}, {"fuse_unk", true}}}};
  return doc.dump();
}

void exercise(const Tokenizer& t, std::string_view text) {
  auto ids = t.encode(text, true);
  (void)t.decode(ids, false);
  (void)t.decode(ids, true);
  // The same bytes read as ids, in and out of range.
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 1 < text.size() && raw.size() < 64; i += 2)
    raw.push_back(static_cast<int16_t>((static_cast<uint8_t>(text[i]) << 8) | static_cast<uint8_t>(text[i + 1])) % 400);
  (void)t.decode(raw, false);
  auto d = t.streaming_detokenizer();
  for (int32_t id : raw) {
    d.add_token(id);
    (void)d.take_segment();
  }
  d.finalize();
  (void)d.take_segment();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer byte_level = Tokenizer::from_json_text(byte_level_json(), "fuzz byte-level");
  static const Tokenizer spm = Tokenizer::from_json_text(spm_json(), "fuzz spm");
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] == 0) {
    try {
      Tokenizer t = Tokenizer::from_json_text(rest, "fuzz");
      exercise(t, "Hello world <s> 123 héllo");
    } catch (const mlxrt::ConfigError&) {
    }
    return 0;
  }
  exercise(data[0] & 1 ? byte_level : spm, rest);
  return 0;
}
