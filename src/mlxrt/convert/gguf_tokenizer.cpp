#include "mlxrt/convert/gguf_tokenizer.h"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <unordered_set>

#include "mlxrt/util/errors.h"

namespace mlxrt::convert {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// llama.cpp's token types (tokenizer.ggml.token_type).
enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

const char* const kLlama3Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/** How llama.cpp splits text before byte-level BPE, per tokenizer.ggml.pre, in the form the
 * model's original tokenizer.json writes it. */
enum class PreSplit { gpt2, digits_then_gpt2, llama3, qwen2 };

struct PreTokenizerEntry {
  const char* name;
  PreSplit split;
};

const PreTokenizerEntry kPreTokenizers[] = {
    // GPT-2's own regex ("default" is a file without the key: llama.cpp and transformers both fall back).
    {"default", PreSplit::gpt2}, {"gpt-2", PreSplit::gpt2}, {"gpt2", PreSplit::gpt2},
    {"phi-2", PreSplit::gpt2}, {"roberta-bpe", PreSplit::gpt2}, {"olmo", PreSplit::gpt2},
    {"jais", PreSplit::gpt2}, {"mpt", PreSplit::gpt2}, {"trillion", PreSplit::gpt2},
    // Each digit on its own, then GPT-2's regex.
    {"smollm", PreSplit::digits_then_gpt2}, {"starcoder", PreSplit::digits_then_gpt2},
    {"refact", PreSplit::digits_then_gpt2}, {"command-r", PreSplit::digits_then_gpt2},
    {"codeshell", PreSplit::digits_then_gpt2}, {"exaone", PreSplit::digits_then_gpt2},
    {"minerva-7b", PreSplit::digits_then_gpt2},
    // Llama 3's regex (numbers in groups of up to three).
    {"llama3", PreSplit::llama3}, {"llama-v3", PreSplit::llama3}, {"llama-bpe", PreSplit::llama3},
    {"falcon3", PreSplit::llama3}, {"falcon-h1", PreSplit::llama3}, {"pixtral", PreSplit::llama3},
    {"dbrx", PreSplit::llama3}, {"smaug-bpe", PreSplit::llama3},
    // Qwen2's regex (single digits), with NFC normalisation.
    {"qwen2", PreSplit::qwen2}, {"deepseek-r1-qwen", PreSplit::qwen2}, {"megrez", PreSplit::qwen2},
};

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json split_then_byte_level(const char* regex) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
            byte_level(false)}}};
}

/** Decodes UTF-8 text into code points and the byte offset where each starts; a malformed byte
 * counts as one code point of its own (value 0xDC00 + byte, outside every real alphabet). */
struct CodePoints {
  std::vector<uint32_t> values;
  std::vector<size_t> starts;
};

