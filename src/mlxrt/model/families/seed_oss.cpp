// Port of mlx_lm/models/seed_oss.py (mlx-lm 0.32.2): Seed-OSS. llama's skeleton with separate
// biases for q/k/v (attention_bias) and o_proj (attention_out_bias), mlp_bias on the MLP. A tied
// head is `h @ embed_tokens.weight.T` (the embedding's plain weight, so a quantized tied
// embedding does not run there). No make_cache.
#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::seed_oss {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size, num_key_value_heads, head_dim;
  std::optional<int> max_position_embeddings;
  bool attention_bias = false, attention_out_bias = false, mlp_bias = false;
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
    a.num_key_value_heads = f.required<int>("num_key_value_heads");
    a.head_dim = f.required<int>("head_dim");
    a.max_position_embeddings = f.optional<int>("max_position_embeddings");
    a.attention_bias = f.value_or<bool>("attention_bias", false);
    a.attention_out_bias = f.value_or<bool>("attention_out_bias", false);
    a.mlp_bias = f.value_or<bool>("mlp_bias", false);
    a.rope_theta = f.value_or<double>("rope_theta", 10000);
    a.rope_traditional = f.value_or<bool>("rope_traditional", false);
    a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", true);
    return a;
  }
};

nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.rms_norm_eps;
  d.tie_word_embeddings = args.tie_word_embeddings;
  auto rope = nn::Rope::initialize(args.head_dim, args.rope_theta, args.rope_traditional, args.rope_scaling,
                                   args.max_position_embeddings, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, args.head_dim, args.rms_norm_eps, rope);
    layer.attention.qkv_bias = args.attention_bias;
    layer.attention.o_bias = args.attention_out_bias;
    layer.mlp.bias = args.mlp_bias;
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto args = ModelArgs::from_config(config);
  if (args.tie_word_embeddings) {
    weights.discard("lm_head.weight");  // sanitize()
    // `h @ embed_tokens.weight.T` multiplies by the packed words of a quantized embedding: mlx-lm
    // fails there with a shape error; refuse up front instead.
    if (weights.has("model.embed_tokens.scales"))
      throw UnsupportedError(config.source() + ": a tied head over a quantized embedding does not run in mlx-lm's " +
                             "seed_oss (it multiplies by embed_tokens.weight itself)");
  }
  return std::make_unique<nn::Decoder>(decoder_options(args, config.source()), weights);
}

}  // namespace mlxrt::model::seed_oss
