#include "mlxrt/convert/gguf_gemma4_experts.h"

#include <mlx/ops.h>

#include "mlxrt/util/errors.h"

namespace mlxrt::convert {

namespace mx = mlx::core;

std::pair<std::string, std::string> gemma4_gate_up_modules(const std::string& fused_module) {
  const std::string layer = fused_module.substr(0, fused_module.size() - std::string(kGemma4FusedExperts).size());
  return {layer + ".experts.switch_glu.gate_proj", layer + ".experts.switch_glu.up_proj"};
}

void split_gemma4_gate_up(std::unordered_map<std::string, mx::array>& arrays) {
  std::vector<std::string> fused;
  for (const auto& [name, _] : arrays)
    if (name.find(kGemma4FusedExperts) != std::string::npos) fused.push_back(name);
  for (const auto& name : fused) {
    const size_t at = name.rfind('.');
    const auto [gate, up] = gemma4_gate_up_modules(name.substr(0, at));
    const std::string part = name.substr(at);  // ".weight", ".scales" or ".biases"
    mx::array v = arrays.at(name);
    if (v.ndim() != 3 || v.shape(1) % 2 != 0)
      throw WeightsError(name + ": the experts' fused gate and up projections must be [experts, 2 x width, hidden]");
    // mlx-lm's sanitize: mx.split(v, 2, axis=-2), each half made contiguous.
    auto halves = mx::split(v, 2, -2);
    arrays.erase(name);
    arrays.emplace(gate + part, mx::contiguous(halves[0]));
    arrays.emplace(up + part, mx::contiguous(halves[1]));
  }
}

}  // namespace mlxrt::convert
