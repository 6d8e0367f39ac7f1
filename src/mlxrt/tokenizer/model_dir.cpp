// Tokenizer::from_dir: which tokenizer files a model directory holds, and the configuration
// (tokenizer_config.json, special_tokens_map.json, chat templates, generation_config.json).
#include "mlxrt/tokenizer/tokenizer_impl.h"
#include "mlxrt/tokenizer/tokenizer_json_reader.h"
#include "mlxrt/util/errors.h"
#include "mlxrt/util/json_file.h"

namespace mlxrt::tokenizer {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A special-token entry: a string, or an AddedToken object {"content": ...}.
std::optional<std::string> token_string(const json& obj, const char* key, const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return std::nullopt;
  const json& v = obj[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  throw ConfigError(where + ": key '" + key + "' must be a string or an object with 'content', got " +
                    json_type_name(v));
}

std::vector<int32_t> eos_ids_of(const json& obj, const std::string& where) {
  std::vector<int32_t> ids;
  if (!obj.is_object() || !obj.contains("eos_token_id") || obj["eos_token_id"].is_null()) return ids;
  const json& v = obj["eos_token_id"];
  auto one = [&](const json& x) {
    if (!x.is_number_integer()) throw ConfigError(where + ": eos_token_id must be an integer or a list of integers");
    ids.push_back(x.get<int32_t>());
  };
  if (v.is_array()) for (const json& x : v) one(x);
  else one(v);
  return ids;
}

TokenizerConfig read_config(const fs::path& dir) {
  TokenizerConfig c;
  fs::path tc = dir / "tokenizer_config.json";
  if (fs::exists(tc)) {
    c.raw = read_json_file(tc);
    if (!c.raw.is_object()) throw ConfigError(tc.string() + ": must be a JSON object");
  }
  json special_map = json::object();
  if (fs::exists(dir / "special_tokens_map.json")) special_map = read_json_file(dir / "special_tokens_map.json");
  auto special = [&](const char* key) {
    auto v = token_string(c.raw, key, tc.string());
    if (!v && special_map.is_object()) v = token_string(special_map, key, (dir / "special_tokens_map.json").string());
    return v;
  };
  c.bos_token = special("bos_token");
  c.eos_token = special("eos_token");
  c.pad_token = special("pad_token");
  c.unk_token = special("unk_token");
  JsonFields f(c.raw, tc.string());
  c.add_bos_token = f.optional<bool>("add_bos_token");
  c.add_eos_token = f.optional<bool>("add_eos_token");
  c.clean_up_tokenization_spaces = f.value_or<bool>("clean_up_tokenization_spaces", false);
  if (c.raw.contains("chat_template")) c.chat_template = c.raw["chat_template"];
  if (!c.chat_template.is_null() && !c.chat_template.is_string() && !c.chat_template.is_array())
    throw ConfigError(tc.string() + ": key 'chat_template' must be a string or a list of {name, template}");
  // transformers prefers a separate template file when the directory has one.
  if (fs::exists(dir / "chat_template.jinja")) {
    c.chat_template = read_text_file(dir / "chat_template.jinja");
  } else if (fs::exists(dir / "chat_template.json")) {
    json t = read_json_file(dir / "chat_template.json");
    if (t.is_object() && t.contains("chat_template")) c.chat_template = t["chat_template"];
  }
  // mlx-lm: config.json's eos_token_id, replaced by generation_config.json's when that has one.
  if (fs::exists(dir / "config.json")) c.eos_token_ids = eos_ids_of(read_json_file(dir / "config.json"), (dir / "config.json").string());
  if (fs::exists(dir / "generation_config.json")) {
    auto g = eos_ids_of(read_json_file(dir / "generation_config.json"), (dir / "generation_config.json").string());
    if (!g.empty()) c.eos_token_ids = std::move(g);
  }
  return c;
}

std::vector<std::pair<std::string, std::string>> read_merges_txt(const fs::path& path) {
  std::string text = read_text_file(path);
  json merges = json::array();
  std::vector<std::pair<std::string, std::string>> out;
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    size_t sp = line.find(' ');
    if (sp == std::string::npos)
      throw ConfigError(path.string() + ": line " + std::to_string(line_no) + ": expected two tokens separated by a space");
    out.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  return out;
}

// vocab.json + merges.txt as transformers builds them: GPT-2's byte-level BPE, or Qwen2's
// (its own split regex and NFC) when tokenizer_config.json names Qwen2Tokenizer.
json gpt2_style_document(const fs::path& dir, const TokenizerConfig& config) {
  json doc;
  json vocab = read_json_file(dir / "vocab.json");
  if (!vocab.is_object()) throw ConfigError((dir / "vocab.json").string() + ": must be an object {token: id}");
  json merges = json::array();
  for (auto& [a, b] : read_merges_txt(dir / "merges.txt")) merges.push_back(a + " " + b);
  doc["model"] = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
  std::string cls = config.raw.value("tokenizer_class", std::string());
  if (cls.rfind("Qwen2Tokenizer", 0) == 0) {
    doc["normalizer"] = {{"type", "NFC"}};
    doc["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
         "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})");
  } else {
    bool prefix = config.raw.value("add_prefix_space", false);
    doc["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", prefix}, {"use_regex", true}};
  }
  doc["decoder"] = {{"type", "ByteLevel"}};
  json added = json::array();
  if (config.raw.contains("added_tokens_decoder") && config.raw["added_tokens_decoder"].is_object()) {
    for (auto& [id, t] : config.raw["added_tokens_decoder"].items()) {
      json entry = t;
      try {
        entry["id"] = std::stoi(id);
      } catch (const std::exception&) {
        throw ConfigError((dir / "tokenizer_config.json").string() + ": added_tokens_decoder key '" + id +
                          "' is not an integer id");
      }
      added.push_back(std::move(entry));
    }
  } else if (doc["model"]["vocab"].contains("<|endoftext|>")) {
    // GPT-2's tokenizer treats its one special token as special without saying so in any file.
    added.push_back({{"id", doc["model"]["vocab"]["<|endoftext|>"]}, {"content", "<|endoftext|>"},
                     {"special", true}, {"normalized", false}});
  }
  doc["added_tokens"] = std::move(added);
  return doc;
}

}  // namespace

