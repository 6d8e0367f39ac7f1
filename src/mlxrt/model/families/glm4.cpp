// Port of mlx_lm/models/glm4.py (mlx-lm 0.32.2): GLM-4 (0414). Sandwich norms: input_layernorm
// and post_attention_layernorm on the sublayers' inputs, post_self_attn_layernorm and
// post_mlp_layernorm on their outputs; biases on q/k/v only (attention_bias); one fused
// gate_up_proj split in halves; a plain RoPE over int(head_dim * partial_rotary_factor)
// dimensions, traditional by default. Always an untied lm_head; no sanitize, no make_cache.
#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::glm4 {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  bool attention_bias;
  int head_dim;
  float rms_norm_eps;
  int vocab_size, num_key_value_heads;
  double partial_rotary_factor, rope_theta;
  bool rope_traditional = true;
  int max_position_embeddings = 32768;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.hidden_size = f.required<int>("hidden_size");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.attention_bias = f.required<bool>("attention_bias");
    a.head_dim = f.required<int>("head_dim");
    a.rms_norm_eps = f.required<float>("rms_norm_eps");
    a.vocab_size = f.required<int>("vocab_size");
    a.num_key_value_heads = f.required<int>("num_key_value_heads");
    a.partial_rotary_factor = f.required<double>("partial_rotary_factor");
    a.rope_theta = f.required<double>("rope_theta");
    a.rope_traditional = f.value_or<bool>("rope_traditional", true);
    a.max_position_embeddings = f.value_or<int>("max_position_embeddings", 32768);
    return a;
  }
};

nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.rms_norm_eps;
  d.tie_word_embeddings = false;
  // nn.RoPE(dims=int(head_dim * partial_rotary_factor), base, traditional)
  const int rope_dims = static_cast<int>(args.head_dim * args.partial_rotary_factor);
  auto rope = nn::Rope::initialize(rope_dims, args.rope_theta, args.rope_traditional, json(), std::nullopt, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, args.head_dim, args.rms_norm_eps, rope);
    layer.attention.qkv_bias = args.attention_bias;
    layer.mlp.kind = nn::MlpOptions::Kind::fused_swiglu;
    layer.post_attention_norm = "post_self_attn_layernorm";
    layer.post_mlp_norm = "post_mlp_layernorm";
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  return std::make_unique<nn::Decoder>(decoder_options(ModelArgs::from_config(config), config.source()), weights);
}

}  // namespace mlxrt::model::glm4
