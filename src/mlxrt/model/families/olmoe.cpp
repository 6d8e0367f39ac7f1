// Port of mlx_lm/models/olmoe.py (mlx-lm 0.32.2).
#include "mlxrt/model/families/families.h"

#include "mlxrt/model/nn/moe.h"

namespace mlxrt::model::olmoe {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size, num_experts, num_experts_per_tok;
  bool norm_topk_prob = false;
  std::optional<int> head_dim, max_position_embeddings;
  int num_key_value_heads;
  bool attention_bias = false, mlp_bias = false;
  double rope_theta = 10000;
  bool rope_traditional = false;
  json rope_scaling;
  bool tie_word_embeddings = true;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.hidden_size = f.required<int>("hidden_size");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.rms_norm_eps = f.required<float>("rms_norm_eps");
    a.vocab_size = f.required<int>("vocab_size");
    a.num_experts = f.required<int>("num_experts");
    a.num_experts_per_tok = f.required<int>("num_experts_per_tok");
    a.norm_topk_prob = f.value_or<bool>("norm_topk_prob", false);
    a.head_dim = f.optional<int>("head_dim");
    a.max_position_embeddings = f.optional<int>("max_position_embeddings");
    a.num_key_value_heads = f.value_or<int>("num_key_value_heads", a.num_attention_heads);
    a.attention_bias = f.value_or<bool>("attention_bias", false);
    a.mlp_bias = f.value_or<bool>("mlp_bias", false);
    a.rope_theta = f.value_or<double>("rope_theta", a.rope_theta);
    a.rope_traditional = f.value_or<bool>("rope_traditional", false);
    a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", true);
    if (a.num_attention_heads < 1) throw ConfigError(config.source() + ": 'num_attention_heads' must be positive");
    nn::check_expert_counts(a.num_experts, a.num_experts_per_tok, "num_experts", config.source());
    return a;
  }
};

nn::SparseMoeOptions moe_options(const ModelArgs& a) {
  nn::SparseMoeOptions o;
  o.hidden_size = a.hidden_size;
  o.expert_hidden = a.intermediate_size;
  o.num_experts = a.num_experts;
  o.top_k = a.num_experts_per_tok;
  o.order = nn::RouterOrder::softmax_then_top_k;
  o.how = nn::TopK::negated_head;
  o.norm_topk_prob = a.norm_topk_prob;
  o.expert_bias = a.mlp_bias;
  o.flatten_tokens = true;
  return o;
}

// olmoe.py's Model is llama's skeleton with optional attention biases, RMSNorms over the whole
// query and key projections (before the split into heads) and a sparse MoE block as its MLP; no
// make_cache.
nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.rms_norm_eps;
  d.tie_word_embeddings = args.tie_word_embeddings;
  // `args.head_dim or hidden_size // n_heads`: a head_dim of 0 falls back too.
  const int head_dim =
      args.head_dim && *args.head_dim ? *args.head_dim : args.hidden_size / args.num_attention_heads;
  auto rope = nn::Rope::initialize(head_dim, args.rope_theta, args.rope_traditional, args.rope_scaling,
                                   args.max_position_embeddings, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, head_dim, args.rms_norm_eps, rope);
    layer.attention.qkv_bias = args.attention_bias;
    layer.attention.o_bias = args.attention_bias;
    layer.attention.qk_norm = nn::QkNorm::projection;
    layer.mlp = nn::sparse_moe_mlp(moe_options(args));
    d.layers.push_back(std::move(layer));
  }
  return d;
}

// sanitize(): experts saved one by one (experts.N.{up,down,gate}_proj) are stacked into switch_mlp,
// quantized tensors included, when layer 0 holds them so. A tied head's saved lm_head.weight is
// not dropped (olmoe.py's sanitize keeps it, and strict loading then refuses it).
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

}  // namespace mlxrt::model::olmoe
