// Port of mlx_lm/models/llama.py (mlx-lm 0.32.2). mlx-lm also runs "mistral" (and a few other
// model_types) through this file; the registry routes them here the same way.
#include "mlxrt/model/families/llama.h"

#include <algorithm>

namespace mlxrt::model::llama {

using nlohmann::json;

ModelArgs ModelArgs::from_fields(const JsonFields& f) {
  const auto& source = f.source();
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
  a.sliding_window = f.optional<int>("sliding_window");
  // layer_types (one per layer): "sliding_attention" layers attend over the last sliding_window
  // positions through a RotatingKVCache; the mask of the first full layer serves every full one.
  if (f.has("layer_types")) {
    const auto& types = f.raw()["layer_types"];
    if (!types.is_array() || static_cast<int>(types.size()) != a.num_hidden_layers)
      throw ConfigError(source + ": 'layer_types' must be a list of " +
                        std::to_string(a.num_hidden_layers) + " strings (one per layer)");
    for (const auto& t : types) {
      const auto name = t.is_string() ? t.get<std::string>() : t.dump();
      if (name != "full_attention" && name != "sliding_attention")
        throw UnsupportedError(source + ": layer_types entry " + name + " is not supported by the " +
                               "llama graph (supported: \"full_attention\", \"sliding_attention\")");
      a.sliding.push_back(name == "sliding_attention");
    }
  } else {
    a.sliding.assign(a.num_hidden_layers, false);
  }
  if (std::find(a.sliding.begin(), a.sliding.end(), false) == a.sliding.end())
    throw ConfigError(source + ": 'layer_types' has no \"full_attention\" layer (mlx-lm's llama " +
                      "needs one)");
  const bool any_sliding = std::find(a.sliding.begin(), a.sliding.end(), true) != a.sliding.end();
  if (any_sliding && (!a.sliding_window || *a.sliding_window < 1))
    throw ConfigError(source + ": 'sliding_window' must be a positive integer when layer_types has " +
                      "\"sliding_attention\" layers");
  return a;
}

nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source, const std::string& model,
                                   const std::string& lm_head) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.rms_norm_eps;
  d.tie_word_embeddings = args.tie_word_embeddings;
  d.sliding_window = args.sliding_window;
  d.defines_make_cache = true;
  d.model = model;
  d.lm_head = lm_head;
  const int head_dim = args.head_dim ? *args.head_dim : args.hidden_size / args.num_attention_heads;
  auto rope = nn::Rope::initialize(head_dim, args.rope_theta, args.rope_traditional, args.rope_scaling,
                                   args.max_position_embeddings, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, head_dim, args.rms_norm_eps, rope);
    layer.attention.qkv_bias = layer.attention.o_bias = args.attention_bias;
    layer.mlp.bias = args.mlp_bias;
    layer.use_sliding = args.sliding[i];
    d.layers.push_back(std::move(layer));
  }
  return d;
}

void sanitize(const ModelArgs& args, WeightBinder& w, const std::string& lm_head) {
  w.discard_containing("self_attn.rotary_emb.inv_freq");
  if (args.tie_word_embeddings) w.discard(lm_head + ".weight");
}

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto args = ModelArgs::from_fields(config.fields());
  sanitize(args, weights);
  auto options = decoder_options(args, config.source());
  if (const auto* group = weights.tensor_group()) nn::shard_like_llama(options.layers, group->size(), config.source());
  return std::make_unique<nn::Decoder>(std::move(options), weights);
}

}  // namespace mlxrt::model::llama