CodePoints code_points(const std::string& s) {
  CodePoints out;
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (int k = 1; ok && k < n; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      ok = (cc >> 6) == 2;
      cp = cp << 6 | (cc & 0x3f);
    }
    out.starts.push_back(i);
    out.values.push_back(ok ? cp : 0xDC00 + c);
    i += ok ? n : 1;
  }
  return out;
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | cp >> 6);
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xe0 | cp >> 12);
    s += static_cast<char>(0x80 | (cp >> 6 & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xf0 | cp >> 18);
    s += static_cast<char>(0x80 | (cp >> 12 & 0x3f));
    s += static_cast<char>(0x80 | (cp >> 6 & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

/** GPT-2's byte-to-character table: printable bytes stand for themselves, the others are moved
 * to U+0100 and up. */
std::array<uint32_t, 256> byte_alphabet() {
  std::array<uint32_t, 256> table{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    table[b] = printable ? b : next++;
  }
  return table;
}

struct Vocabulary {
  const std::vector<std::string>* tokens;
  std::vector<int64_t> types;  // one per token (kNormal where the file has none)
};

Vocabulary read_vocabulary(const GgufFile& file) {
  Vocabulary v;
  v.tokens = file.get_strings("tokenizer.ggml.tokens");
  if (!v.tokens || v.tokens->empty())
    throw ConfigError(file.source + ": missing metadata 'tokenizer.ggml.tokens'");
  v.types.assign(v.tokens->size(), kNormal);
  if (const auto* types = file.get_integers("tokenizer.ggml.token_type")) {
    if (types->size() != v.tokens->size())
      throw ConfigError(file.source + ": metadata 'tokenizer.ggml.token_type' has " + std::to_string(types->size()) +
                        " entries for " + std::to_string(v.tokens->size()) + " tokens");
    v.types = *types;
  }
  return v;
}

std::optional<uint64_t> token_id(const GgufFile& file, const Vocabulary& v, const char* key) {
  auto id = file.get_uint(std::string("tokenizer.ggml.") + key);
  if (id && *id >= v.tokens->size())
    throw ConfigError(file.source + ": metadata 'tokenizer.ggml." + key + "' = " + std::to_string(*id) +
                      " is not a token id (vocabulary of " + std::to_string(v.tokens->size()) + ")");
  return id;
}

json added_tokens(const Vocabulary& v) {
  json out = json::array();
  for (size_t i = 0; i < v.tokens->size(); ++i) {
    int64_t t = v.types[i];
    if (t != kControl && t != kUserDefined && t != kUnknown) continue;
    out.push_back({{"id", i}, {"content", (*v.tokens)[i]}, {"single_word", false}, {"lstrip", false},
                   {"rstrip", false}, {"normalized", false}, {"special", t != kUserDefined}});
  }
  return out;
}

json byte_level_bpe(const GgufFile& file, const Vocabulary& v) {
  auto alphabet = byte_alphabet();
  std::unordered_set<uint32_t> in_alphabet(alphabet.begin(), alphabet.end());
  json vocab = json::object();
  for (size_t i = 0; i < v.tokens->size(); ++i) {
    const std::string& token = (*v.tokens)[i];
    std::string spelled = token;
    // A normal token is stored already spelled in the byte alphabet; one that is not (a few
    // converters wrote raw text) is spelled from its UTF-8 bytes. Special tokens stay verbatim.
    if (v.types[i] == kNormal) {
      auto cps = code_points(token).values;
      if (!std::all_of(cps.begin(), cps.end(), [&](uint32_t c) { return in_alphabet.count(c) > 0; })) {
        spelled.clear();
        for (unsigned char b : token) spelled += utf8(alphabet[b]);
      }
    }
    vocab[spelled] = i;
  }
  const auto* merges = file.get_strings("tokenizer.ggml.merges");
  if (!merges) throw ConfigError(file.source + ": a 'gpt2' tokenizer needs metadata 'tokenizer.ggml.merges'");
  json pairs = json::array();
  for (const auto& m : *merges) {
    auto space = m.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == m.size())
      throw ConfigError(file.source + ": metadata 'tokenizer.ggml.merges' entry '" + m + "' is not two tokens");
    pairs.push_back({m.substr(0, space), m.substr(space + 1)});
  }
  std::string pre = file.get_string("tokenizer.ggml.pre").value_or("default");
  const PreTokenizerEntry* entry = nullptr;
  std::string supported;
  for (const auto& e : kPreTokenizers) {
    if (pre == e.name) entry = &e;
    supported += (supported.empty() ? "" : ", ") + std::string(e.name);
  }
  if (!entry)
    throw UnsupportedError(file.source + ": pre-tokenizer '" + pre +
                           "' (metadata 'tokenizer.ggml.pre') is not supported by the converter (supported: " +
                           supported + ")");
  json tok;
  tok["normalizer"] = nullptr;
  switch (entry->split) {
    case PreSplit::gpt2: tok["pre_tokenizer"] = byte_level(true); break;
    case PreSplit::digits_then_gpt2:
      tok["pre_tokenizer"] = {{"type", "Sequence"},
                              {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
      break;
    case PreSplit::llama3: tok["pre_tokenizer"] = split_then_byte_level(kLlama3Split); break;
    case PreSplit::qwen2:
      tok["normalizer"] = {{"type", "NFC"}};
      tok["pre_tokenizer"] = split_then_byte_level(kQwen2Split);
      break;
  }
  tok["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  tok["model"] = {{"type", "BPE"},        {"dropout", nullptr},        {"unk_token", nullptr},
                  {"continuing_subword_prefix", nullptr},             {"end_of_word_suffix", nullptr},
                  {"fuse_unk", false},    {"byte_fallback", false},
                  // llama.cpp looks whole pre-tokens up before merging for Llama 3 (as HF's does).
                  {"ignore_merges", entry->split == PreSplit::llama3},
                  {"vocab", std::move(vocab)}, {"merges", std::move(pairs)}};
  return tok;
}

/** SentencePiece BPE keeps no merge list; like HF's converters, recover one: every split of a
 * piece into two pieces of the vocabulary, ranked by the merged piece's score (then by length). */
json sentencepiece_merges(const GgufFile& file, const Vocabulary& v) {
  const auto* scores = file.get_reals("tokenizer.ggml.scores");
  if (!scores || scores->size() != v.tokens->size())
    throw ConfigError(file.source + ": a 'llama' tokenizer needs metadata 'tokenizer.ggml.scores' with one score per token");
  std::unordered_map<std::string, int64_t> ids;
  std::unordered_map<std::string, double> score_of;
  std::vector<std::string> order;  // first appearance, like a Python dict
  for (size_t i = 0; i < v.tokens->size(); ++i) {
    const auto& t = (*v.tokens)[i];
    ids[t] = static_cast<int64_t>(i);
    if (score_of.emplace(t, (*scores)[i]).second) order.push_back(t);
    else score_of[t] = (*scores)[i];
  }
  struct Merge {
    std::string left, right;
    double score;
    size_t left_len, right_len;
  };
  std::vector<Merge> merges;
  for (const auto& piece : order) {
    auto starts = code_points(piece).starts;
    std::vector<Merge> local;
    for (size_t k = 1; k < starts.size(); ++k) {
      std::string left = piece.substr(0, starts[k]), right = piece.substr(starts[k]);
      if (ids.count(left) && ids.count(right))
        local.push_back({left, right, score_of[piece], k, starts.size() - k});
    }
    std::stable_sort(local.begin(), local.end(), [&](const Merge& a, const Merge& b) {
      return std::pair(ids[a.left], ids[a.right]) < std::pair(ids[b.left], ids[b.right]);
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    return std::tuple(a.score, a.left_len, a.right_len) > std::tuple(b.score, b.left_len, b.right_len);
  });
  json out = json::array();
  for (const auto& m : merges) out.push_back({m.left, m.right});
  return out;
}

json sentencepiece_bpe(const GgufFile& file, const Vocabulary& v, bool add_space_prefix) {
  json vocab = json::object();
  for (size_t i = 0; i < v.tokens->size(); ++i) vocab[(*v.tokens)[i]] = i;
  auto unk = token_id(file, v, "unknown_token_id").value_or(0);
  json replace_space = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
  json tok;
  tok["normalizer"] = add_space_prefix
                          ? json{{"type", "Sequence"},
                                 {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}}, replace_space}}}
                          : replace_space;
  tok["pre_tokenizer"] = nullptr;
  json decoders = {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                   {{"type", "ByteFallback"}},
                   {{"type", "Fuse"}}};
  if (add_space_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  tok["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  tok["model"] = {{"type", "BPE"},       {"dropout", nullptr},      {"unk_token", (*v.tokens)[unk]},
                  {"continuing_subword_prefix", nullptr},           {"end_of_word_suffix", nullptr},
                  {"fuse_unk", true},    {"byte_fallback", true},   {"ignore_merges", false},
                  {"vocab", std::move(vocab)}, {"merges", sentencepiece_merges(file, v)}};
  return tok;
}

/** Gemma 4's BPE as llama.cpp runs its "gemma4" model: spaces replaced by "\u2581", the text cut
 * into runs of newlines and runs of anything else, merges from the file (each split at its first
 * space after the first character, as llama.cpp splits them), bytes outside the vocabulary as
 * <0xXX> tokens. */
json gemma4_bpe(const GgufFile& file, const Vocabulary& v) {
  json vocab = json::object();
  for (size_t i = 0; i < v.tokens->size(); ++i) vocab[(*v.tokens)[i]] = i;
  const auto* merges = file.get_strings("tokenizer.ggml.merges");
  if (!merges) throw ConfigError(file.source + ": a 'gemma4' tokenizer needs metadata 'tokenizer.ggml.merges'");
  json pairs = json::array();
  for (const auto& m : *merges) {
    auto space = m.size() < 2 ? std::string::npos : m.find(' ', 1);
    if (space == std::string::npos || space + 1 == m.size())
      throw ConfigError(file.source + ": metadata 'tokenizer.ggml.merges' entry '" + m + "' is not two tokens");
    pairs.push_back({m.substr(0, space), m.substr(space + 1)});
  }
  auto unk = token_id(file, v, "unknown_token_id");
  json tok;
  tok["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
  tok["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "[^\\n]+|[\\n]+"}}}, {"behavior", "Isolated"},
                          {"invert", false}};
  tok["decoder"] = {{"type", "Sequence"},
                    {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}}}}};
  tok["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", unk ? json((*v.tokens)[*unk]) : json(nullptr)},
                  {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr},
                  {"fuse_unk", true},
                  {"byte_fallback", true},
                  {"ignore_merges", false},
                  {"vocab", std::move(vocab)},
                  {"merges", std::move(pairs)}};
  return tok;
}

