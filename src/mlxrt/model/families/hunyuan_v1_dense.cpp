// Port of mlx_lm/models/hunyuan_v1_dense.py (mlx-lm 0.32.2): Hunyuan dense. llama's skeleton
// (attention_bias on q/k/v/o) with its own DynamicNTKAlphaRoPE: frequencies
// (rope_theta * alpha ** (d / (d - 2))) ** (arange(0, d, 2) / d), alpha from rope_scaling; and,
// with use_qk_norm, per-head RMSNorms (query_layernorm, key_layernorm) applied after RoPE.
#include <cmath>

#include <mlx/ops.h>

#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::hunyuan_v1_dense {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int vocab_size, hidden_size, num_hidden_layers, intermediate_size, num_attention_heads, num_key_value_heads;
  float rms_norm_eps;
  double rope_theta = 10000;
  int max_position_embeddings = 32768;
  bool attention_bias = false, use_qk_norm = true;
  json rope_scaling;
  bool tie_word_embeddings = false;
  std::optional<int> head_dim;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    const auto& source = config.source();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.vocab_size = f.required<int>("vocab_size");
    a.hidden_size = f.required<int>("hidden_size");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.num_key_value_heads = f.required<int>("num_key_value_heads");
    a.rms_norm_eps = f.required<float>("rms_norm_eps");
    a.rope_theta = f.value_or<double>("rope_theta", 10000);
    a.max_position_embeddings = f.value_or<int>("max_position_embeddings", 32768);
    a.attention_bias = f.value_or<bool>("attention_bias", false);
    a.use_qk_norm = f.value_or<bool>("use_qk_norm", true);
    a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", false);
    a.head_dim = f.optional<int>("head_dim");
    if (a.num_attention_heads < 1) throw ConfigError(source + ": num_attention_heads must be a positive integer");
    // __post_init__: a non-empty rope_scaling must name alpha, factor and type.
    const auto& s = a.rope_scaling;
    const bool truthy = !s.is_null() && !(s.is_object() && s.empty()) && !(s.is_boolean() && !s.get<bool>());
    if (truthy && !(s.is_object() && s.contains("alpha") && s.contains("factor") && s.contains("type")))
      throw ConfigError(source + ": rope_scaling must contain keys {'alpha', 'factor', 'type'}");
    if (truthy && !s["alpha"].is_number()) throw ConfigError(source + ": rope_scaling.alpha must be a number");
    return a;
  }

  int dims() const { return head_dim ? *head_dim : hidden_size / num_attention_heads; }
};

// DynamicNTKAlphaRoPE(dims, base, scaling_alpha): the base in Python floats, then
// base ** (mx.arange(0, dims, 2) / dims) in float32.
nn::Rope alpha_rope(const ModelArgs& args) {
  const int dims = args.dims();
  double alpha = 1.0;
  if (args.rope_scaling.is_object() && args.rope_scaling.contains("alpha"))
    alpha = args.rope_scaling["alpha"].get<double>();
  const double base = args.rope_theta * std::pow(alpha, static_cast<double>(dims) / (dims - 2));
  auto exponents = mx::divide(mx::arange(0, dims, 2), mx::array(dims));
  auto freqs = mx::power(mx::array(static_cast<float>(base)), exponents);
  return nn::Rope::with_freqs(dims, false, freqs, "dynamic_ntk_alpha");
}

nn::DecoderOptions decoder_options(const ModelArgs& args) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.rms_norm_eps;
  d.tie_word_embeddings = args.tie_word_embeddings;
  auto rope = alpha_rope(args);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, args.dims(), args.rms_norm_eps, rope);
    layer.attention.qkv_bias = layer.attention.o_bias = args.attention_bias;
    if (args.use_qk_norm) {
      layer.attention.qk_norm = nn::QkNorm::per_head;
      layer.attention.qk_norm_after_rope = true;
      layer.attention.q_norm = "query_layernorm";
      layer.attention.k_norm = "key_layernorm";
    }
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto args = ModelArgs::from_config(config);
  if (args.tie_word_embeddings) weights.discard("lm_head.weight");  // sanitize()
  return std::make_unique<nn::Decoder>(decoder_options(args), weights);
}

}  // namespace mlxrt::model::hunyuan_v1_dense
