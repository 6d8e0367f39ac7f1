// Port of mlx_lm/models/phi3.py (mlx-lm 0.32.2): Phi-3, Phi-3.5 and Phi-4-mini. One fused
// qkv_proj split into queries, keys and values; one fused gate_up_proj split in halves (gate
// first); partial rotary embeddings; SuScaledRoPE for "longrope"/"su" scaling, built from the
// config's top-level max_position_embeddings and original_max_position_embeddings. phi3.py has
// no sanitize: the checkpoint must hold exactly the model's parameters.
#include "mlxrt/model/families/families.h"

#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::phi3 {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size, num_key_value_heads;
  double rope_theta = 10000;
  bool rope_traditional = false;
  json rope_scaling;  // null, or an object with "type" and "long_factor"
  std::string rope_type;  // "longrope", "su", "linear", or empty (plain RoPE)
  double partial_rotary_factor = 1.0;
  int max_position_embeddings = 131072;
  int original_max_position_embeddings = 4096;
  bool tie_word_embeddings = false;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    const auto& src = config.source();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.hidden_size = f.required<int>("hidden_size");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.rms_norm_eps = f.required<float>("rms_norm_eps");
    a.vocab_size = f.required<int>("vocab_size");
    a.num_key_value_heads = f.value_or<int>("num_key_value_heads", a.num_attention_heads);
    a.rope_theta = f.value_or<double>("rope_theta", 10000);
    a.rope_traditional = f.value_or<bool>("rope_traditional", false);
    a.partial_rotary_factor = f.value_or<double>("partial_rotary_factor", 1.0);
    a.max_position_embeddings = f.value_or<int>("max_position_embeddings", 131072);
    a.original_max_position_embeddings = f.value_or<int>("original_max_position_embeddings", 4096);
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", false);
    if (a.num_attention_heads < 1)
      throw ConfigError(src + ": num_attention_heads must be a positive integer");
    a.read_rope_scaling(f.raw().contains("rope_scaling") ? f.raw()["rope_scaling"] : json(), src);
    return a;
  }

  // __post_init__: a non-empty rope_scaling must name "type" and "long_factor"; a type other than
  // longrope, su or linear is dropped (phi3.py warns and uses a plain RoPE).
  void read_rope_scaling(const json& s, const std::string& src) {
    const bool truthy = !s.is_null() && !(s.is_object() && s.empty()) && !(s.is_boolean() && !s.get<bool>());
    if (!truthy) return;
    if (!s.is_object()) throw ConfigError(src + ": rope_scaling must be an object or null");
    if (!s.contains("long_factor") || !s.contains("type"))
      throw ConfigError(src + ": rope_scaling must contain keys {'long_factor', 'type'}");
    const json& t = s["type"];
    const std::string type = t.is_string() ? t.get<std::string>() : std::string();
    if (type != "longrope" && type != "su" && type != "linear") return;
    rope_scaling = s;
    rope_type = type;
    if (type == "linear" && !(s.contains("factor") && s["factor"].is_number_float()))
      throw ConfigError(src + ": rope_scaling.factor must be a float for linear scaling");
    if (type != "linear" && !s.contains("short_factor"))
      throw ConfigError(src + ": rope_scaling.short_factor is required for " + type + " scaling");
  }
};

nn::Rope make_rope(const ModelArgs& args, int head_dim, const std::string& source) {
  const int rope_dim = static_cast<int>(head_dim * args.partial_rotary_factor);
  if (args.rope_type == "longrope" || args.rope_type == "su")
    return nn::Rope::su_scaled(rope_dim, args.rope_theta, args.max_position_embeddings,
                               args.original_max_position_embeddings, args.rope_scaling["long_factor"], 0, source);
  json plain = json::object({{"type", "default"}});
  if (args.rope_type == "linear") plain = json::object({{"type", "linear"}, {"factor", args.rope_scaling["factor"]}});
  return nn::Rope::initialize(rope_dim, args.rope_theta, args.rope_traditional, plain, std::nullopt, source);
}

// phi3.py's Model is llama's skeleton with the fused projections; untied by default, no make_cache.
nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.rms_norm_eps;
  d.tie_word_embeddings = args.tie_word_embeddings;
  const int head_dim = args.hidden_size / args.num_attention_heads;
  auto rope = make_rope(args, head_dim, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, head_dim, args.rms_norm_eps, rope);
    layer.attention.fused_qkv = true;                       // qkv_proj
    layer.mlp.kind = nn::MlpOptions::Kind::fused_swiglu;   // gate_up_proj
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  return std::make_unique<nn::Decoder>(decoder_options(ModelArgs::from_config(config), config.source()), weights);
}

}  // namespace mlxrt::model::phi3
