#pragma once
/** Which modules `convert -q` quantizes, and how: mlx_lm.convert's quantize_model predicate with
 * the model's own quant_predicate (8-bit routers and gates of the MoE families) or one of the
 * mixed-bit recipes (`--quant-predicate mixed_3_6` ...). */
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlxrt/convert/mlx_parameters.h"

namespace mlxrt::convert {

/** The recipes `--quant-predicate` accepts, as mlx_lm.convert's QUANT_RECIPES. */
const std::vector<std::string>& quant_recipes();

struct QuantRequest {
  std::optional<int> group_size, bits;  // --q-group-size / --q-bits (nullopt: the mode's default)
  std::string mode = "affine";
  std::optional<std::string> recipe;    // --quant-predicate
};

/** quantize_model's global parameters: the mode's default group size and bits where not given. */
io::QuantSpec global_quant_spec(const QuantRequest& request);

/** The predicate quantize_model hands nn.quantize for this model. `fine_grained`: the checkpoint
 * was already (partly) quantized, so every newly quantized module is recorded in the config. */
MlxParameters::Predicate quant_predicate(const QuantRequest& request, const nlohmann::json& config,
                                         const MlxParameters& parameters, bool fine_grained);

}  // namespace mlxrt::convert
