// Port of mlx_lm/models/mixtral.py (mlx-lm 0.32.2).
#include "mlxrt/model/families/families.h"

#include "mlxrt/model/nn/moe.h"

namespace mlxrt::model::mixtral {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int vocab_size = 32000, hidden_size = 4096, intermediate_size = 14336, num_hidden_layers = 32;
  int num_attention_heads = 32, num_experts_per_tok = 2, num_key_value_heads = 8, num_local_experts = 8;
  float rms_norm_eps = 1e-5f;
  double rope_theta = 1e6;
  bool rope_traditional = false;
  bool tie_word_embeddings = false;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.vocab_size = f.value_or<int>("vocab_size", a.vocab_size);
    a.hidden_size = f.value_or<int>("hidden_size", a.hidden_size);
    a.intermediate_size = f.value_or<int>("intermediate_size", a.intermediate_size);
    a.num_hidden_layers = f.value_or<int>("num_hidden_layers", a.num_hidden_layers);
    a.num_attention_heads = f.value_or<int>("num_attention_heads", a.num_attention_heads);
    a.num_experts_per_tok = f.value_or<int>("num_experts_per_tok", a.num_experts_per_tok);
    // An explicit null means "as many as the query heads" (__post_init__); absent means the default 8.
    const bool kv_null = f.raw().contains("num_key_value_heads") && f.raw()["num_key_value_heads"].is_null();
    a.num_key_value_heads = kv_null ? a.num_attention_heads : f.value_or<int>("num_key_value_heads", 8);
    a.num_local_experts = f.value_or<int>("num_local_experts", a.num_local_experts);
    a.rms_norm_eps = f.value_or<float>("rms_norm_eps", a.rms_norm_eps);
    a.rope_theta = f.value_or<double>("rope_theta", a.rope_theta);
    a.rope_traditional = f.value_or<bool>("rope_traditional", false);
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", false);
    if (a.num_attention_heads < 1 || a.hidden_size % a.num_attention_heads != 0)
      throw ConfigError(config.source() + ": 'num_attention_heads' must divide 'hidden_size'");
    nn::check_expert_counts(a.num_local_experts, a.num_experts_per_tok, "num_local_experts", config.source());
    return a;
  }
};

nn::SparseMoeOptions moe_options(const ModelArgs& a) {
  nn::SparseMoeOptions o;
  o.hidden_size = a.hidden_size;
  o.expert_hidden = a.intermediate_size;
  o.num_experts = a.num_local_experts;
  o.top_k = a.num_experts_per_tok;
  o.order = nn::RouterOrder::top_k_then_softmax;
  o.how = nn::TopK::negated_head;
  return o;
}

// mixtral.py's Model is llama's skeleton (no biases, head_dim = hidden_size / heads) whose MLP is
// block_sparse_moe: a router and a SwitchGLU; no make_cache.
nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.rms_norm_eps;
  d.tie_word_embeddings = args.tie_word_embeddings;
  const int head_dim = args.hidden_size / args.num_attention_heads;
  // mixtral.py builds a plain nn.RoPE (rope_scaling is not used).
  auto rope = nn::Rope::initialize(head_dim, args.rope_theta, args.rope_traditional, json(), std::nullopt, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, head_dim, args.rms_norm_eps, rope);
    layer.mlp_name = "block_sparse_moe";
    layer.mlp = nn::sparse_moe_mlp(moe_options(args));
    d.layers.push_back(std::move(layer));
  }
  return d;
}

// sanitize(): a tied head drops lm_head.weight; experts saved one by one (experts.N.w1/w2/w3) are
// stacked into switch_mlp's gate_proj/down_proj/up_proj, quantized tensors included.
void sanitize(const ModelArgs& args, WeightBinder& w) {
  if (args.tie_word_embeddings) w.discard("lm_head.weight");
  if (!w.has("model.layers.0.block_sparse_moe.experts.0.w1.weight")) return;
  for (int l = 0; l < args.num_hidden_layers; ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".block_sparse_moe";
    w.stack_experts(prefix + ".experts", prefix + ".switch_mlp", args.num_local_experts,
                    {{"w1", "gate_proj"}, {"w2", "down_proj"}, {"w3", "up_proj"}}, {"weight", "scales", "biases"});
  }
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto args = ModelArgs::from_config(config);
  sanitize(args, weights);
  return std::make_unique<nn::Decoder>(decoder_options(args, config.source()), weights);
}

}  // namespace mlxrt::model::mixtral
