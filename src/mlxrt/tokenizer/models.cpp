// The `model` section of tokenizer.json: BPE, WordPiece and WordLevel.
#include "mlxrt/tokenizer/bpe.h"
#include "mlxrt/tokenizer/tokenizer_json_reader.h"
#include "mlxrt/tokenizer/utf8.h"
#include "mlxrt/util/errors.h"
#include "mlxrt/util/json_file.h"

namespace mlxrt::tokenizer::detail {
namespace {

Vocab parse_vocab(const json& spec, const std::string& where, ModelTables* tables) {
  if (tables && tables->vocab) return std::move(*tables->vocab);
  const json& v = field(spec, "vocab", where);
  if (!v.is_object()) throw ConfigError(where + ".vocab: must be an object {token: id}, got " + json_type_name(v));
  Vocab vocab;
  vocab.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it) vocab.add(it.key(), vocab_id(it.value(), where, it.key()));
  return vocab;
}

std::optional<std::string> optional_string(const json& spec, const char* key, const std::string& where) {
  if (!spec.contains(key) || spec[key].is_null()) return std::nullopt;
  return string_field(spec, key, where);
}

Merges parse_merges(const json& spec, const std::string& where, ModelTables* tables) {
  if (tables && tables->merges) return std::move(*tables->merges);
  Merges merges;
  if (!spec.contains("merges") || spec["merges"].is_null()) return merges;
  const json& m = spec["merges"];
  if (!m.is_array()) throw ConfigError(where + ".merges: must be a list");
  merges.reserve(m.size());
  for (size_t i = 0; i < m.size(); ++i)
    merges.push_back(merge_entry(m[i], where + ".merges[" + std::to_string(i) + "]"));
  return merges;
}

class WordPiece : public Model {
 public:
  WordPiece(const json& spec, const std::string& where, ModelTables* tables)
      : vocab_(parse_vocab(spec, where, tables)),
        prefix_(optional_string(spec, "continuing_subword_prefix", where).value_or("##")),
        max_chars_(spec.contains("max_input_chars_per_word") && spec["max_input_chars_per_word"].is_number_unsigned()
                       ? spec["max_input_chars_per_word"].get<size_t>()
                       : 100) {
    std::string unk = optional_string(spec, "unk_token", where).value_or("[UNK]");
    auto id = vocab_.find(unk);
    if (!id) throw ConfigError(where + ".unk_token: '" + unk + "' is not in the vocabulary");
    unk_id_ = *id;
  }
  // Greedy longest-match-first; a word with any unmatchable rest becomes one unk.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const override {
    size_t chars = 0;
    for (size_t i = 0; i < word.size(); i += char_len(static_cast<unsigned char>(word[i]))) ++chars;
    if (chars > max_chars_) {
      out.push_back(unk_id_);
      return;
    }
    std::vector<int32_t> ids;
    std::string buf;
    size_t start = 0;
    while (start < word.size()) {
      size_t end = word.size();
      std::optional<int32_t> found;
      while (start < end) {
        buf.clear();
        if (start > 0) buf += prefix_;
        buf.append(word.substr(start, end - start));
        if ((found = vocab_.find(buf))) break;
        do { --end; } while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
      }
      if (!found) {
        out.push_back(unk_id_);
        return;
      }
      ids.push_back(*found);
      start = end;
    }
    out.insert(out.end(), ids.begin(), ids.end());
  }
  std::optional<int32_t> token_to_id(std::string_view t) const override { return vocab_.find(t); }
  const std::string* id_to_token(int32_t id) const override { return vocab_.token(id); }
  size_t size() const override { return vocab_.size(); }
  size_t id_limit() const override { return vocab_.limit(); }

 private:
  Vocab vocab_;
  std::string prefix_;
  size_t max_chars_;
  int32_t unk_id_ = 0;
};

class WordLevel : public Model {
 public:
  WordLevel(const json& spec, const std::string& where, ModelTables* tables)
      : vocab_(parse_vocab(spec, where, tables)) {
    if (auto unk = optional_string(spec, "unk_token", where)) unk_id_ = vocab_.find(*unk);
  }
  void tokenize(std::string_view word, std::vector<int32_t>& out) const override {
    if (auto id = vocab_.find(word)) out.push_back(*id);
    else if (unk_id_) out.push_back(*unk_id_);
  }
  std::optional<int32_t> token_to_id(std::string_view t) const override { return vocab_.find(t); }
  const std::string* id_to_token(int32_t id) const override { return vocab_.token(id); }
  size_t size() const override { return vocab_.size(); }
  size_t id_limit() const override { return vocab_.limit(); }

 private:
  Vocab vocab_;
  std::optional<int32_t> unk_id_;
};

}  // namespace

std::unique_ptr<Model> make_model(const json& spec, const std::string& where, ModelTables* tables) {
  if (!spec.is_object()) throw ConfigError(where + ": must be an object, got " + json_type_name(spec));
  // Old files omit "type" for BPE; HF infers it from the fields.
  std::string type = spec.contains("type") ? string_field(spec, "type", where)
                     : spec.contains("merges") ? "BPE" : "";
  if (type == "BPE") {
    if (spec.contains("dropout") && spec["dropout"].is_number() && spec["dropout"].get<double>() > 0.0)
      throw ConfigError(where + ".dropout: BPE dropout is a training setting; expected null");
    BpeOptions o;
    o.unk_token = optional_string(spec, "unk_token", where);
    o.continuing_subword_prefix = optional_string(spec, "continuing_subword_prefix", where);
    o.end_of_word_suffix = optional_string(spec, "end_of_word_suffix", where);
    o.fuse_unk = bool_field(spec, "fuse_unk", false, where);
    o.byte_fallback = bool_field(spec, "byte_fallback", false, where);
    o.ignore_merges = bool_field(spec, "ignore_merges", false, where);
    return std::make_unique<Bpe>(parse_vocab(spec, where, tables), parse_merges(spec, where, tables), std::move(o),
                                 where);
  }
  if (type == "WordPiece") return std::make_unique<WordPiece>(spec, where, tables);
  if (type == "WordLevel") return std::make_unique<WordLevel>(spec, where, tables);
  throw ConfigError(where + ".type: unsupported model type '" + type + "' (supported: BPE, WordPiece, WordLevel)");
}

}  // namespace mlxrt::tokenizer::detail
