#pragma once
/** Reading JSON files and typed fields with messages that name the file and the key. */
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "mlxrt/util/errors.h"

namespace mlxrt {

using json = nlohmann::json;

/** Parses a JSON file; ConfigError names the file and the parse position on failure. */
json read_json_file(const std::filesystem::path& path);

/** Reads the whole file into a string; ConfigError names the file on failure. */
std::string read_text_file(const std::filesystem::path& path);

/** A JSON object together with the file it came from, for typed access with good errors. */
class JsonFields {
 public:
  JsonFields(const json& object, std::string source) : object_(object), source_(std::move(source)) {}

  bool has(const std::string& key) const { return object_.contains(key) && !object_[key].is_null(); }
  const json& raw() const { return object_; }
  const std::string& source() const { return source_; }

  /** A required key; ConfigError "<source>: missing required key 'k'" or a type mismatch. */
  template <typename T>
  T required(const std::string& key) const {
    if (!has(key)) throw ConfigError(source_ + ": missing required key '" + key + "'");
    return convert<T>(key);
  }

  template <typename T>
  std::optional<T> optional(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return convert<T>(key);
  }

  template <typename T>
  T value_or(const std::string& key, T fallback) const {
    auto v = optional<T>(key);
    return v ? *v : fallback;
  }

 private:
  template <typename T>
  T convert(const std::string& key) const;

  const json& object_;
  std::string source_;
};

std::string json_type_name(const json& value);

template <typename T>
T JsonFields::convert(const std::string& key) const {
  const json& v = object_[key];
  auto fail = [&](const char* expected) -> T {
    throw ConfigError(source_ + ": key '" + key + "' must be " + expected + ", got " +
                      json_type_name(v));
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return fail("a boolean");
    return v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (v.is_number_integer()) return v.get<T>();
    // Python configs sometimes write integral values as floats (e.g. 4096.0).
    if (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<long long>(v.get<double>())))
      return static_cast<T>(v.get<double>());
    return fail("an integer");
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) return fail("a number");
    return v.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) return fail("a string");
    return v.get<std::string>();
  } else {
    return v.get<T>();
  }
}

}  // namespace mlxrt
