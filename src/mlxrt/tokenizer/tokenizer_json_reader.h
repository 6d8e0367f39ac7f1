#pragma once
/** Reads tokenizer.json with its two large tables (model.vocab, model.merges) taken straight into
 * the model's structures while the text is parsed, instead of into the JSON document: a 150k-token
 * BPE's vocabulary as a document is 150k map nodes and strings that are built, walked once and
 * freed, most of a tokenizer's load time. Everything else stays in the document. */
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlxrt/tokenizer/vocab.h"

namespace mlxrt::tokenizer::detail {

using Merges = std::vector<std::pair<std::string, std::string>>;

/** model.vocab and model.merges as read; each set only when the document held that field as an
 * object (vocab) or a list (merges), which the document then holds empty in its place. */
struct ModelTables {
  std::optional<Vocab> vocab;
  std::optional<Merges> merges;
};

struct TokenizerJson {
  nlohmann::json doc;
  ModelTables tables;
};

/** One vocabulary id (`where` names the model section, `token` the entry) and one merges entry
 * ("a b" or ["a", "b"], `at` names it): the rules of both the document path and the reader; a bad
 * entry throws ConfigError. */
int32_t vocab_id(const nlohmann::json& value, const std::string& where, const std::string& token);
std::pair<std::string, std::string> merge_entry(const nlohmann::json& entry, const std::string& at);

/** Parses tokenizer.json text. Malformed JSON throws nlohmann's parse_error or out_of_range (a number that overflows) (callers word it); a
 * bad vocabulary id or merge entry throws ConfigError naming `source`, with the messages the
 * document path gives. */
TokenizerJson read_tokenizer_json(std::string_view text, const std::string& source);

}  // namespace mlxrt::tokenizer::detail