Tokenizer Tokenizer::from_dir(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw ConfigError("model directory '" + dir.string() + "' does not exist");
  TokenizerConfig config = read_config(dir);
  std::shared_ptr<Impl> impl;
  json doc;
  if (fs::exists(dir / "tokenizer.json")) {
    auto path = dir / "tokenizer.json";
    detail::TokenizerJson parsed;
    try {
      parsed = detail::read_tokenizer_json(read_text_file(path), path.string());
    } catch (const json::exception& e) {
      throw ConfigError(path.string() + ": invalid JSON (" + e.what() + ")");
    }
    doc = std::move(parsed.doc);
    impl = parse_tokenizer_json(doc, path.string(), &parsed.tables);
  } else if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) {
    doc = gpt2_style_document(dir, config);
    impl = parse_tokenizer_json(doc, (dir / "vocab.json").string());
  } else if (fs::exists(dir / "tokenizer.model")) {
    impl = std::make_shared<Impl>();
    impl->spm = detail::load_sentencepiece(dir / "tokenizer.model");
    impl->add_bos_spm = config.add_bos_token.value_or(true);
    impl->add_eos_spm = config.add_eos_token.value_or(false);
  } else {
    throw ConfigError("model directory '" + dir.string() +
                      "' has no tokenizer: expected tokenizer.json, vocab.json + merges.txt, or tokenizer.model");
  }
  impl->config = std::move(config);
  finish_impl(*impl, doc.contains("decoder") ? &doc["decoder"] : nullptr);
  return Tokenizer(std::move(impl));
}

}  // namespace mlxrt::tokenizer
