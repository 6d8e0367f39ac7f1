// Port of mlx_lm/models/qwen2_moe.py (mlx-lm 0.32.2).
#include "mlxrt/model/families/families.h"

#include "mlxrt/model/nn/moe.h"

namespace mlxrt::model::qwen2_moe {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads, num_experts_per_tok, num_experts;
  int moe_intermediate_size, shared_expert_intermediate_size;
  float rms_norm_eps;
  int vocab_size, num_key_value_heads;
  double rope_theta = 1000000;
  bool rope_traditional = false;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.hidden_size = f.required<int>("hidden_size");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.num_experts_per_tok = f.required<int>("num_experts_per_tok");
    a.num_experts = f.required<int>("num_experts");
    a.moe_intermediate_size = f.required<int>("moe_intermediate_size");
    a.shared_expert_intermediate_size = f.required<int>("shared_expert_intermediate_size");
    a.rms_norm_eps = f.required<float>("rms_norm_eps");
    a.vocab_size = f.required<int>("vocab_size");
    a.num_key_value_heads = f.value_or<int>("num_key_value_heads", a.num_attention_heads);
    a.rope_theta = f.value_or<double>("rope_theta", a.rope_theta);
    a.rope_traditional = f.value_or<bool>("rope_traditional", false);
    // __post_init__ checks rope_scaling although the model builds a plain nn.RoPE.
    if (f.has("rope_scaling") && !(f.raw()["rope_scaling"].is_object() && f.raw()["rope_scaling"].empty())) {
      const json& rs = f.raw()["rope_scaling"];
      if (!rs.is_object() || !rs.contains("factor") || !rs.contains("type"))
        throw ConfigError(config.source() + ": rope_scaling must contain keys {'factor', 'type'}");
      if (rs["type"] != "linear")
        throw UnsupportedError(config.source() + ": rope_scaling 'type' currently only supports 'linear'");
    }
    if (a.num_attention_heads < 1 || a.hidden_size % a.num_attention_heads != 0)
      throw ConfigError(config.source() + ": 'num_attention_heads' must divide 'hidden_size'");
    nn::check_expert_counts(a.num_experts, a.num_experts_per_tok, "num_experts", config.source());
    return a;
  }
};

nn::SparseMoeOptions moe_options(const ModelArgs& a) {
  nn::SparseMoeOptions o;
  o.hidden_size = a.hidden_size;
  o.expert_hidden = a.moe_intermediate_size;
  o.num_experts = a.num_experts;
  o.top_k = a.num_experts_per_tok;
  o.order = nn::RouterOrder::softmax_then_top_k;
  o.how = nn::TopK::negated_head;
  o.shared_expert_hidden = a.shared_expert_intermediate_size;
  return o;
}

// qwen2_moe.py's Model is qwen2's skeleton (biases on q/k/v, head_dim = hidden_size / heads) whose
// MLP is a sparse MoE block with a gated shared expert; its lm_head is built and used whatever
// tie_word_embeddings says; no make_cache.
nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.rms_norm_eps;
  d.tie_word_embeddings = false;
  const int head_dim = args.hidden_size / args.num_attention_heads;
  // qwen2_moe.py builds a plain nn.RoPE (rope_scaling is checked, not used).
  auto rope = nn::Rope::initialize(head_dim, args.rope_theta, args.rope_traditional, json(), std::nullopt, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, head_dim, args.rms_norm_eps, rope);
    layer.attention.qkv_bias = true;
    layer.mlp = nn::sparse_moe_mlp(moe_options(args));
    d.layers.push_back(std::move(layer));
  }
  return d;
}

// sanitize(): experts saved one by one (experts.N.{up,down,gate}_proj) are stacked into switch_mlp,
// quantized tensors included, when layer 0 holds them so.
void sanitize(const ModelArgs& args, WeightBinder& w) {
  if (!w.has("model.layers.0.mlp.experts.0.up_proj.weight")) return;
  for (int l = 0; l < args.num_hidden_layers; ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".mlp";
    w.stack_experts(prefix + ".experts", prefix + ".switch_mlp", args.num_experts,
                    {{"up_proj", "up_proj"}, {"down_proj", "down_proj"}, {"gate_proj", "gate_proj"}},
                    {"weight", "scales", "biases"});
  }
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto args = ModelArgs::from_config(config);
  sanitize(args, weights);
  return std::make_unique<nn::Decoder>(decoder_options(args, config.source()), weights);
}

}  // namespace mlxrt::model::qwen2_moe
