#include "mlxrt/tokenizer/tokenizer_json_reader.h"

#include <cstdint>

#include "mlxrt/util/errors.h"

namespace mlxrt::tokenizer::detail {
namespace {

using json = nlohmann::json;
using Event = json::parse_event_t;

// nlohmann's parse callback sees every key, value and container end with its depth (the number of
// open containers). Keys at depth 1 name the document's sections, keys at depth 2 a section's fields;
// a vocabulary entry is a key and a value at depth 3 under model.vocab, a merge a value (or a
// two-string list ending) at depth 3 under model.merges.
class TableCollector {
 public:
  TableCollector(ModelTables& tables, const std::string& source) : tables_(tables), where_(source + ": model") {}

  bool operator()(int depth, Event event, json& parsed) {
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        if (depth == 2 && in_model()) open_field(event == Event::object_start);
        // A list or object as a vocabulary id: its key is already dropped, and the parser reports
        // no end for a container it does not keep, so it is judged here.
        if (depth == 3 && in_field("vocab") && vocab_open_) return take_vocab_entry(parsed);
        return true;
      case Event::key:
        return on_key(depth, parsed);
      case Event::value:
        if (depth == 3 && in_field("vocab") && vocab_open_) return take_vocab_entry(parsed);
        if (depth == 3 && in_field("merges") && merges_open_) return take_merge(parsed);
        return true;
      case Event::array_end:
      case Event::object_end:
        if (depth == 3 && in_field("merges") && merges_open_) return take_merge(parsed);
        if (depth == 2 && in_model()) vocab_open_ = merges_open_ = false;
        return true;
    }
    return true;
  }

  /** The first bad entry, reported once the whole text is known to be valid JSON. */
  const std::optional<std::string>& error() const { return error_; }

 private:
  bool in_model() const { return section_ == "model"; }
  bool in_field(const char* name) const { return in_model() && field_ == name; }

  bool on_key(int depth, const json& key) {
    const auto& name = key.get_ref<const std::string&>();
    if (depth == 1) {
      section_ = name;
      field_.clear();
      // A later "model" replaces an earlier one, as in the document.
      if (in_model()) tables_ = ModelTables{};
      return true;
    }
    if (depth == 2) {
      field_ = in_model() ? name : std::string();
      vocab_open_ = merges_open_ = false;
      return true;
    }
    if (depth == 3 && in_field("vocab") && vocab_open_) {
      vocab_key_ = name;
      return false;  // the entry goes to the table, not the document
    }
    return true;
  }

  void open_field(bool is_object) {
    if (field_ == "vocab" && is_object) {
      tables_.vocab.emplace();
      vocab_open_ = true;
    } else if (field_ == "merges" && !is_object) {
      tables_.merges.emplace();
      merges_open_ = true;
    }
  }

  // Each entry goes to the table and never to the document (false). Only the first bad entry is
  // reported, so nothing after it needs to be kept.
  bool take_vocab_entry(const json& value) {
    if (error_) return false;
    try {
      int32_t id = vocab_id(value, where_, vocab_key_);
      tables_.vocab->add(std::move(vocab_key_), id);
    } catch (const ConfigError& e) {
      error_ = e.what();
    }
    return false;
  }

  bool take_merge(const json& entry) {
    if (error_) return false;
    auto& merges = *tables_.merges;
    try {
      merges.push_back(merge_entry(entry, where_ + ".merges[" + std::to_string(merges.size()) + "]"));
    } catch (const ConfigError& e) {
      error_ = e.what();
    }
    return false;
  }

  ModelTables& tables_;
  std::string where_;
  std::string section_, field_, vocab_key_;
  bool vocab_open_ = false, merges_open_ = false;
  std::optional<std::string> error_;
};

}  // namespace

int32_t vocab_id(const json& value, const std::string& where, const std::string& token) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > INT32_MAX)
    throw ConfigError(where + ".vocab['" + token + "']: must be a non-negative integer id");
  return static_cast<int32_t>(value.get<int64_t>());
}

std::pair<std::string, std::string> merge_entry(const json& entry, const std::string& at) {
  if (entry.is_string()) {
    const auto& s = entry.get_ref<const std::string&>();
    size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
      throw ConfigError(at + ": expected two tokens separated by one space, got '" + s + "'");
    return {s.substr(0, sp), s.substr(sp + 1)};
  }
  if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string())
    return {entry[0].get<std::string>(), entry[1].get<std::string>()};
  throw ConfigError(at + ": expected \"a b\" or [\"a\", \"b\"]");
}

TokenizerJson read_tokenizer_json(std::string_view text, const std::string& source) {
  TokenizerJson out;
  TableCollector collector(out.tables, source);
  out.doc = json::parse(text, [&collector](int depth, Event event, json& parsed) {
    return collector(depth, event, parsed);
  });
  if (collector.error()) throw ConfigError(*collector.error());
  return out;
}

}  // namespace mlxrt::tokenizer::detail
