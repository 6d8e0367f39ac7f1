// Port of mlx_lm/models/qwen2.py (mlx-lm 0.32.2): llama's layout with biases on q/k/v (none on
// o_proj or the MLP), head_dim always hidden_size / num_attention_heads, and qwen2.py's own
// ModelArgs defaults (rope_theta 1e6, max_position_embeddings 32768, tied head).
#include "mlxrt/model/families/families.h"

#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::qwen2 {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size, num_key_value_heads;
  int max_position_embeddings = 32768;
  double rope_theta = 1000000;
  bool rope_traditional = false;
  json rope_scaling;
  bool tie_word_embeddings = true;

  // qwen2.py's dataclass knows neither head_dim nor rope_parameters: both are ignored, as there.
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
    a.max_position_embeddings = f.value_or<int>("max_position_embeddings", 32768);
    a.rope_theta = f.value_or<double>("rope_theta", 1000000);
    a.rope_traditional = f.value_or<bool>("rope_traditional", false);
    a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", true);
    // head_dim is hidden_size // num_attention_heads (floor, as in Python); a zero divisor fails there too.
    if (a.num_attention_heads < 1)
      throw ConfigError(config.source() + ": num_attention_heads must be a positive integer");
    return a;
  }
};

// qwen2.py's Model is llama's skeleton with biases on q_proj, k_proj and v_proj; no make_cache.
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
    layer.attention.qkv_bias = true;
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto args = ModelArgs::from_config(config);
  // sanitize(): a tied head drops lm_head.weight; precomputed rotary frequencies are dropped.
  if (args.tie_word_embeddings) weights.discard("lm_head.weight");
  weights.discard_containing("self_attn.rotary_emb.inv_freq");
  auto options = decoder_options(args, config.source());
  if (const auto* group = weights.tensor_group()) nn::shard_like_llama(options.layers, group->size(), config.source());
  return std::make_unique<nn::Decoder>(std::move(options), weights);
}

}  // namespace mlxrt::model::qwen2
