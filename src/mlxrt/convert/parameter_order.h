#pragma once
/** The order of a model's flattened parameters as mlx-lm's module classes declare them
 * (tree_flatten(model.parameters())): mlx_lm.convert saves tensors in that order, so the bytes of
 * its safetensors files (and where its shards split) follow from it. */
#include <string>
#include <utility>
#include <vector>

#include "mlxrt/convert/mlx_parameters.h"

namespace mlxrt::convert {

/** `bound`, in the order a family took its tensors, rearranged into mlx-lm's declaration order. */
std::vector<Parameter> python_parameter_order(const std::string& model_type,
                                              std::vector<std::pair<std::string, mx::array>> bound);

}  // namespace mlxrt::convert
