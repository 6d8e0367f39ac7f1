#include "mlxrt/io/quantization.h"

#include <set>

#include "mlxrt/util/errors.h"

namespace mlxrt::io {

using nlohmann::json;

QuantSpec defaults_for_mode(const std::string& mode) {
  if (mode == "affine") return {64, 4, mode};
  if (mode == "mxfp4") return {32, 4, mode};
  if (mode == "nvfp4") return {16, 4, mode};
  if (mode == "mxfp8") return {32, 8, mode};
  throw UnsupportedError("quantization mode '" + mode +
                         "' is not supported (expected affine, mxfp4, nvfp4 or mxfp8)");
}

void validate_quant_spec(const QuantSpec& spec, const std::string& what) {
  if (spec.mode == "affine") {
    static const std::set<int> bits = {2, 3, 4, 5, 6, 8};
    static const std::set<int> groups = {32, 64, 128};
    if (!bits.count(spec.bits))
      throw UnsupportedError(what + ": unsupported quantization bits " + std::to_string(spec.bits) +
                             " (affine supports 2, 3, 4, 5, 6, 8)");
    if (!groups.count(spec.group_size))
      throw UnsupportedError(what + ": unsupported quantization group size " +
                             std::to_string(spec.group_size) + " (affine supports 32, 64, 128)");
    return;
  }
  QuantSpec want = defaults_for_mode(spec.mode);
  if (spec.bits != want.bits || spec.group_size != want.group_size)
    throw UnsupportedError(what + ": mode " + spec.mode + " needs bits " + std::to_string(want.bits) +
                           " and group size " + std::to_string(want.group_size) + ", got bits " +
                           std::to_string(spec.bits) + " and group size " +
                           std::to_string(spec.group_size));
}

namespace {

QuantSpec parse_spec(const json& j, const std::string& where, bool fill_from_mode_defaults) {
  if (!j.is_object()) throw ConfigError(where + " must be an object");
  std::string mode = "affine";
  if (j.contains("mode") && !j["mode"].is_null()) {
    if (!j["mode"].is_string()) throw ConfigError(where + ".mode must be a string");
    mode = j["mode"].get<std::string>();
  }
  QuantSpec spec = defaults_for_mode(mode);
  auto read_int = [&](const char* key, int& out) {
    if (!j.contains(key) || j[key].is_null()) {
      if (!fill_from_mode_defaults) throw ConfigError(where + ": missing required key '" + key + "'");
      return;
    }
    if (!j[key].is_number_integer()) throw ConfigError(where + "." + key + " must be an integer");
    out = j[key].get<int>();
  };
  read_int("group_size", spec.group_size);
  read_int("bits", spec.bits);
  return spec;
}

}  // namespace

QuantizationMap QuantizationMap::from_config(const json& config, const std::string& source) {
  QuantizationMap map;
  map.source_ = source;
  json q;
  if (config.contains("quantization") && !config["quantization"].is_null()) {
    q = config["quantization"];
  } else if (config.contains("quantization_config") && config["quantization_config"].is_object()) {
    const json& legacy = config["quantization_config"];
    // mlx-lm maps a few legacy quant_method values onto MLX modes; the others need weight
    // transforms this engine does not have.
    std::string method = legacy.value("quant_method", std::string());
    if (method.empty()) {
      q = legacy;  // mlx_lm.convert writes the same map under both names
    } else if (method == "mxfp4") {
      q = {{"group_size", 32}, {"bits", 4}, {"mode", "mxfp4"}};
    } else if (method == "mxfp8") {
      q = {{"group_size", 32}, {"bits", 8}, {"mode", "mxfp8"}};
    } else {
      throw UnsupportedError(source + ": quantization_config.quant_method '" + method +
                             "' is not supported (supported: MLX affine/mxfp4/nvfp4/mxfp8 checkpoints)");
    }
  } else {
    return map;
  }
  if (!q.is_object()) throw ConfigError(source + ": 'quantization' must be an object");
  map.present_ = true;
  map.global_ = parse_spec(q, source + ": quantization", false);
  for (auto it = q.begin(); it != q.end(); ++it) {
    const std::string& key = it.key();
    if (key == "group_size" || key == "bits" || key == "mode" || key == "quant_method") continue;
    if (it->is_boolean()) {
      if (it->get<bool>())
        throw ConfigError(source + ": quantization." + key + " may be false or an object, not true");
      map.overrides_[key] = std::nullopt;
    } else if (it->is_object()) {
      map.overrides_[key] = parse_spec(*it, source + ": quantization." + key, true);
    }
    // Other scalar keys (e.g. tool metadata) are ignored, as mlx-lm never looks them up as paths.
  }
  return map;
}

std::optional<QuantSpec> QuantizationMap::for_module(const std::string& path, int in_dims,
                                                     const std::optional<SavedQuantTensors>& saved) const {
  if (!present_) return std::nullopt;
  if (auto it = overrides_.find(path); it != overrides_.end()) {
    if (it->second) validate_quant_spec(*it->second, source_ + ": quantization." + path);
    return it->second;
  }
  if (!saved) return std::nullopt;
  // infer_quant_config: the saved shapes decide, since the global default can be wrong here.
  if (saved->scales_last_dim <= 0)
    throw UnsupportedError(path + ".scales: cannot infer the quantization of a tensor with an empty last axis");
  QuantSpec spec;
  spec.group_size = in_dims / saved->scales_last_dim;
  spec.bits = (saved->weight_last_dim * 32) / in_dims;
  if (!saved->scales_are_uint8) {
    spec.mode = "affine";
  } else if (spec.bits == 4 && spec.group_size == 16) {
    spec.mode = "nvfp4";
  } else if (spec.bits == 4 && spec.group_size == 32) {
    spec.mode = "mxfp4";
  } else if (spec.bits == 8 && spec.group_size == 32) {
    spec.mode = "mxfp8";
  } else {
    throw UnsupportedError("cannot infer the quantization mode of " + path + ": " +
                           std::to_string(spec.bits) + " bits with group size " +
                           std::to_string(spec.group_size));
  }
  validate_quant_spec(spec, path);
  return spec;
}

}  // namespace mlxrt::io
