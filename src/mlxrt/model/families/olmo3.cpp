// Port of mlx_lm/models/olmo3.py (mlx-lm 0.32.2): olmo2's block (q/k norms over the whole
// projections, post-norms) with sliding-window layers: every layer_types entry other than
// "full_attention" slides over sliding_window positions through a RotatingKVCache, with a plain
// RoPE; the full layers' RoPE takes rope_scaling. By default every fourth layer is full. Untied
// head by default, and no sanitize.
#include <algorithm>

#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::olmo3 {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size, max_position_embeddings, sliding_window;
  double rope_theta;
  bool attention_bias = false;
  std::vector<bool> sliding;  // layer_types[i] != "full_attention"
  int num_key_value_heads;
  std::optional<int> head_dim;
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
    a.max_position_embeddings = f.required<int>("max_position_embeddings");
    a.sliding_window = f.required<int>("sliding_window");
    a.rope_theta = f.required<double>("rope_theta");
    a.attention_bias = f.value_or<bool>("attention_bias", false);
    a.num_key_value_heads = f.value_or<int>("num_key_value_heads", a.num_attention_heads);
    a.head_dim = f.optional<int>("head_dim");
    a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", false);
    if (a.num_attention_heads < 1) throw ConfigError(source + ": num_attention_heads must be a positive integer");
    if (a.sliding_window < 1) throw ConfigError(source + ": 'sliding_window' must be a positive integer");
    if (f.has("layer_types")) {
      const auto& types = f.raw()["layer_types"];
      if (!types.is_array() || static_cast<int>(types.size()) != a.num_hidden_layers)
        throw ConfigError(source + ": 'layer_types' must be a list of " + std::to_string(a.num_hidden_layers) +
                          " strings (one per layer)");
      for (const auto& t : types) a.sliding.push_back(!(t.is_string() && t.get<std::string>() == "full_attention"));
    } else {
      for (int i = 0; i < a.num_hidden_layers; ++i) a.sliding.push_back((i + 1) % 4 != 0);
    }
    // Olmo3Model indexes the first layer of each kind (a ValueError in mlx-lm when one is absent).
    if (std::find(a.sliding.begin(), a.sliding.end(), false) == a.sliding.end())
      throw ConfigError(source + ": 'layer_types' has no \"full_attention\" layer (olmo3 needs one)");
    if (std::find(a.sliding.begin(), a.sliding.end(), true) == a.sliding.end())
      throw ConfigError(source + ": 'layer_types' has no \"sliding_attention\" layer (olmo3 needs one)");
    return a;
  }
};

nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.rms_norm_eps;
  d.tie_word_embeddings = args.tie_word_embeddings;
  d.sliding_window = args.sliding_window;
  d.defines_make_cache = true;
  const int head_dim = args.head_dim.value_or(0) ? *args.head_dim : args.hidden_size / args.num_attention_heads;
  auto full_rope = nn::Rope::initialize(head_dim, args.rope_theta, false, args.rope_scaling,
                                        args.max_position_embeddings, source);
  auto sliding_rope = nn::Rope::initialize(head_dim, args.rope_theta, false, json(), std::nullopt, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, head_dim, args.rms_norm_eps,
                                 args.sliding[i] ? sliding_rope : full_rope);
    layer.attention.qkv_bias = layer.attention.o_bias = args.attention_bias;
    layer.attention.qk_norm = nn::QkNorm::projection;
    layer.input_norm = layer.pre_mlp_norm = "";
    layer.post_attention_norm = "post_attention_layernorm";
    layer.post_mlp_norm = "post_feedforward_layernorm";
    layer.use_sliding = args.sliding[i];
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  return std::make_unique<nn::Decoder>(decoder_options(ModelArgs::from_config(config), config.source()), weights);
}

}  // namespace mlxrt::model::olmo3
