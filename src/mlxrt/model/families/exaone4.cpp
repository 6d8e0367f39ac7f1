// Port of mlx_lm/models/exaone4.py (mlx-lm 0.32.2): EXAONE 4.0. qwen3's per-head q/k RMSNorms,
// olmo2's post-norms (post_attention_layernorm, post_feedforward_layernorm on the sublayers'
// outputs, nothing on their inputs), and sliding_window_pattern, a string such as "LLLG": "L"
// layers slide over sliding_window positions through a RotatingKVCache with RoPE, the others
// attend globally without RoPE. Without a pattern every layer is global and rotates.
#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::exaone4 {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size, num_key_value_heads, max_position_embeddings;
  double rope_theta;
  int head_dim;
  bool tie_word_embeddings;
  json rope_scaling;
  std::optional<int> sliding_window;
  std::string sliding_window_pattern;  // empty: none

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
    a.num_key_value_heads = f.required<int>("num_key_value_heads");
    a.max_position_embeddings = f.required<int>("max_position_embeddings");
    a.rope_theta = f.required<double>("rope_theta");
    a.head_dim = f.required<int>("head_dim");
    a.tie_word_embeddings = f.required<bool>("tie_word_embeddings");
    // Required by the dataclass, null allowed.
    for (const char* key : {"rope_scaling", "sliding_window", "sliding_window_pattern"})
      if (!f.raw().contains(key)) throw ConfigError(source + ": missing required key '" + key + "'");
    a.rope_scaling = f.raw()["rope_scaling"];
    a.sliding_window = f.optional<int>("sliding_window");
    a.sliding_window_pattern = f.value_or<std::string>("sliding_window_pattern", "");
    const auto& p = a.sliding_window_pattern;
    if (!p.empty()) {
      if (p.find('L') == std::string::npos || p.find('G') == std::string::npos)
        throw ConfigError(source + ": 'sliding_window_pattern' must hold both an \"L\" and a \"G\" layer, got \"" +
                          p + "\"");
      if (!a.sliding_window || *a.sliding_window < 1)
        throw ConfigError(source + ": 'sliding_window' must be a positive integer with a sliding_window_pattern");
    }
    return a;
  }

  // None: no pattern (global, with RoPE); else whether layer i is local.
  std::optional<bool> is_local(int i) const {
    if (sliding_window_pattern.empty()) return std::nullopt;
    return sliding_window_pattern[i % sliding_window_pattern.size()] == 'L';
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
  auto rope = nn::Rope::initialize(args.head_dim, args.rope_theta, false, args.rope_scaling,
                                   args.max_position_embeddings, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    const auto local = args.is_local(i);
    const bool use_rope = !local || *local;
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, args.head_dim, args.rms_norm_eps,
                                 use_rope ? std::optional(rope) : std::nullopt);
    layer.attention.qk_norm = nn::QkNorm::per_head;
    layer.input_norm = layer.pre_mlp_norm = "";
    layer.post_attention_norm = "post_attention_layernorm";
    layer.post_mlp_norm = "post_feedforward_layernorm";
    layer.use_sliding = local.value_or(false);
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  return std::make_unique<nn::Decoder>(decoder_options(ModelArgs::from_config(config), config.source()), weights);
}

}  // namespace mlxrt::model::exaone4
