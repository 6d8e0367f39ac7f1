#pragma once
/** Reading the request bodies of the Anthropic and Responses APIs: a 400 naming the field, an
 * indexed field's name, and an optional member (absent and null alike). */
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "mlxrt/server/http_error.h"

namespace mlxrt::server::api_fields {

[[noreturn]] inline void bad(const std::string& field, const std::string& message) {
  throw HttpError(400, field + ": " + message, field);
}

inline std::string at(const std::string& base, size_t i) { return base + "[" + std::to_string(i) + "]"; }

inline const nlohmann::ordered_json* find(const nlohmann::ordered_json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace mlxrt::server::api_fields
