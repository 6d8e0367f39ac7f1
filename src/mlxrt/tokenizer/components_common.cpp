#include "mlxrt/tokenizer/components.h"

#include "mlxrt/util/errors.h"
#include "mlxrt/util/json_file.h"

namespace mlxrt::tokenizer::detail {

const json& field(const json& obj, const char* key, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key))
    throw ConfigError(where + ": missing required key '" + key + "'");
  return obj[key];
}

std::string string_field(const json& obj, const char* key, const std::string& where) {
  const json& v = field(obj, key, where);
  if (!v.is_string())
    throw ConfigError(where + ": key '" + key + "' must be a string, got " + json_type_name(v));
  return v.get<std::string>();
}

bool bool_field(const json& obj, const char* key, bool fallback, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
  if (!obj[key].is_boolean())
    throw ConfigError(where + ": key '" + key + "' must be a boolean, got " + json_type_name(obj[key]));
  return obj[key].get<bool>();
}

std::string type_of(const json& obj, const std::string& where) {
  if (!obj.is_object()) throw ConfigError(where + ": must be an object, got " + json_type_name(obj));
  return string_field(obj, "type", where);
}

Pattern::Pattern(const json& spec, const std::string& where) {
  if (!spec.is_object()) throw ConfigError(where + ".pattern: must be an object {\"String\"|\"Regex\": ...}");
  if (spec.contains("String")) {
    literal_ = string_field(spec, "String", where + ".pattern");
  } else if (spec.contains("Regex")) {
    regex_ = std::make_unique<Regex>(string_field(spec, "Regex", where + ".pattern"), where + ".pattern");
  } else {
    throw ConfigError(where + ".pattern: expected a 'String' or 'Regex' key");
  }
}

std::vector<std::pair<size_t, size_t>> Pattern::find_all(std::string_view s) const {
  if (regex_) return regex_->find_all(s);
  std::vector<std::pair<size_t, size_t>> out;
  if (literal_.empty()) return out;
  size_t pos = 0;
  while ((pos = s.find(literal_, pos)) != std::string_view::npos) {
    out.emplace_back(pos, pos + literal_.size());
    pos += literal_.size();
  }
  return out;
}

namespace {
std::array<char32_t, 256> build_byte_to_char() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}
}  // namespace

const std::array<char32_t, 256>& byte_to_char() {
  static const std::array<char32_t, 256> table = build_byte_to_char();
  return table;
}

int char_to_byte(char32_t c) {
  static const std::array<int16_t, 512> inverse = [] {
    std::array<int16_t, 512> inv{};
    inv.fill(-1);
    const auto& fwd = byte_to_char();
    for (int b = 0; b < 256; ++b) inv[fwd[b]] = static_cast<int16_t>(b);
    return inv;
  }();
  return c < 512 ? inverse[c] : -1;
}

}  // namespace mlxrt::tokenizer::detail
