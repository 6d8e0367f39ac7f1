// Port of mlx_lm/models/qwen3_5_moe.py (mlx-lm 0.32.2): Qwen3.5's MoE checkpoints run qwen3_5.py's
// model (a sparse block on every layer once num_experts > 0); only sanitize differs.
#include <string>
#include <vector>

#include <mlx/ops.h>

#include "mlxrt/model/families/qwen3_5.h"

namespace mlxrt::model::qwen3_5_moe {

namespace {

// experts.gate_up_proj [E, 2 * I, H] -> switch_mlp.gate_proj / up_proj (its halves along -2), and
// experts.down_proj -> switch_mlp.down_proj.weight, on the names Model.sanitize has already moved.
// The MTP head's layer (--mtp) is split alike.
void split_fused_experts(WeightBinder& w, int num_layers) {
  std::vector<std::string> prefixes;
  for (int l = 0; l < num_layers; ++l) prefixes.push_back("language_model.model.layers." + std::to_string(l) + ".mlp");
  prefixes.push_back("language_model.mtp.layers.0.mlp");
  for (const auto& prefix : prefixes) {
    const std::string gate_up = prefix + ".experts.gate_up_proj";
    if (!w.has(gate_up)) continue;
    const mx::array fused = w.remaining().at(gate_up);
    w.discard(gate_up);
    const int rows = fused.shape(-2), mid = rows / 2;
    mx::Shape start(fused.ndim(), 0), stop = fused.shape();
    stop[fused.ndim() - 2] = mid;
    w.replace(prefix + ".switch_mlp.gate_proj.weight", mx::slice(fused, start, stop));
    start[fused.ndim() - 2] = mid;
    stop[fused.ndim() - 2] = rows;
    w.replace(prefix + ".switch_mlp.up_proj.weight", mx::slice(fused, start, stop));
    w.rename(prefix + ".experts.down_proj", prefix + ".switch_mlp.down_proj.weight");
  }
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  auto args = qwen3_5::model_args(config);
  const int layers = args.num_hidden_layers;
  return qwen3_5::build_with(config, weights, std::move(args),
                             [layers](WeightBinder& w) { split_fused_experts(w, layers); });
}

}  // namespace mlxrt::model::qwen3_5_moe
