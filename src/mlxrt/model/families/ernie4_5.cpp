// Port of mlx_lm/models/ernie4_5.py (mlx-lm 0.32.2): ERNIE 4.5 dense. llama's skeleton with
// use_bias on every projection (attention and MLP) and a traditional RoPE without scaling.
// head_dim may be null (then hidden_size / num_attention_heads). No sanitize, no make_cache.
#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::ernie4_5 {

namespace {

using nlohmann::json;

struct ModelArgs {
  int hidden_size, intermediate_size;
  std::string model_type;
  int max_position_embeddings, num_attention_heads, num_key_value_heads;
  std::optional<int> head_dim;
  int num_hidden_layers;
  float rms_norm_eps;
  int vocab_size;
  double rope_theta;
  bool use_bias, tie_word_embeddings;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    const auto& source = config.source();
    ModelArgs a;
    a.hidden_size = f.required<int>("hidden_size");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.model_type = f.required<std::string>("model_type");
    a.max_position_embeddings = f.required<int>("max_position_embeddings");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.num_key_value_heads = f.required<int>("num_key_value_heads");
    // A field without a default: it must be there, and may be null.
    if (!f.raw().contains("head_dim")) throw ConfigError(source + ": missing required key 'head_dim'");
    a.head_dim = f.optional<int>("head_dim");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.rms_norm_eps = f.required<float>("rms_norm_eps");
    a.vocab_size = f.required<int>("vocab_size");
    a.rope_theta = f.required<double>("rope_theta");
    a.use_bias = f.required<bool>("use_bias");
    a.tie_word_embeddings = f.required<bool>("tie_word_embeddings");
    if (a.num_attention_heads < 1) throw ConfigError(source + ": num_attention_heads must be a positive integer");
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
  auto rope = nn::Rope::initialize(head_dim, args.rope_theta, true, json(), args.max_position_embeddings, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, head_dim, args.rms_norm_eps, rope);
    layer.attention.qkv_bias = layer.attention.o_bias = args.use_bias;
    layer.mlp.bias = args.use_bias;
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  return std::make_unique<nn::Decoder>(decoder_options(ModelArgs::from_config(config), config.source()), weights);
}

}  // namespace mlxrt::model::ernie4_5
