#include "mlxrt/io/model_config.h"

namespace fs = std::filesystem;

namespace mlxrt::io {

namespace {

// A token id: a non-negative integer that fits int32 (a larger one would wrap to another token).
int32_t eos_id(const json& e, const std::string& where) {
  if (!e.is_number_integer()) throw ConfigError(where + ": eos_token_id must hold integers");
  if (e.is_number_unsigned() ? e.get<unsigned long long>() > 2147483647ULL
                             : (e.get<long long>() < 0 || e.get<long long>() > 2147483647LL))
    throw ConfigError(where + ": eos_token_id " + e.dump() + " is not a token id (0..2147483647)");
  return static_cast<int32_t>(e.get<long long>());
}

std::vector<int32_t> eos_list(const json& v, const std::string& where) {
  std::vector<int32_t> ids;
  if (v.is_number_integer()) {
    ids.push_back(eos_id(v, where));
  } else if (v.is_array()) {
    for (const auto& e : v) ids.push_back(eos_id(e, where));
  } else if (!v.is_null()) {
    throw ConfigError(where + ": eos_token_id must be an integer or a list of integers");
  }
  return ids;
}

// Python truthiness of generation_config's eos_token_id: 0, [] and null do not replace.
bool truthy(const json& v) {
  if (v.is_null()) return false;
  if (v.is_number_integer()) return v.get<long long>() != 0;
  if (v.is_array() || v.is_object() || v.is_string()) return !v.empty();
  if (v.is_boolean()) return v.get<bool>();
  return true;
}

}  // namespace

ModelConfig ModelConfig::load(const fs::path& dir) {
  ModelConfig c;
  c.dir_ = dir;
  c.source_ = (dir / "config.json").string();
  c.raw_ = read_json_file(dir / "config.json");
  if (!c.raw_.is_object()) throw ConfigError(c.source_ + ": expected a JSON object");
  c.model_type_ = c.fields().required<std::string>("model_type");

  fs::path gen = dir / "generation_config.json";
  if (fs::exists(gen)) {
    // mlx-lm ignores an unparsable generation_config.json; so do we.
    try {
      json g = json::parse(read_text_file(gen));
      if (g.is_object() && g.contains("eos_token_id") && truthy(g["eos_token_id"]))
        c.raw_["eos_token_id"] = g["eos_token_id"];
    } catch (const json::exception&) {
    }
  }
  if (c.raw_.contains("eos_token_id")) c.eos_token_ids_ = eos_list(c.raw_["eos_token_id"], c.source_);
  c.quantization_ = QuantizationMap::from_config(c.raw_, c.source_);
  return c;
}

}  // namespace mlxrt::io
