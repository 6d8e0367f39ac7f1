// Port of mlx_lm/models/internlm3.py (mlx-lm 0.32.2): llama's skeleton with head_dim always
// hidden_size / num_attention_heads, qkv_bias on q/k/v/o, bias on the MLP, and __post_init__'s
// rope_scaling check (rope_type "linear" or "dynamic"). sanitize drops "attention.rope.inv_freq".
// No make_cache.
#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::internlm3 {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size;
  bool bias = false, qkv_bias = false;
  int max_position_embeddings = 32768;
  int num_key_value_heads;
  double rope_theta = 10000;
  bool rope_traditional = false;
  json rope_scaling;
  bool tie_word_embeddings = false;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    const auto& source = config.source();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.hidden_size = f.required<int>("hidden_size");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.rms_norm_eps = f.required<float>("rms_norm_eps");
    a.vocab_size = f.required<int>("vocab_size");
    a.bias = f.value_or<bool>("bias", false);
    a.qkv_bias = f.value_or<bool>("qkv_bias", false);
    a.max_position_embeddings = f.value_or<int>("max_position_embeddings", 32768);
    a.num_key_value_heads = f.value_or<int>("num_key_value_heads", a.num_attention_heads);
    a.rope_theta = f.value_or<double>("rope_theta", 10000);
    a.rope_traditional = f.value_or<bool>("rope_traditional", false);
    a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", false);
    if (a.num_attention_heads < 1) throw ConfigError(source + ": num_attention_heads must be a positive integer");
    const auto& s = a.rope_scaling;
    const bool truthy = !s.is_null() && !(s.is_object() && s.empty()) && !(s.is_boolean() && !s.get<bool>());
    if (truthy) {
      if (!(s.is_object() && s.contains("factor") && s.contains("rope_type")))
        throw ConfigError(source + ": rope_scaling must contain keys {'factor', 'rope_type'}");
      if (s["rope_type"] != "linear" && s["rope_type"] != "dynamic")
        throw ConfigError(source + ": rope_scaling 'rope_type' currently only supports 'linear' or 'dynamic'");
    }
    return a;
  }
};

nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.rms_norm_eps;
  d.tie_word_embeddings = args.tie_word_embeddings;
  const int head_dim = args.hidden_size / args.num_attention_heads;
  auto rope = nn::Rope::initialize(head_dim, args.rope_theta, args.rope_traditional, args.rope_scaling,
                                   args.max_position_embeddings, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, head_dim, args.rms_norm_eps, rope);
    layer.attention.qkv_bias = layer.attention.o_bias = args.qkv_bias;
    layer.mlp.bias = args.bias;
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto args = ModelArgs::from_config(config);
  weights.discard_containing("attention.rope.inv_freq");  // sanitize()
  return std::make_unique<nn::Decoder>(decoder_options(args, config.source()), weights);
}

}  // namespace mlxrt::model::internlm3
