#pragma once
/** The sparse mixture-of-experts block the MoE families share: a router (a Linear over the hidden
 * state, softmax and top-k in the family's own op order), a SwitchGLU over the chosen experts,
 * the experts' outputs weighted by their scores and summed, and optionally a shared expert with a
 * sigmoid gate (qwen2_moe). Each family's mlx-lm file spells the router slightly differently; the
 * options below name each spelling, so a family picks its own and the arithmetic stays its. */
#include <optional>
#include <string>

#include <mlx/array.h>

#include "mlxrt/model/nn/decoder.h"
#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/switch_layers.h"
#include "mlxrt/model/nn/weight_binder.h"

namespace mlxrt::model::nn {

namespace mx = mlx::core;

/** How a router takes the k largest of its scores. */
enum class TopK {
  partition_tail,     // mx.argpartition(x, kth=-k)[..., -k:]       (qwen3_moe, gpt_oss)
  negated_head,       // mx.argpartition(-x, kth=k-1)[..., :k]      (mixtral, qwen2_moe, olmoe)
};

/** The order of a router's softmax and top-k. */
enum class RouterOrder {
  softmax_then_top_k,  // probabilities over all experts, the top k of those (qwen3_moe, qwen2_moe, olmoe)
  top_k_then_softmax,  // the top k logits, a softmax over those (mixtral, gpt_oss)
};

/** Indices of the k largest entries of x along the last axis, as `how` spells it. */
mx::array top_k_indices(const mx::array& x, int k, TopK how);

struct Routing {
  mx::array indices;  // [..., k]
  mx::array scores;   // [..., k], the weights of the experts' outputs
};

/** A router over gate logits [..., num_experts]; softmaxes are precise, as everywhere in mlx-lm's
 * MoE files. `norm_topk_prob` divides the top-k probabilities by their sum (softmax first only). */
Routing route(const mx::array& logits, int k, RouterOrder order, TopK how, bool norm_topk_prob = false);

/** (y * scores[..., None]).sum(axis=-2): y [..., k, D] -> [..., D]. */
mx::array combine_experts(const mx::array& y, const mx::array& scores);

/** The dense SwiGLU MLP (gate_proj, up_proj, down_proj; no biases) of the Qwen MoE files. */
class GluMLP {
 public:
  /** `sharded`: shard_inplace over the binder's tensor group (gate/up all-to-sharded, down
   * sharded-to-all, no all_sum: the owner sums), as qwen3_5.py's shard() does the shared expert. */
  static GluMLP load(WeightBinder& w, const std::string& path, int dim, int hidden, bool sharded = false);
  mx::array operator()(const mx::array& x) const;

 private:
  GluMLP(Linear gate, Linear up, Linear down)
      : gate_proj_(std::move(gate)), up_proj_(std::move(up)), down_proj_(std::move(down)) {}
  Linear gate_proj_, up_proj_, down_proj_;
};

struct SparseMoeOptions {
  int hidden_size = 0;
  int expert_hidden = 0;     // each expert's intermediate size
  int num_experts = 0;
  int top_k = 0;             // experts per token
  RouterOrder order = RouterOrder::softmax_then_top_k;
  TopK how = TopK::partition_tail;
  bool norm_topk_prob = false;
  std::string gate_name = "gate";          // the router Linear's module name
  bool gate_bias = false;
  std::string experts_name = "switch_mlp";  // the SwitchGLU's module name
  bool expert_bias = false;
  SwitchActivation activation = SwitchActivation::swiglu;
  bool flatten_tokens = false;  // olmoe routes x.reshape(-1, D) and reshapes back
  bool cast_to_input_dtype = false;  // qwen3_moe's .astype(y.dtype) after the sum
  std::optional<int> shared_expert_hidden;  // qwen2_moe: shared_expert + sigmoid shared_expert_gate
  /** Tensor parallel over the binder's group (qwen3_moe.py's shard()): the experts sharded in place,
   * the router replicated, the block's output summed over the group. With a shared expert
   * (qwen3_5.py's shard()): it is sharded in place too, its gate replicated, and the sum taken
   * after its gated output is added. */
  bool sharded = false;
  /** Sharded: the experts' down-projection bias divided by the group size, as gpt_oss.py's shard()
   * does (each rank adds it before the output is summed). */
  bool divide_down_bias = false;
};

class SparseMoe {
 public:
  /** Binds `path`.<gate_name>, `path`.<experts_name> and, with a shared expert, `path`.shared_expert
   * and `path`.shared_expert_gate. The family checks the counts first (check_expert_counts), naming
   * its own config fields. */
  static SparseMoe load(WeightBinder& w, const std::string& path, const SparseMoeOptions& options);
  mx::array operator()(const mx::array& x) const;

 private:
  SparseMoe(SparseMoeOptions o, Linear gate, SwitchGLU experts, std::optional<GluMLP> shared,
            std::optional<Linear> shared_gate)
      : o_(std::move(o)), gate_(std::move(gate)), experts_(std::move(experts)), shared_(std::move(shared)),
        shared_gate_(std::move(shared_gate)) {}
  SparseMoeOptions o_;
  Linear gate_;
  SwitchGLU experts_;
  std::optional<GluMLP> shared_;
  std::optional<Linear> shared_gate_;
  std::optional<mx::distributed::Group> sum_over_;  // sharded: the group the output is summed over
};

/** The decoder skeleton's MLP slot filled with a SparseMoe bound at the layer's MLP path. */
MlpOptions sparse_moe_mlp(const SparseMoeOptions& options);

/** Checks the expert counts of a config: ConfigError naming the fields and `source` unless
 * 1 <= num_experts_per_tok <= num_experts. */
void check_expert_counts(int num_experts, int num_experts_per_tok, const std::string& experts_field,
                         const std::string& source);

}  // namespace mlxrt::model::nn
