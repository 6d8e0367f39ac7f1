// Port of mlx_lm/models/qwen3_moe.py (mlx-lm 0.32.2).
#include "mlxrt/model/families/families.h"

#include <algorithm>

#include "mlxrt/model/nn/moe.h"

namespace mlxrt::model::qwen3_moe {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  int num_experts, num_experts_per_tok, decoder_sparse_step;
  std::vector<int> mlp_only_layers;
  int moe_intermediate_size;
  float rms_norm_eps;
  int vocab_size, num_key_value_heads, head_dim;
  double rope_theta;
  bool tie_word_embeddings;
  int max_position_embeddings;
  bool norm_topk_prob;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.hidden_size = f.required<int>("hidden_size");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.num_experts = f.required<int>("num_experts");
    a.num_experts_per_tok = f.required<int>("num_experts_per_tok");
    a.decoder_sparse_step = f.required<int>("decoder_sparse_step");
    const json& only = f.has("mlp_only_layers") ? f.raw()["mlp_only_layers"] : json();
    if (!only.is_array()) throw ConfigError(config.source() + ": 'mlp_only_layers' must be a list of layer indices");
    for (const auto& i : only) {
      if (!i.is_number_integer())
        throw ConfigError(config.source() + ": 'mlp_only_layers' must be a list of layer indices, got " + i.dump());
      a.mlp_only_layers.push_back(i.get<int>());
    }
    a.moe_intermediate_size = f.required<int>("moe_intermediate_size");
    a.rms_norm_eps = f.required<float>("rms_norm_eps");
    a.vocab_size = f.required<int>("vocab_size");
    a.num_key_value_heads = f.required<int>("num_key_value_heads");
    a.head_dim = f.required<int>("head_dim");
    a.rope_theta = f.required<double>("rope_theta");
    a.tie_word_embeddings = f.required<bool>("tie_word_embeddings");
    a.max_position_embeddings = f.required<int>("max_position_embeddings");
    a.norm_topk_prob = f.required<bool>("norm_topk_prob");
    if (a.num_experts > 0 && a.decoder_sparse_step < 1)
      throw ConfigError(config.source() + ": 'decoder_sparse_step' must be a positive integer, got " +
                        std::to_string(a.decoder_sparse_step));
    if (a.num_experts < 0) throw ConfigError(config.source() + ": 'num_experts' must not be negative");
    if (a.num_experts > 0) nn::check_expert_counts(a.num_experts, a.num_experts_per_tok, "num_experts", config.source());
    return a;
  }

  bool sparse(int layer) const {
    return std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end() &&
           num_experts > 0 && (layer + 1) % decoder_sparse_step == 0;
  }
};

nn::SparseMoeOptions moe_options(const ModelArgs& a) {
  nn::SparseMoeOptions o;
  o.hidden_size = a.hidden_size;
  o.expert_hidden = a.moe_intermediate_size;
  o.num_experts = a.num_experts;
  o.top_k = a.num_experts_per_tok;
  o.order = nn::RouterOrder::softmax_then_top_k;
  o.how = nn::TopK::partition_tail;
  o.norm_topk_prob = a.norm_topk_prob;
  o.cast_to_input_dtype = true;
  return o;
}

// qwen3_moe.py's Model is qwen3's skeleton (per-head q/k RMSNorms, no biases) whose MLP is a
// sparse MoE block on the layers `sparse()` names and a dense SwiGLU MLP on the others; no make_cache.
nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source, int shards) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.rms_norm_eps;
  d.tie_word_embeddings = args.tie_word_embeddings;
  // qwen3_moe.py builds a plain nn.RoPE: rope_scaling is read but not used.
  auto rope = nn::Rope::initialize(args.head_dim, args.rope_theta, false, json(), std::nullopt, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, args.head_dim, args.rms_norm_eps, rope);
    layer.attention.qk_norm = nn::QkNorm::per_head;
    if (args.sparse(i)) {
      auto moe = moe_options(args);
      moe.sharded = shards > 1;
      layer.mlp = nn::sparse_moe_mlp(moe);
    }
    d.layers.push_back(std::move(layer));
  }
  // shard(): the attention and the dense MLPs as llama's; the experts split their hidden units.
  if (shards > 1) {
    nn::shard_like_llama(d.layers, shards, source);
    if (args.num_experts > 0 && args.moe_intermediate_size % shards != 0)
      throw ConfigError(source + ": 'moe_intermediate_size' is " + std::to_string(args.moe_intermediate_size) +
                        ", which does not divide across " + std::to_string(shards) + " ranks (tensor parallel)");
  }
  return d;
}

// sanitize(): a tied head drops lm_head.weight; experts saved one by one (experts.N.*_proj.weight)
// are stacked into switch_mlp, for the layers that hold them.
void sanitize(const ModelArgs& args, WeightBinder& w) {
  if (args.tie_word_embeddings) w.discard("lm_head.weight");
  for (int l = 0; l < args.num_hidden_layers; ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".mlp";
    if (!w.has(prefix + ".experts.0.up_proj.weight")) continue;
    w.stack_experts(prefix + ".experts", prefix + ".switch_mlp", args.num_experts,
                    {{"up_proj", "up_proj"}, {"down_proj", "down_proj"}, {"gate_proj", "gate_proj"}}, {"weight"});
  }
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto args = ModelArgs::from_config(config);
  sanitize(args, weights);
  const auto* group = weights.tensor_group();
  return std::make_unique<nn::Decoder>(decoder_options(args, config.source(), group ? group->size() : 1), weights);
}

}  // namespace mlxrt::model::qwen3_moe
