#pragma once
/** Gemma 4's experts as mlx-lm's gemma4_text holds them. llama.cpp's converter keeps HF's fused
 * experts.gate_up_proj ([experts, 2 x width, hidden], the gate's rows first) as ffn_gate_up_exps;
 * mlx-lm's sanitize splits it into switch_glu.gate_proj and switch_glu.up_proj, and so does this,
 * on the converted arrays of one shard (a quantized tensor's weight, scales and biases alike: the
 * split is along rows, which quantization groups never cross). */
#include <string>
#include <unordered_map>

#include <mlx/array.h>

namespace mlxrt::convert {

/** The checkpoint name plan_tensor gives the fused tensor's module ("...experts.gate_up_proj"). */
inline constexpr const char* kGemma4FusedExperts = ".experts.gate_up_proj";

/** Replaces every "<layer>.experts.gate_up_proj.{weight,scales,biases}" in `arrays` by its gate
 * and up halves under "<layer>.experts.switch_glu.{gate_proj,up_proj}.*". */
void split_gemma4_gate_up(std::unordered_map<std::string, mlx::core::array>& arrays);

/** The module names the fused module becomes, for the quantization section. */
std::pair<std::string, std::string> gemma4_gate_up_modules(const std::string& fused_module);

}  // namespace mlxrt::convert
