// Port of mlx_lm/models/stablelm.py (mlx-lm 0.32.2): StableLM 2 / 3B. LayerNorms (with bias),
// use_qkv_bias on q/k/v, a plain RoPE over int(partial_rotary_factor * head_dim) dimensions, the
// attention on float32 queries and keys (scale sqrt(1 / head_dim)) cast back to the values'
// dtype, an optional parallel residual (x + attention + MLP, both from input_layernorm), and
// with qk_layernorm one bias-free LayerNorm per head (LayerNormPerHead: the stacked weights times
// layer_norm without affine). Always an untied lm_head; no sanitize, no make_cache.
#include <cmath>

#include <mlx/fast.h>
#include <mlx/ops.h>

#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::stablelm {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int vocab_size, hidden_size, num_attention_heads, num_hidden_layers, num_key_value_heads, intermediate_size;
  double rope_theta;
  bool use_qkv_bias;
  double partial_rotary_factor;
  float layer_norm_eps;
  bool use_parallel_residual = false, qk_layernorm = false;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    const auto& source = config.source();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.vocab_size = f.required<int>("vocab_size");
    a.hidden_size = f.required<int>("hidden_size");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.num_key_value_heads = f.required<int>("num_key_value_heads");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.rope_theta = f.required<double>("rope_theta");
    a.use_qkv_bias = f.required<bool>("use_qkv_bias");
    a.partial_rotary_factor = f.required<double>("partial_rotary_factor");
    a.layer_norm_eps = f.required<float>("layer_norm_eps");
    a.use_parallel_residual = f.value_or<bool>("use_parallel_residual", false);
    a.qk_layernorm = f.value_or<bool>("qk_layernorm", false);
    if (a.num_attention_heads < 1 || a.hidden_size % a.num_attention_heads != 0)
      throw ConfigError(source + ": hidden_size must be divisible by num_attention_heads (got hidden_size " +
                        std::to_string(a.hidden_size) + " and num_attention_heads " +
                        std::to_string(a.num_attention_heads) + ")");
    return a;
  }
};

// LayerNormPerHead: mx.stack of the heads' weights [H, D] times layer_norm(x, None, None, eps).
std::function<mx::array(const mx::array&)> layer_norm_per_head(WeightBinder& w, const std::string& path, int heads,
                                                                int head_dim, float eps) {
  std::vector<mx::array> weights;
  for (int h = 0; h < heads; ++h) weights.push_back(w.take(path + ".norms." + std::to_string(h) + ".weight", {head_dim}));
  return [weights, eps](const mx::array& x) {
    return mx::multiply(mx::stack(weights), mx::fast::layer_norm(x, std::nullopt, std::nullopt, eps));
  };
}

nn::DecoderOptions decoder_options(const ModelArgs& args, WeightBinder& w, const std::string& source) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.layer_norm_eps;
  d.norm_kind = nn::Norm::Kind::layer;
  d.tie_word_embeddings = false;
  const int head_dim = args.hidden_size / args.num_attention_heads;
  const int rope_dims = static_cast<int>(args.partial_rotary_factor * head_dim);
  auto rope = nn::Rope::initialize(rope_dims, args.rope_theta, false, json(), std::nullopt, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, head_dim, args.layer_norm_eps, rope);
    layer.attention.qkv_bias = args.use_qkv_bias;
    layer.attention.scale = static_cast<float>(std::sqrt(1.0 / head_dim));
    layer.attention.sdpa_cast = nn::SdpaCast::queries_keys_f32;
    if (args.qk_layernorm) {
      const auto p = "model.layers." + std::to_string(i) + ".self_attn.";
      layer.attention.qk_norm = nn::QkNorm::custom;
      layer.attention.custom_q_norm =
          layer_norm_per_head(w, p + "q_layernorm", args.num_attention_heads, head_dim, args.layer_norm_eps);
      layer.attention.custom_k_norm =
          layer_norm_per_head(w, p + "k_layernorm", args.num_key_value_heads, head_dim, args.layer_norm_eps);
    }
    layer.norm_kind = nn::Norm::Kind::layer;
    if (args.use_parallel_residual) {
      layer.pre_mlp_norm = "";
      layer.residual = nn::BlockOptions::Residual::parallel_residual_first;
    }
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto args = ModelArgs::from_config(config);
  return std::make_unique<nn::Decoder>(decoder_options(args, weights, config.source()), weights);
}

}  // namespace mlxrt::model::stablelm
