// Port of mlx_lm/models/cohere2.py (mlx-lm 0.32.2): Command R7B / Command A. One LayerNorm
// (bias per layer_norm_bias) feeds both the attention and the MLP, out = (attention + MLP) + x;
// every sliding_window_pattern-th layer is global, without RoPE; the others slide over
// sliding_window positions through a RotatingKVCache with a traditional RoPE. float16 queries
// attend in float32. The head is always the tied embedding, its logits times logit_scale.
#include <mlx/ops.h>

#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::cohere2 {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size = 4096, head_dim = 128, num_hidden_layers = 32, intermediate_size = 14336,
      num_attention_heads = 32, num_key_value_heads = 8;
  double rope_theta = 50000.0;
  int vocab_size = 256000;
  float layer_norm_eps = 1e-5f;
  double logit_scale = 0.0625;
  bool attention_bias = false, layer_norm_bias = false;
  int sliding_window = 4096, sliding_window_pattern = 4;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    const auto& source = config.source();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.hidden_size = f.value_or<int>("hidden_size", 4096);
    a.head_dim = f.value_or<int>("head_dim", 128);
    a.num_hidden_layers = f.value_or<int>("num_hidden_layers", 32);
    a.intermediate_size = f.value_or<int>("intermediate_size", 14336);
    a.num_attention_heads = f.value_or<int>("num_attention_heads", 32);
    a.num_key_value_heads = f.value_or<int>("num_key_value_heads", 8);
    a.rope_theta = f.value_or<double>("rope_theta", 50000.0);
    a.vocab_size = f.value_or<int>("vocab_size", 256000);
    a.layer_norm_eps = f.value_or<float>("layer_norm_eps", 1e-5f);
    a.logit_scale = f.value_or<double>("logit_scale", 0.0625);
    a.attention_bias = f.value_or<bool>("attention_bias", false);
    a.layer_norm_bias = f.value_or<bool>("layer_norm_bias", false);
    a.sliding_window = f.value_or<int>("sliding_window", 4096);
    a.sliding_window_pattern = f.value_or<int>("sliding_window_pattern", 4);
    if (a.head_dim * a.num_attention_heads != a.hidden_size)
      throw ConfigError(source + ": hidden_size must be divisible by num_heads (got hidden_size " +
                        std::to_string(a.hidden_size) + " and num_attention_heads " +
                        std::to_string(a.num_attention_heads) + " of head_dim " + std::to_string(a.head_dim) + ")");
    // The model indexes cache[sliding_window_pattern - 1] for the global mask.
    if (a.sliding_window_pattern < 1 || a.sliding_window_pattern > a.num_hidden_layers)
      throw ConfigError(source + ": 'sliding_window_pattern' (" + std::to_string(a.sliding_window_pattern) +
                        ") must be between 1 and 'num_hidden_layers' (" + std::to_string(a.num_hidden_layers) + ")");
    if (a.sliding_window < 1) throw ConfigError(source + ": 'sliding_window' must be a positive integer");
    return a;
  }

  bool is_global(int i) const { return i % sliding_window_pattern == sliding_window_pattern - 1; }
};

nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.layer_norm_eps;
  const auto norm = args.layer_norm_bias ? nn::Norm::Kind::layer : nn::Norm::Kind::layer_no_bias;
  d.norm_kind = norm;
  d.tie_word_embeddings = true;
  d.sliding_window = args.sliding_window;
  d.defines_make_cache = true;
  auto rope = nn::Rope::initialize(args.head_dim, args.rope_theta, true, json(), std::nullopt, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    const bool global = args.is_global(i);
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, args.head_dim, args.layer_norm_eps,
                                 global ? std::nullopt : std::optional(rope));
    layer.attention.qkv_bias = layer.attention.o_bias = args.attention_bias;
    layer.attention.sdpa_cast = nn::SdpaCast::float16_queries_f32;
    layer.norm_kind = norm;
    layer.pre_mlp_norm = "";
    layer.residual = nn::BlockOptions::Residual::parallel;
    layer.use_sliding = !global;
    d.layers.push_back(std::move(layer));
  }
  return d;
}

class Model final : public nn::Decoder {
 public:
  Model(const ModelArgs& args, const std::string& source, WeightBinder& w)
      : nn::Decoder(decoder_options(args, source), w), logit_scale_(static_cast<float>(args.logit_scale)) {}

 protected:
  mx::array head(const mx::array& h) const override {
    auto out = project_to_vocab(h);
    return mx::multiply(out, mx::array(logit_scale_, out.dtype()));
  }

 private:
  float logit_scale_;
};

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  return std::make_unique<Model>(ModelArgs::from_config(config), config.source(), weights);
}

}  // namespace mlxrt::model::cohere2