/** The post-processor adding BOS / EOS around a sequence when the file asks for it. */
json post_processor(const std::optional<std::string>& bos, const std::optional<std::string>& eos,
                    const std::optional<uint64_t>& bos_id, const std::optional<uint64_t>& eos_id) {
  json single = json::array(), pair = json::array(), specials = json::object();
  auto add = [&](const std::string& token, uint64_t id, int type_id, json& seq) {
    seq.push_back({{"SpecialToken", {{"id", token}, {"type_id", type_id}}}});
    specials[token] = {{"id", token}, {"ids", {id}}, {"tokens", {token}}};
  };
  if (bos) add(*bos, *bos_id, 0, single);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (eos) add(*eos, *eos_id, 0, single);
  if (bos) add(*bos, *bos_id, 0, pair);
  pair.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (eos) add(*eos, *eos_id, 0, pair);
  if (bos) add(*bos, *bos_id, 1, pair);
  pair.push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});
  if (eos) add(*eos, *eos_id, 1, pair);
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}};
}

}  // namespace

bool has_tokenizer(const GgufFile& file) {
  return file.metadata.count("tokenizer.ggml.model") && file.metadata.count("tokenizer.ggml.tokens");
}

TokenizerFiles build_tokenizer_files(const GgufFile& file) {
  auto model = file.get_string("tokenizer.ggml.model");
  if (!model) throw ConfigError(file.source + ": missing metadata 'tokenizer.ggml.model'");
  Vocabulary v = read_vocabulary(file);
  auto bos_id = token_id(file, v, "bos_token_id");
  auto eos_id = token_id(file, v, "eos_token_id");
  auto unk_id = token_id(file, v, "unknown_token_id");
  auto pad_id = token_id(file, v, "padding_token_id");
  auto text = [&](const std::optional<uint64_t>& id) -> std::optional<std::string> {
    if (!id) return std::nullopt;
    return (*v.tokens)[*id];
  };
  bool spm = *model == "llama", gemma4 = *model == "gemma4";
  if (!spm && !gemma4 && *model != "gpt2")
    throw UnsupportedError(file.source + ": tokenizer model '" + *model +
                           "' (metadata 'tokenizer.ggml.model') is not supported by the converter (supported: gemma4, "
                           "gpt2, llama)");
  // llama.cpp adds BOS for SentencePiece vocabularies unless the file says otherwise, and always
  // for Gemma 4's.
  bool add_bos = gemma4 || file.get_bool("tokenizer.ggml.add_bos_token").value_or(spm);
  bool add_eos = file.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  bool add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);

  TokenizerFiles out;
  json tok = spm ? sentencepiece_bpe(file, v, add_space_prefix) : gemma4 ? gemma4_bpe(file, v) : byte_level_bpe(file, v);
  tok["version"] = "1.0";
  tok["truncation"] = nullptr;
  tok["padding"] = nullptr;
  tok["added_tokens"] = added_tokens(v);
  tok["post_processor"] = post_processor(add_bos ? text(bos_id) : std::nullopt,
                                         add_eos ? text(eos_id) : std::nullopt, bos_id, eos_id);
  out.tokenizer = std::move(tok);

  ordered_json& cfg = out.tokenizer_config;
  cfg["add_bos_token"] = add_bos;
  cfg["add_eos_token"] = add_eos;
  ordered_json decoder = ordered_json::object();
  for (const auto& t : out.tokenizer["added_tokens"])
    decoder[std::to_string(t["id"].get<uint64_t>())] = {
        {"content", t["content"]}, {"lstrip", false}, {"normalized", false},
        {"rstrip", false},         {"single_word", false}, {"special", t["special"]}};
  cfg["added_tokens_decoder"] = std::move(decoder);
  auto opt = [](const std::optional<std::string>& s) { return s ? ordered_json(*s) : ordered_json(nullptr); };
  cfg["bos_token"] = opt(text(bos_id));
  cfg["eos_token"] = opt(text(eos_id));
  cfg["unk_token"] = opt(text(unk_id));
  cfg["pad_token"] = opt(text(pad_id));
  if (auto tmpl = file.get_string("tokenizer.chat_template")) cfg["chat_template"] = *tmpl;
  cfg["clean_up_tokenization_spaces"] = false;
  std::string arch = file.get_string("general.architecture").value_or("");
  if (auto ctx = file.get_uint(arch + ".context_length")) cfg["model_max_length"] = *ctx;
  cfg["tokenizer_class"] = "PreTrainedTokenizerFast";

  ordered_json& gen = out.generation_config;
  if (bos_id) gen["bos_token_id"] = *bos_id;
  // The end of a turn may be its own token (Llama 3's <|eot_id|>): generation stops on any of them.
  std::vector<uint64_t> stops;
  for (const char* key : {"eos_token_id", "eot_token_id", "eom_token_id"})
    if (auto id = token_id(file, v, key); id && std::find(stops.begin(), stops.end(), *id) == stops.end())
      stops.push_back(*id);
  if (stops.size() == 1) gen["eos_token_id"] = stops[0];
  else if (!stops.empty()) gen["eos_token_id"] = stops;
  if (pad_id) gen["pad_token_id"] = *pad_id;
  return out;
}

}  // namespace mlxrt::convert
