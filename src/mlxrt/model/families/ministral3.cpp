// Port of mlx_lm/models/ministral3.py (mlx-lm 0.32.2): llama's skeleton whose RoPE comes from
// rope_parameters (rope_theta, and a scaling such as yarn), with Llama 4's position-dependent
// query scale 1 + beta * log(1 + floor(position / original_max_position_embeddings)) applied to
// the rotated queries; sliding-window layers from layer_types through RotatingKVCaches.
#include <algorithm>

#include <mlx/ops.h>

#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::ministral3 {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size;
  std::optional<int> head_dim, max_position_embeddings;
  int num_key_value_heads;
  json rope_parameters;
  double rope_theta, llama_4_scaling_beta;
  int original_max_position_embeddings;
  bool tie_word_embeddings = true;
  std::vector<bool> sliding;  // layer_types[i] == "sliding_attention"
  std::optional<int> sliding_window;

  static ModelArgs from_fields(const JsonFields& f) {
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
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", true);
    a.sliding_window = f.optional<int>("sliding_window");
    if (a.num_attention_heads < 1) throw ConfigError(source + ": num_attention_heads must be a positive integer");
    // The attention reads three keys of rope_parameters (a KeyError in mlx-lm when one is absent).
    if (!f.has("rope_parameters") || !f.raw()["rope_parameters"].is_object())
      throw ConfigError(source + ": 'rope_parameters' must be an object (ministral3 reads rope_theta, " +
                        "llama_4_scaling_beta and original_max_position_embeddings from it)");
    a.rope_parameters = f.raw()["rope_parameters"];
    JsonFields rp(a.rope_parameters, source + ": rope_parameters");
    a.rope_theta = rp.required<double>("rope_theta");
    a.llama_4_scaling_beta = rp.required<double>("llama_4_scaling_beta");
    a.original_max_position_embeddings = rp.required<int>("original_max_position_embeddings");
    if (a.original_max_position_embeddings < 1)
      throw ConfigError(source + ": rope_parameters.original_max_position_embeddings must be a positive integer");
    a.read_layer_types(f);
    return a;
  }

  void read_layer_types(const JsonFields& f) {
    const auto& source = f.source();
    if (!f.has("layer_types")) {
      sliding.assign(num_hidden_layers, false);
      return;
    }
    const auto& types = f.raw()["layer_types"];
    if (!types.is_array() || static_cast<int>(types.size()) != num_hidden_layers)
      throw ConfigError(source + ": 'layer_types' must be a list of " + std::to_string(num_hidden_layers) +
                        " strings (one per layer)");
    for (const auto& t : types) {
      const auto name = t.is_string() ? t.get<std::string>() : t.dump();
      if (name != "full_attention" && name != "sliding_attention")
        throw UnsupportedError(source + ": layer_types entry " + name + " is not supported by the ministral3 " +
                               "graph (supported: \"full_attention\", \"sliding_attention\")");
      sliding.push_back(name == "sliding_attention");
    }
    if (std::find(sliding.begin(), sliding.end(), false) == sliding.end())
      throw ConfigError(source + ": 'layer_types' has no \"full_attention\" layer (ministral3 needs one)");
    if (std::find(sliding.begin(), sliding.end(), true) != sliding.end() && (!sliding_window || *sliding_window < 1))
      throw ConfigError(source + ": 'sliding_window' must be a positive integer when layer_types has " +
                        "\"sliding_attention\" layers");
  }
};

// _get_llama_4_attn_scale(L, offset, beta, original_max_position_embeddings)[:, None], in the
// queries' dtype: int32 positions, true division to float32, then the float32 arithmetic.
mx::array llama_4_attn_scale(int size, int offset, float beta, int max_positions, mx::Dtype dtype) {
  auto positions = mx::add(mx::arange(size), mx::array(offset));
  auto steps = mx::floor(mx::divide(positions, mx::array(max_positions)));
  auto scaling = mx::add(mx::array(1.0f), mx::multiply(mx::array(beta), mx::log(mx::add(mx::array(1.0f), steps))));
  return mx::astype(mx::expand_dims(scaling, 1), dtype);
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
  const int head_dim = args.head_dim.value_or(0) ? *args.head_dim : args.hidden_size / args.num_attention_heads;
  auto rope = nn::Rope::initialize(head_dim, args.rope_theta, false, args.rope_parameters,
                                   args.max_position_embeddings, source);
  const float beta = static_cast<float>(args.llama_4_scaling_beta);
  const int max_positions = args.original_max_position_embeddings;
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, head_dim, args.rms_norm_eps, rope);
    layer.attention.scale_queries = [beta, max_positions](const mx::array& queries, int offset) {
      return mx::multiply(queries, llama_4_attn_scale(queries.shape(2), offset, beta, max_positions, queries.dtype()));
    };
    layer.use_sliding = args.sliding[i];
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace

nn::DecoderOptions text_options(const JsonFields& fields, WeightBinder& weights, const std::string& model,
                                const std::string& lm_head) {
  const auto args = ModelArgs::from_fields(fields);
  // sanitize(): no rotary frequencies, no tied lm_head; activation scales dropped. FP8 weights
  // (weight_scale_inv) are dequantized there; mlx-community checkpoints never hold them.
  weights.discard_containing("self_attn.rotary_emb.inv_freq");
  if (args.tie_word_embeddings) weights.discard(lm_head + ".weight");
  weights.discard_containing("activation_scale");
  for (const auto& [name, tensor] : weights.remaining())
    if (name.find("weight_scale_inv") != std::string::npos)
      throw UnsupportedError(fields.source() + ": the checkpoint holds FP8 weights (" + name +
                             "); convert it with mlx_lm.convert first");
  auto options = decoder_options(args, fields.source(), model, lm_head);
  // ministral3.py's shard(): llama's (attention and MLP of every layer).
  if (const auto* group = weights.tensor_group()) nn::shard_like_llama(options.layers, group->size(), fields.source());
  return options;
}

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  return std::make_unique<nn::Decoder>(text_options(config.fields(), weights, "model", "lm_head"), weights);
}

}  // namespace mlxrt::model::ministral3
