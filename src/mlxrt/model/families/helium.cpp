// Port of mlx_lm/models/helium.py (mlx-lm 0.32.2): Helium. llama's skeleton with biases on q/k/v
// (attention_bias, none on o_proj), mlp_bias on the MLP, a traditional RoPE, head_dim
// hidden_size / num_attention_heads. The Model builds lm_head even when tied (then unused, but
// the checkpoint must hold it: there is no sanitize). No make_cache.
#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::helium {

namespace {

using nlohmann::json;

struct ModelArgs {
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads, num_key_value_heads;
  float rms_norm_eps;
  int vocab_size;
  bool attention_bias;
  int head_dim, max_position_embeddings;
  bool mlp_bias;
  std::string model_type;
  double rope_theta;
  bool tie_word_embeddings;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    ModelArgs a;
    a.hidden_size = f.required<int>("hidden_size");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.num_key_value_heads = f.required<int>("num_key_value_heads");
    a.rms_norm_eps = f.required<float>("rms_norm_eps");
    a.vocab_size = f.required<int>("vocab_size");
    a.attention_bias = f.required<bool>("attention_bias");
    a.head_dim = f.required<int>("head_dim");
    a.max_position_embeddings = f.required<int>("max_position_embeddings");
    a.mlp_bias = f.required<bool>("mlp_bias");
    a.model_type = f.required<std::string>("model_type");
    a.rope_theta = f.required<double>("rope_theta");
    a.tie_word_embeddings = f.required<bool>("tie_word_embeddings");
    if (a.num_attention_heads < 1)
      throw ConfigError(config.source() + ": num_attention_heads must be a positive integer");
    return a;
  }
};

nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.rms_norm_eps;
  d.tie_word_embeddings = args.tie_word_embeddings;
  d.always_load_lm_head = true;
  // head_dim is in ModelArgs but the attention uses hidden_size // num_attention_heads.
  const int head_dim = args.hidden_size / args.num_attention_heads;
  auto rope = nn::Rope::initialize(head_dim, args.rope_theta, true, json(), std::nullopt, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, head_dim, args.rms_norm_eps, rope);
    layer.attention.qkv_bias = args.attention_bias;
    layer.mlp.bias = args.mlp_bias;
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  return std::make_unique<nn::Decoder>(decoder_options(ModelArgs::from_config(config), config.source()), weights);
}

}  // namespace mlxrt::model::helium
