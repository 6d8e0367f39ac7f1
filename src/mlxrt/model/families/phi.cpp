// Port of mlx_lm/models/phi.py (mlx-lm 0.32.2): Phi-2 (and Phi-1.5). One LayerNorm feeds both the
// attention and the MLP, out = (attention + MLP) + x; biases everywhere (dense is the output
// projection, fc1/fc2 a gelu_approx MLP, lm_head has a bias); a plain RoPE over
// int(partial_rotary_factor * head_dim) dimensions; the attention runs on float32 queries,
// its output cast back to the values' dtype, with scale sqrt(1 / head_dim); final_layernorm.
#include <cmath>

#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/activations.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::phi {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type = "phi";
  int max_position_embeddings = 2048, vocab_size = 51200, hidden_size = 2560, num_attention_heads = 32,
      num_hidden_layers = 32, num_key_value_heads = 32;
  double partial_rotary_factor = 0.4;
  int intermediate_size = 10240;
  float layer_norm_eps = 1e-5f;
  double rope_theta = 10000.0;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    const auto& source = config.source();
    ModelArgs a;
    a.model_type = f.value_or<std::string>("model_type", "phi");
    a.max_position_embeddings = f.value_or<int>("max_position_embeddings", 2048);
    a.vocab_size = f.value_or<int>("vocab_size", 51200);
    a.hidden_size = f.value_or<int>("hidden_size", 2560);
    a.num_attention_heads = f.value_or<int>("num_attention_heads", 32);
    a.num_hidden_layers = f.value_or<int>("num_hidden_layers", 32);
    a.num_key_value_heads = f.value_or<int>("num_key_value_heads", a.num_attention_heads);
    a.partial_rotary_factor = f.value_or<double>("partial_rotary_factor", 0.4);
    a.intermediate_size = f.value_or<int>("intermediate_size", 10240);
    a.layer_norm_eps = f.value_or<float>("layer_norm_eps", 1e-5f);
    a.rope_theta = f.value_or<double>("rope_theta", 10000.0);
    if (a.num_attention_heads < 1 || a.hidden_size % a.num_attention_heads != 0)
      throw ConfigError(source + ": hidden_size must be divisible by num_attention_heads (got hidden_size " +
                        std::to_string(a.hidden_size) + " and num_attention_heads " +
                        std::to_string(a.num_attention_heads) + ")");
    return a;
  }
};

nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source) {
  nn::DecoderOptions d;
  d.vocab_size = args.vocab_size;
  d.hidden_size = args.hidden_size;
  d.norm_eps = args.layer_norm_eps;
  d.norm_kind = nn::Norm::Kind::layer;
  d.norm = "final_layernorm";
  d.tie_word_embeddings = false;
  d.head_bias = true;
  const int head_dim = args.hidden_size / args.num_attention_heads;
  const int rope_dims = static_cast<int>(args.partial_rotary_factor * head_dim);
  auto rope = nn::Rope::initialize(rope_dims, args.rope_theta, false, json(), std::nullopt, source);
  for (int i = 0; i < args.num_hidden_layers; ++i) {
    auto layer = nn::llama_block(args.hidden_size, args.intermediate_size, args.num_attention_heads,
                                 args.num_key_value_heads, head_dim, args.layer_norm_eps, rope);
    layer.attention.qkv_bias = layer.attention.o_bias = true;
    layer.attention.o_proj = "dense";
    layer.attention.scale = static_cast<float>(std::sqrt(1.0 / head_dim));
    layer.attention.sdpa_cast = nn::SdpaCast::queries_f32;
    layer.norm_kind = nn::Norm::Kind::layer;
    layer.pre_mlp_norm = "";
    layer.residual = nn::BlockOptions::Residual::parallel;
    layer.mlp.kind = nn::MlpOptions::Kind::plain;
    layer.mlp.bias = true;
    layer.mlp.up_proj = "fc1";
    layer.mlp.down_proj = "fc2";
    layer.mlp.activation = [](const mx::array& x) { return nn::gelu_approx(x); };
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  return std::make_unique<nn::Decoder>(decoder_options(ModelArgs::from_config(config), config.source()), weights);
}

}  // namespace mlxrt::model::phi
