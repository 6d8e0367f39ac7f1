// Port of mlx_lm/models/granite.py (mlx-lm 0.32.2): llama's skeleton with four multipliers: the
// embeddings are multiplied by embedding_multiplier, each sublayer's output by
// residual_multiplier before its residual add, the attention's softmax scale is
// attention_multiplier, and the logits are divided by logits_scaling. head_dim is always
// hidden_size / num_attention_heads; attention_bias covers q/k/v/o. No make_cache.
#include <mlx/ops.h>

#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::granite {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size;
  double logits_scaling, attention_multiplier, embedding_multiplier, residual_multiplier;
  int max_position_embeddings, num_key_value_heads;
  bool attention_bias, mlp_bias;
  double rope_theta;
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
    a.logits_scaling = f.required<double>("logits_scaling");
    a.attention_multiplier = f.required<double>("attention_multiplier");
    a.embedding_multiplier = f.required<double>("embedding_multiplier");
    a.residual_multiplier = f.required<double>("residual_multiplier");
    a.max_position_embeddings = f.required<int>("max_position_embeddings");
    a.num_key_value_heads = f.required<int>("num_key_value_heads");
    a.attention_bias = f.required<bool>("attention_bias");
    a.mlp_bias = f.required<bool>("mlp_bias");
    a.rope_theta = f.required<double>("rope_theta");
    a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", true);
    if (a.num_attention_heads < 1)
      throw ConfigError(config.source() + ": num_attention_heads must be a positive integer");
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
  auto rope = nn::Rope::initialize(head_dim, args.rope_theta, false, args.rope_scaling, args.max_position_embeddings,
                                   source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, head_dim, args.rms_norm_eps, rope);
    layer.attention.scale = static_cast<float>(args.attention_multiplier);
    layer.attention.qkv_bias = layer.attention.o_bias = args.attention_bias;
    layer.mlp.bias = args.mlp_bias;
    layer.residual_scale = args.residual_multiplier;
    d.layers.push_back(std::move(layer));
  }
  return d;
}

class Model final : public nn::Decoder {
 public:
  Model(const ModelArgs& args, const std::string& source, WeightBinder& w)
      : nn::Decoder(decoder_options(args, source), w),
        embedding_multiplier_(static_cast<float>(args.embedding_multiplier)),
        logits_scaling_(static_cast<float>(args.logits_scaling)) {}

 protected:
  mx::array embed(const mx::array& inputs) const override {
    auto h = embed_tokens()(inputs);
    return mx::multiply(h, mx::array(embedding_multiplier_, h.dtype()));
  }
  mx::array head(const mx::array& h) const override {
    auto out = project_to_vocab(h);
    return mx::divide(out, mx::array(logits_scaling_, out.dtype()));
  }

 private:
  float embedding_multiplier_, logits_scaling_;
};

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto args = ModelArgs::from_config(config);
  if (args.tie_word_embeddings) weights.discard("lm_head.weight");  // sanitize()
  return std::make_unique<Model>(args, config.source(), weights);
}

}  // namespace mlxrt::model::granite
