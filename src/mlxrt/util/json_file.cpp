#include "mlxrt/util/json_file.h"

#include <fstream>
#include <sstream>

namespace mlxrt {

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path.string() + ": cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw ConfigError(path.string() + ": read error");
  return ss.str();
}

json read_json_file(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) throw ConfigError(path.string() + ": file not found");
  std::string text = read_text_file(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw ConfigError(path.string() + ": invalid JSON (" + e.what() + ")");
  }
}

std::string json_type_name(const json& value) {
  if (value.is_number_integer()) return "an integer";
  if (value.is_number_float()) return "a float";
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return "a boolean";
  if (value.is_array()) return "a list";
  if (value.is_object()) return "an object";
  return "null";
}

}  // namespace mlxrt
