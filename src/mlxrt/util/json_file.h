#pragma once
/** Reading JSON files and typed fields with messages that name the file and the key. */
#include <cmath>
#include <filesystem>
#include <limits>
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
    // A value outside T's range is refused rather than wrapped (4294967424 read as an int would be 128).
    auto out_of_range = [&]() -> T {
      throw ConfigError(source_ + ": key '" + key + "' is " + v.dump() + ", outside the range " +
                        std::to_string(std::numeric_limits<T>::min()) + ".." +
                        std::to_string(std::numeric_limits<T>::max()));
    };
    if (v.is_number_unsigned()) {
      const auto u = v.get<unsigned long long>();
      if (u > static_cast<unsigned long long>(std::numeric_limits<T>::max())) return out_of_range();
      return static_cast<T>(u);
    }
    if (v.is_number_integer()) {
      const auto i = v.get<long long>();
      if constexpr (std::is_unsigned_v<T>) {
        if (i < 0) return out_of_range();
        if (static_cast<unsigned long long>(i) > static_cast<unsigned long long>(std::numeric_limits<T>::max()))
          return out_of_range();
      } else {
        if (i < static_cast<long long>(std::numeric_limits<T>::min()) ||
            i > static_cast<long long>(std::numeric_limits<T>::max()))
          return out_of_range();
      }
      return static_cast<T>(i);
    }
    // Python configs sometimes write integral values as floats (e.g. 4096.0). The range is checked
    // before converting: casting a double outside it is undefined behaviour.
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (!(d >= static_cast<double>(std::numeric_limits<T>::min()) &&
            d < static_cast<double>(std::numeric_limits<T>::max()) + 1.0))
        return out_of_range();
      if (d != std::trunc(d)) return fail("an integer");
      return static_cast<T>(d);
    }
    return fail("an integer");
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) return fail("a number");
    const T value = v.get<T>();
    if (!std::isfinite(value))
      throw ConfigError(source_ + ": key '" + key + "' is " + v.dump() + ", which is not a finite number");
    return value;
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) return fail("a string");
    return v.get<std::string>();
  } else {
    return v.get<T>();
  }
}

}  // namespace mlxrt
