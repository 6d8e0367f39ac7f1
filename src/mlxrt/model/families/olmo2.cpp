// Port of mlx_lm/models/olmo2.py (mlx-lm 0.32.2): llama's arguments, RMSNorms over the whole query
// and key projections (before the heads are split), and post-norms: each sublayer's output is
// normalised before its residual add (post_attention_layernorm, post_feedforward_layernorm), with
// no norm on the sublayers' inputs. No make_cache; sanitize drops only rotary frequencies.
#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::olmo2 {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size;
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
    a.head_dim = f.optional<int>("head_dim");
    a.max_position_embeddings = f.optional<int>("max_position_embeddings");
    a.num_key_value_heads = f.value_or<int>("num_key_value_heads", a.num_attention_heads);
    a.attention_bias = f.value_or<bool>("attention_bias", false);
    a.mlp_bias = f.value_or<bool>("mlp_bias", false);
    a.rope_theta = f.value_or<double>("rope_theta", 10000);
    a.rope_traditional = f.value_or<bool>("rope_traditional", false);
    a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", true);
    if (a.num_attention_heads < 1)
      throw ConfigError(config.source() + ": num_attention_heads must be a positive integer");
    if (a.vocab_size < 1) throw ConfigError(config.source() + ": vocab_size must be positive");
    return a;
  }
};

nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.rms_norm_eps;
  d.tie_word_embeddings = args.tie_word_embeddings;
  const int head_dim = args.head_dim.value_or(0) ? *args.head_dim : args.hidden_size / args.num_attention_heads;
  auto rope = nn::Rope::initialize(head_dim, args.rope_theta, args.rope_traditional, args.rope_scaling,
                                   args.max_position_embeddings, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, head_dim, args.rms_norm_eps, rope);
    layer.attention.qkv_bias = layer.attention.o_bias = args.attention_bias;
    layer.attention.qk_norm = nn::QkNorm::projection;
    layer.mlp.bias = args.mlp_bias;
    layer.input_norm = layer.pre_mlp_norm = "";
    layer.post_attention_norm = "post_attention_layernorm";
    layer.post_mlp_norm = "post_feedforward_layernorm";
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto args = ModelArgs::from_config(config);
  weights.discard_containing("self_attn.rotary_emb.inv_freq");  // sanitize()
  return std::make_unique<nn::Decoder>(decoder_options(args, config.source()), weights);
}

}  // namespace mlxrt::model::olmo2
