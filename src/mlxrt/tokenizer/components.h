#pragma once
/** The stages of a tokenizer.json pipeline, each built from its JSON object:
 * normalizer -> pre-tokenizer -> model -> post-processor, and decoder for the way back.
 * All are immutable once built (shared by concurrent encode/decode calls). */
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlxrt/tokenizer/regex.h"

namespace mlxrt::tokenizer::detail {

using json = nlohmann::json;

/** A `pattern` field: {"String": s} (literal) or {"Regex": r}. */
class Pattern {
 public:
  Pattern(const json& spec, const std::string& where);
  /** Non-overlapping matches of the pattern in s. */
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

/** A piece of text on its way to the model; `at_start` is true when it begins where the input began
 * (Metaspace's prepend_scheme "first" reads it). */
struct Piece {
  std::string text;
  bool at_start = false;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& s) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /** Splits every piece further (in place), dropping empty pieces. */
  virtual void split(std::vector<Piece>& pieces) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual void tokenize(std::string_view piece, std::vector<int32_t>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  /** nullptr when the id is not in the model's vocabulary. */
  virtual const std::string* id_to_token(int32_t id) const = 0;
  virtual size_t size() const = 0;
  /** One past the largest id in the model's vocabulary. */
  virtual size_t id_limit() const = 0;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  /** Adds the special tokens around one sequence (called only when add_special_tokens). */
  virtual void process(std::vector<int32_t>& ids) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

/** Factories: `where` names the file and JSON path for error messages. A null spec gives nullptr. */
std::unique_ptr<Normalizer> make_normalizer(const json& spec, const std::string& where);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& spec, const std::string& where);
struct ModelTables;
/** `tables`, when given, holds model.vocab / model.merges read while parsing (tokenizer_json_reader.h);
 * a table it holds is used instead of the (then empty) field of `spec`. */
std::unique_ptr<Model> make_model(const json& spec, const std::string& where, ModelTables* tables = nullptr);
/** Post-processors resolve special-token names through the vocabulary. */
std::unique_ptr<PostProcessor> make_post_processor(const json& spec, const std::string& where);
std::unique_ptr<Decoder> make_decoder(const json& spec, const std::string& where);

/** The GPT-2 byte-to-character table: byte b is written as the code point byte_to_char()[b]. */
const std::array<char32_t, 256>& byte_to_char();
/** Inverse of byte_to_char: -1 for code points that stand for no byte. */
int char_to_byte(char32_t c);

/** Small JSON accessors that throw ConfigError naming `where` and the key. */
const json& field(const json& obj, const char* key, const std::string& where);
std::string string_field(const json& obj, const char* key, const std::string& where);
bool bool_field(const json& obj, const char* key, bool fallback, const std::string& where);
std::string type_of(const json& obj, const std::string& where);

}  // namespace mlxrt::tokenizer::detail
