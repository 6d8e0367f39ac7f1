// Port of mlx_lm/models/qwen3.py (mlx-lm 0.32.2).
#include "mlxrt/model/families/families.h"

#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::qwen3 {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size, num_key_value_heads, max_position_embeddings, head_dim;
  bool tie_word_embeddings;
  double rope_theta;
  json rope_scaling;

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
    a.max_position_embeddings = f.required<int>("max_position_embeddings");
    a.head_dim = f.required<int>("head_dim");
    a.tie_word_embeddings = f.required<bool>("tie_word_embeddings");
    // transformers >= 5 nests rope_theta and rope_scaling under rope_parameters.
    auto theta = f.optional<double>("rope_theta");
    a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
    if (f.has("rope_parameters") && f.raw()["rope_parameters"].is_object() &&
        !f.raw()["rope_parameters"].empty()) {
      const json& rp = f.raw()["rope_parameters"];
      if (!theta && rp.contains("rope_theta") && rp["rope_theta"].is_number()) theta = rp["rope_theta"].get<double>();
      if (a.rope_scaling.is_null()) a.rope_scaling = rp;
    }
    if (!theta) throw ConfigError(config.source() + ": rope_theta is missing from the model config");
    a.rope_theta = *theta;
    return a;
  }
};

// qwen3.py's Model is llama's skeleton with RMSNorms on the queries and keys of each head
// (q_norm, k_norm) and no biases; no make_cache, and sanitize only drops a tied lm_head.
nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.rms_norm_eps;
  d.tie_word_embeddings = args.tie_word_embeddings;
  auto rope = nn::Rope::initialize(args.head_dim, args.rope_theta, false, args.rope_scaling,
                                   args.max_position_embeddings, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, args.head_dim, args.rms_norm_eps, rope);
    layer.attention.qk_norm = nn::QkNorm::per_head;
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto args = ModelArgs::from_config(config);
  auto options = decoder_options(args, config.source());
  if (const auto* group = weights.tensor_group()) nn::shard_like_llama(options.layers, group->size(), config.source());
  auto model = std::make_unique<nn::Decoder>(std::move(options), weights);
  // sanitize(): a tied head drops any saved lm_head.weight.
  if (args.tie_word_embeddings) weights.discard("lm_head.weight");
  return model;
}

}  // namespace mlxrt::model::qwen3
