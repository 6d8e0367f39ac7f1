// Port of mlx_lm/models/starcoder2.py (mlx-lm 0.32.2): StarCoder2. LayerNorms (with bias) in
// llama's places, biases on q/k/v/o, a plain RoPE, and a plain MLP c_proj(gelu(c_fc(x))) with
// biases. head_dim is hidden_size / num_attention_heads. No sanitize, no make_cache.
#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/activations.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::starcoder2 {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads, num_key_value_heads;
  float norm_epsilon = 1e-5f;
  int vocab_size = 49152;
  double rope_theta = 100000;
  bool tie_word_embeddings = true;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.hidden_size = f.required<int>("hidden_size");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.num_key_value_heads = f.required<int>("num_key_value_heads");
    a.norm_epsilon = f.value_or<float>("norm_epsilon", 1e-5f);
    a.vocab_size = f.value_or<int>("vocab_size", 49152);
    a.rope_theta = f.value_or<double>("rope_theta", 100000);
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", true);
    if (a.num_attention_heads < 1)
      throw ConfigError(config.source() + ": num_attention_heads must be a positive integer");
    return a;
  }
};

nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.norm_epsilon;
  d.norm_kind = nn::Norm::Kind::layer;
  d.tie_word_embeddings = args.tie_word_embeddings;
  const int head_dim = args.hidden_size / args.num_attention_heads;
  auto rope = nn::Rope::initialize(head_dim, args.rope_theta, false, json(), std::nullopt, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, head_dim, args.norm_epsilon, rope);
    layer.attention.qkv_bias = layer.attention.o_bias = true;
    layer.norm_kind = nn::Norm::Kind::layer;
    layer.mlp.kind = nn::MlpOptions::Kind::plain;
    layer.mlp.bias = true;
    layer.mlp.up_proj = "c_fc";
    layer.mlp.down_proj = "c_proj";
    layer.mlp.activation = [](const mx::array& x) { return nn::gelu(x); };
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  return std::make_unique<nn::Decoder>(decoder_options(ModelArgs::from_config(config), config.source()), weights);
}

}  // namespace mlxrt::model::starcoder2
