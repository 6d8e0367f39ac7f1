#pragma once
/** A model's parameters as mlx-lm's `convert` handles them: the flattened parameter tree in the
 * module order mlx-lm's classes declare it, and the modules `nn.quantize` may replace. The dtype
 * cast, quantization and dequantization of mlx_lm.convert act on this list op for op. */
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <mlx/array.h>
#include <nlohmann/json.hpp>

#include "mlxrt/io/quantization.h"
#include "mlxrt/model/nn/weight_binder.h"

namespace mlxrt::convert {

namespace mx = mlx::core;

struct Parameter {
  std::string name;
  mx::array value;
};

class MlxParameters {
 public:
  /** `parameters` in tree_flatten(model.parameters()) order; `modules` as the family bound them. */
  MlxParameters(std::vector<Parameter> parameters, std::vector<model::QuantizableModule> modules);

  const std::vector<Parameter>& parameters() const { return parameters_; }

  /** mlx_lm.convert's set_dtype: every floating parameter for which `keep` is false cast to `dtype`. */
  void cast_floating(mx::Dtype dtype, const std::function<bool(const std::string&)>& keep);

  /** What a quant predicate answers for one module: nullopt = leave it; a spec = quantize with
   * it; `recorded` is what the config records for the module (a predicate's dict, or null when
   * the module takes the global parameters). */
  struct Decision {
    io::QuantSpec spec;
    nlohmann::ordered_json recorded;  // null: not recorded per module
  };
  using Predicate = std::function<std::optional<Decision>(const std::string& path, const model::QuantizableModule&,
                                                          const mx::array& weight)>;
  /** nn.quantize over the leaf modules in tree order: each unquantized quantizable module the
   * predicate accepts is replaced by its quantized form (weight, scales[, biases][, bias]).
   * Returns the paths quantized, in that order, with what the predicate answered. */
  std::vector<std::pair<std::string, Decision>> quantize(const Predicate& predicate);

  /** mlx_lm.fuse: each module bound with an adapter's delta replaced by its fuse(): the delta
   * added to the (dequantized) weight, quantized again as it was unless `dequantize`. Returns the
   * number of modules fused. */
  int fuse(bool dequantize);

  /** mlx_lm's dequantize_model: every quantized module back to weight[, bias] (MLX's dequantize). */
  void dequantize();

  /** The paths of the quantizable modules in tree order (e.g. for the mixed recipes' layer index). */
  std::vector<std::string> module_paths() const;
  /** mlx_lm's get_total_parameters: over the leaf modules, a quantized module counts its
   * unpacked weight (weight.size * 32 / bits) and bias; any other its parameters' sizes. */
  uint64_t total_parameters() const;
  uint64_t total_bytes() const;

  /** Drops parameter i's array once it is written (mlx-lm's donate_model), so that a conversion
   * holds one shard at a time. */
  void release(size_t i) { parameters_.at(i).value = mx::array(0.0f); }

 private:
  struct Module {
    model::QuantizableModule info;
    std::optional<io::QuantSpec> spec;  // current packing (nullopt: float)
  };
  // The index of `path`'s block of parameters [first, last) in parameters_.
  std::pair<size_t, size_t> block(const std::string& path) const;

  std::vector<Parameter> parameters_;
  std::vector<Module> modules_;
};

}  // namespace mlxrt::convert
