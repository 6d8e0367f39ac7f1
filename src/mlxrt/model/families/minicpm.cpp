// Port of mlx_lm/models/minicpm.py (mlx-lm 0.32.2): llama's skeleton (head_dim hidden_size /
// num_attention_heads, no biases) with the embeddings multiplied by scale_emb, each sublayer's
// output by scale_depth / sqrt(num_hidden_layers) before its residual add, and the untied head's
// input divided by hidden_size / dim_model_base. sanitize() copies the embedding into a missing
// lm_head.weight. No make_cache.
#include <cmath>

#include <mlx/ops.h>

#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::minicpm {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, dim_model_base, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size, num_key_value_heads;
  double scale_depth, scale_emb;
  std::optional<int> max_position_embeddings;
  double rope_theta = 1000000.0;
  bool rope_traditional = false;
  json rope_scaling;
  bool tie_word_embeddings = false;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    const auto& source = config.source();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.hidden_size = f.required<int>("hidden_size");
    a.dim_model_base = f.required<int>("dim_model_base");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.rms_norm_eps = f.required<float>("rms_norm_eps");
    a.vocab_size = f.required<int>("vocab_size");
    a.num_key_value_heads = f.required<int>("num_key_value_heads");
    a.scale_depth = f.required<double>("scale_depth");
    a.scale_emb = f.required<double>("scale_emb");
    a.max_position_embeddings = f.optional<int>("max_position_embeddings");
    a.rope_theta = f.value_or<double>("rope_theta", 1000000.0);
    a.rope_traditional = f.value_or<bool>("rope_traditional", false);
    a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", false);
    if (a.num_attention_heads < 1) throw ConfigError(source + ": num_attention_heads must be a positive integer");
    if (a.dim_model_base == 0) throw ConfigError(source + ": 'dim_model_base' must not be 0");
    if (a.num_hidden_layers < 1) throw ConfigError(source + ": 'num_hidden_layers' must be a positive integer");
    // sanitize() always leaves an lm_head.weight, which a tied model has no place for: mlx-lm's
    // strict load refuses every tied MiniCPM checkpoint.
    if (a.tie_word_embeddings)
      throw UnsupportedError(source + ": 'tie_word_embeddings' true is not loadable by mlx-lm's minicpm (its " +
                             "sanitize adds lm_head.weight, which a tied model does not have)");
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
  // scale_depth / num_hidden_layers ** 0.5, in Python floats
  const double residual = args.scale_depth / std::pow(static_cast<double>(args.num_hidden_layers), 0.5);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, head_dim, args.rms_norm_eps, rope);
    layer.residual_scale = residual;
    d.layers.push_back(std::move(layer));
  }
  return d;
}

class Model final : public nn::Decoder {
 public:
  Model(const ModelArgs& args, const std::string& source, WeightBinder& w)
      : nn::Decoder(decoder_options(args, source), w),
        scale_emb_(static_cast<float>(args.scale_emb)),
        head_divisor_(static_cast<float>(static_cast<double>(args.hidden_size) / args.dim_model_base)) {}

 protected:
  mx::array embed(const mx::array& inputs) const override {
    auto h = embed_tokens()(inputs);
    return mx::multiply(h, mx::array(scale_emb_, h.dtype()));
  }
  mx::array head(const mx::array& h) const override {
    return project_to_vocab(mx::divide(h, mx::array(head_divisor_, h.dtype())));
  }

 private:
  float scale_emb_, head_divisor_;
};

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto args = ModelArgs::from_config(config);
  // sanitize(): a checkpoint without lm_head.weight gets the embedding's (only an unquantized one
  // loads in mlx-lm: a quantized head also needs its scales).
  if (!weights.has("lm_head.weight")) weights.copy_tensor("model.embed_tokens.weight", "lm_head.weight");
  return std::make_unique<Model>(args, config.source(), weights);
}

}  // namespace mlxrt::model::minicpm
