#pragma once
/** The quantization map of an MLX checkpoint, read exactly as mlx-lm reads it. */
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace mlxrt::io {

/** How one module's weight is packed (mlx.core.quantize's group_size / bits / mode). */
struct QuantSpec {
  int group_size = 64;
  int bits = 4;
  std::string mode = "affine";  // affine | mxfp4 | nvfp4 | mxfp8: the spelling MLX's ops take
  bool operator==(const QuantSpec&) const = default;
};

/** Shapes of a saved module's quantized tensors, enough to infer its packing. */
struct SavedQuantTensors {
  int weight_last_dim = 0;   // packed uint32 columns
  int scales_last_dim = 0;
  bool scales_are_uint8 = false;  // only the floating-point modes store uint8 scales
};

/** config.json's "quantization" section (or the legacy quantization_config it maps from):
 * a global {group_size, bits, mode} plus per-module overrides (a dict, or false to keep the
 * module unquantized), keyed by the module's path ("model.layers.0.mlp.down_proj"). */
class QuantizationMap {
 public:
  /** Reads the map from a parsed config.json; `source` names the file in errors. */
  static QuantizationMap from_config(const nlohmann::json& config, const std::string& source);

  bool present() const { return present_; }
  const QuantSpec& global() const { return global_; }

  /** mlx-lm's class predicate for a module at `path` with `in_dims` inputs: an override in the
   * map wins; otherwise the module is quantized iff its `.scales` tensor was saved, with the
   * packing inferred from the saved shapes. Throws UnsupportedError for a packing MLX lacks. */
  std::optional<QuantSpec> for_module(const std::string& path, int in_dims,
                                      const std::optional<SavedQuantTensors>& saved) const;

 private:
  bool present_ = false;
  QuantSpec global_;
  std::map<std::string, std::optional<QuantSpec>> overrides_;  // nullopt = "false"
  std::string source_;
};

/** mlx.nn's defaults when an override omits group_size or bits. */
QuantSpec defaults_for_mode(const std::string& mode);

/** Throws UnsupportedError naming `what` unless MLX can run this packing. */
void validate_quant_spec(const QuantSpec& spec, const std::string& what);

}  // namespace mlxrt::io
