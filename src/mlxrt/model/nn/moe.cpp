// Port of the sparse MoE blocks of mlx_lm/models/qwen3_moe.py, qwen2_moe.py, olmoe.py, mixtral.py and
// gpt_oss.py (mlx-lm 0.32.2): their routers op for op, the shared combine, qwen2_moe's shared expert.
#include "mlxrt/model/nn/moe.h"

#include <stdexcept>

#include <mlx/distributed/ops.h>
#include <mlx/ops.h>

#include "mlxrt/model/nn/activations.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::model::nn {

mx::array top_k_indices(const mx::array& x, int k, TopK how) {
  const int n = x.shape(-1);
  mx::Shape start(x.ndim(), 0), stop = x.shape();
  if (how == TopK::partition_tail) {
    // argpartition(x, kth=-k)[..., -k:]
    auto part = mx::argpartition(x, -k, -1);
    start.back() = n - k;
    return mx::slice(part, start, stop);
  }
  // argpartition(-x, kth=k-1)[..., :k]
  auto part = mx::argpartition(mx::negative(x), k - 1, -1);
  stop.back() = k;
  return mx::slice(part, start, stop);
}

Routing route(const mx::array& logits, int k, RouterOrder order, TopK how, bool norm_topk_prob) {
  if (order == RouterOrder::top_k_then_softmax) {
    auto inds = top_k_indices(logits, k, how);
    auto scores = mx::take_along_axis(logits, inds, -1);
    return {inds, mx::softmax(scores, -1, /*precise=*/true)};
  }
  auto probs = mx::softmax(logits, -1, /*precise=*/true);
  auto inds = top_k_indices(probs, k, how);
  auto scores = mx::take_along_axis(probs, inds, -1);
  if (norm_topk_prob) scores = mx::divide(scores, mx::sum(scores, -1, /*keepdims=*/true));
  return {inds, scores};
}

mx::array combine_experts(const mx::array& y, const mx::array& scores) {
  return mx::sum(mx::multiply(y, mx::expand_dims(scores, -1)), -2);
}

GluMLP GluMLP::load(WeightBinder& w, const std::string& path, int dim, int hidden, bool sharded) {
  const Shard in = sharded ? Shard::all_to_sharded : Shard::none, out = sharded ? Shard::sharded_to_all : Shard::none;
  auto gate = Linear::load_sharded_inplace(w, path + ".gate_proj", dim, hidden, false, in);
  auto down = Linear::load_sharded_inplace(w, path + ".down_proj", hidden, dim, false, out);
  auto up = Linear::load_sharded_inplace(w, path + ".up_proj", dim, hidden, false, in);
  return GluMLP(std::move(gate), std::move(up), std::move(down));
}

mx::array GluMLP::operator()(const mx::array& x) const {
  return down_proj_(swiglu(gate_proj_(x), up_proj_(x)));
}

void check_expert_counts(int num_experts, int num_experts_per_tok, const std::string& experts_field,
                         const std::string& source) {
  if (num_experts < 1)
    throw ConfigError(source + ": '" + experts_field + "' must be a positive number of experts, got " +
                      std::to_string(num_experts));
  if (num_experts_per_tok < 1 || num_experts_per_tok > num_experts)
    throw ConfigError(source + ": 'num_experts_per_tok' is " + std::to_string(num_experts_per_tok) +
                      ", but it must be between 1 and '" + experts_field + "' (" + std::to_string(num_experts) +
                      ")");
}

SparseMoe SparseMoe::load(WeightBinder& w, const std::string& path, const SparseMoeOptions& o) {
  auto gate = Linear::load(w, path + "." + o.gate_name, o.hidden_size, o.num_experts, o.gate_bias);
  auto experts = SwitchGLU::load(w, path + "." + o.experts_name, o.hidden_size, o.expert_hidden, o.num_experts,
                                 o.expert_bias, o.activation, o.top_k);
  std::optional<GluMLP> shared;
  std::optional<Linear> shared_gate;
  if (o.shared_expert_hidden) {
    shared = GluMLP::load(w, path + ".shared_expert", o.hidden_size, *o.shared_expert_hidden, o.sharded);
    shared_gate = Linear::load(w, path + ".shared_expert_gate", o.hidden_size, 1, false);
  }
  SparseMoe block(o, std::move(gate), std::move(experts), std::move(shared), std::move(shared_gate));
  // Streamed experts: the block's router, run on the previous MoE block's input, guesses which of
  // its experts to read ahead (softmax and the other routers' monotone steps keep the logits' top k).
  block.experts_.set_predictor([router = block.gate_, k = o.top_k, how = o.how](const mx::array& hidden) {
    return top_k_indices(router(hidden), k, how);
  });
  if (o.sharded) {
    const auto* group = w.tensor_group();
    if (!group || o.flatten_tokens)
      throw std::logic_error("a sharded SparseMoe needs a tensor group and qwen3_moe's layout: " + path);
    block.experts_.shard(w, path + "." + o.experts_name);
    if (o.divide_down_bias) block.experts_.divide_down_bias(group->size());
    block.sum_over_ = *group;
  }
  return block;
}

mx::array SparseMoe::operator()(const mx::array& x_in) const {
  mx::array x = x_in;
  if (o_.flatten_tokens) x = mx::reshape(x_in, {-1, x_in.shape(-1)});
  auto r = route(gate_(x), o_.top_k, o_.order, o_.how, o_.norm_topk_prob);
  auto y = experts_(x, r.indices);
  auto out = combine_experts(y, r.scores);
  if (o_.cast_to_input_dtype) out = mx::astype(out, y.dtype());
  if (shared_) out = mx::add(out, mx::multiply(mx::sigmoid((*shared_gate_)(x)), (*shared_)(x)));
  // Sharded: the partial sums of the experts (and of the shared expert) added over the group.
  if (sum_over_) out = mx::distributed::all_sum(out, *sum_over_);
  if (o_.flatten_tokens) out = mx::reshape(out, x_in.shape());
  return out;
}

MlpOptions sparse_moe_mlp(const SparseMoeOptions& options) {
  MlpOptions mlp;
  mlp.kind = MlpOptions::Kind::custom;
  mlp.dims = options.hidden_size;
  mlp.custom = [options](WeightBinder& w, const std::string& path) -> MlpOptions::FeedForward {
    return [block = SparseMoe::load(w, path, options)](const mx::array& x) { return block(x); };
  };
  return mlp;
}

}  // namespace mlxrt::model::nn
