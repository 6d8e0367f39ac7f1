// Port of mlx_lm/models/qwen3_5.py (mlx-lm 0.32.2): Qwen3.5's text model, from a text-only config or
// a multimodal checkpoint's text_config (the vision tower dropped, as mlx-lm's sanitize drops it).
// Its attention, MLP, gated RMSNorm and MoE block are qwen3_next.py's, and so is the split of
// Model.shard() over them (qwen3_next.cpp); the gated delta net's own projections split here.
#include "mlxrt/model/families/qwen3_5.h"

#include <vector>

#include <mlx/ops.h>

#include "mlxrt/model/families/families.h"
#include "mlxrt/model/families/qwen3_next.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::model::qwen3_5 {

namespace {

using nlohmann::json;
using qwen3_next::Args;

// TextModelArgs: every field has a default; rope_parameters (default: Qwen3.5's) overrides the
// top-level rope_theta, partial_rotary_factor and rope_scaling whenever it is a non-empty object.
Args text_model_args(const JsonFields& f) {
  Args a;
  a.model_type = f.value_or<std::string>("model_type", "");
  a.hidden_size = f.value_or<int>("hidden_size", 4096);
  a.intermediate_size = f.value_or<int>("intermediate_size", 14336);
  a.num_hidden_layers = f.value_or<int>("num_hidden_layers", 32);
  a.num_attention_heads = f.value_or<int>("num_attention_heads", 32);
  a.rms_norm_eps = f.value_or<float>("rms_norm_eps", 1e-6f);
  a.vocab_size = f.value_or<int>("vocab_size", 151936);
  a.num_key_value_heads = f.value_or<int>("num_key_value_heads", 8);
  a.max_position_embeddings = f.value_or<int>("max_position_embeddings", 131072);
  a.linear_num_value_heads = f.value_or<int>("linear_num_value_heads", 64);
  a.linear_num_key_heads = f.value_or<int>("linear_num_key_heads", 16);
  a.linear_key_head_dim = f.value_or<int>("linear_key_head_dim", 192);
  a.linear_value_head_dim = f.value_or<int>("linear_value_head_dim", 128);
  a.linear_conv_kernel_dim = f.value_or<int>("linear_conv_kernel_dim", 4);
  a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", false);
  a.attention_bias = f.value_or<bool>("attention_bias", false);
  a.full_attention_interval = f.value_or<int>("full_attention_interval", 4);
  a.num_experts = f.value_or<int>("num_experts", 0);
  a.num_experts_per_tok = f.value_or<int>("num_experts_per_tok", 0);
  a.decoder_sparse_step = f.value_or<int>("decoder_sparse_step", 1);
  a.shared_expert_intermediate_size = f.value_or<int>("shared_expert_intermediate_size", 0);
  a.moe_intermediate_size = f.value_or<int>("moe_intermediate_size", 0);
  a.norm_topk_prob = f.value_or<bool>("norm_topk_prob", true);
  // Qwen3.5's config field for the MTP head's layers (Hugging Face's Qwen3_5TextConfig; vLLM's qwen3_5_mtp.py).
  a.mtp_num_hidden_layers = f.value_or<int>("mtp_num_hidden_layers", 1);
  if (a.num_attention_heads < 1)
    throw ConfigError(f.source() + ": 'num_attention_heads' must be a positive integer, got " +
                      std::to_string(a.num_attention_heads));
  a.head_dim = f.has("head_dim") ? f.required<int>("head_dim") : a.hidden_size / a.num_attention_heads;
  a.partial_rotary_factor = f.value_or<double>("partial_rotary_factor", 0.25);
  a.rope_theta = f.value_or<double>("rope_theta", 100000.0);
  a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
  json rope_parameters = {{"type", "default"}, {"mrope_section", {11, 11, 10}}, {"rope_theta", 100000},
                          {"partial_rotary_factor", 0.25}};
  if (f.raw().contains("rope_parameters")) rope_parameters = f.raw()["rope_parameters"];
  if (!rope_parameters.is_null() && !(rope_parameters.is_object() && rope_parameters.empty())) {
    if (!rope_parameters.is_object())
      throw ConfigError(f.source() + ": 'rope_parameters' must be an object, got " + json_type_name(rope_parameters));
    if (!rope_parameters.contains("type") && rope_parameters.contains("rope_type")) {
      rope_parameters["type"] = rope_parameters["rope_type"];
      rope_parameters.erase("rope_type");
    }
    const JsonFields rp(rope_parameters, f.source() + ": rope_parameters");
    a.partial_rotary_factor = rp.value_or<double>("partial_rotary_factor", 0.25);
    a.rope_theta = rp.value_or<double>("rope_theta", 100000.0);
    a.rope_scaling = rope_parameters;
  }
  a.validate(f.source());
  return a;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Qwen3.5's GatedDeltaNet: separate q/k/v, z, b and a projections in front of the shared core.
// Sharded (shard()): each projection all-to-sharded in place, in_proj_qkv by its q, k and v segments;
// the core then holds this rank's heads.
class GatedDeltaNet final : public qwen3_next::LinearAttention {
 public:
  GatedDeltaNet(const Args& args, WeightBinder& w, const std::string& p)
      : core_(args, w, p),
        in_proj_qkv_(projection(args, w, p + ".in_proj_qkv", 2 * key_dim(args) + value_dim(args),
                                {key_dim(args), 2 * key_dim(args)})),
        in_proj_z_(projection(args, w, p + ".in_proj_z", value_dim(args))),
        in_proj_b_(projection(args, w, p + ".in_proj_b", args.linear_num_value_heads)),
        in_proj_a_(projection(args, w, p + ".in_proj_a", args.linear_num_value_heads)) {}

  mx::array operator()(const mx::array& inputs, cache::ArraysCache* cache) const override {
    const int B = inputs.shape(0), S = inputs.shape(1);
    auto qkv = in_proj_qkv_(inputs);
    auto z = mx::reshape(in_proj_z_(inputs), {B, S, core_.num_v_heads, core_.head_v_dim});
    auto b = in_proj_b_(inputs);
    auto a = in_proj_a_(inputs);
    return core_(qkv, z, b, a, cache);
  }
  const qwen3_next::GatedDeltaCore& core() const override { return core_; }

 private:
  static int key_dim(const Args& a) { return a.linear_key_head_dim * a.linear_num_key_heads; }
  static int value_dim(const Args& a) { return a.linear_value_head_dim * a.linear_num_value_heads; }
  static nn::Linear projection(const Args& args, WeightBinder& w, const std::string& path, int out_dims,
                               const std::vector<int>& segments = {}) {
    const auto shard = w.tensor_group() ? nn::Shard::all_to_sharded : nn::Shard::none;
    return nn::Linear::load_sharded_inplace(w, path, args.hidden_size, out_dims, false, shard, segments);
  }

  qwen3_next::GatedDeltaCore core_;
  nn::Linear in_proj_qkv_, in_proj_z_, in_proj_b_, in_proj_a_;
};

}  // namespace

Args model_args(const io::ModelConfig& config) {
  const auto& raw = config.raw();
  // ModelArgs.from_dict: a config without text_config is the text model's own.
  if (!raw.contains("text_config")) return text_model_args(config.fields());
  if (!raw["text_config"].is_object())
    throw ConfigError(config.source() + ": 'text_config' must be an object (the text model's arguments)");
  return text_model_args(JsonFields(raw["text_config"], config.source() + ": text_config"));
}

void sanitize(WeightBinder& w) {
  // Model.sanitize: the vision tower goes; every other tensor moves under language_model.
  for (const auto& name : w.names()) {
    if (starts_with(name, "vision_tower") || starts_with(name, "model.visual")) {
      w.discard(name);
    } else if (starts_with(name, "model.language_model")) {
      w.rename(name, "language_model.model" + name.substr(std::string("model.language_model").size()));
    } else if (!starts_with(name, "language_model.")) {
      w.rename(name, "language_model." + name);
    }
  }
  // TextModel.sanitize: the multi-token-prediction head is not part of the model (the tensors stay
  // in the checkpoint) unless --mtp asks for it (then it is bound as language_model.mtp.*, its
  // norms shifted with the others); Hugging Face's conv layout is moved, and its norms then get
  // their 1 added. Its tie check pops "lm_head.weight", which the renaming above has already
  // moved, so a tied checkpoint that still holds a head is refused, as mlx-lm's strict load refuses it.
  if (!w.multi_token_prediction()) w.discard_containing("mtp.");
  qwen3_next::sanitize_conv_and_norms(w, /*norms_when_conv_moved=*/true, /*norms_always=*/false);
}

std::unique_ptr<CausalLM> build_with(const io::ModelConfig& config, WeightBinder& weights, Args args,
                                     const std::function<void(WeightBinder&)>& after_sanitize) {
  // shard(): refused before anything is read when the world size does not split the model.
  args.check_tensor_split(qwen3_next::tensor_shards(weights), config.source());
  sanitize(weights);
  if (after_sanitize) after_sanitize(weights);
  auto factory = [](const Args& a, WeightBinder& w, const std::string& p) -> std::unique_ptr<qwen3_next::LinearAttention> {
    return std::make_unique<GatedDeltaNet>(a, w, p);
  };
  return std::make_unique<qwen3_next::HybridModel>(std::move(args), weights, "language_model.", factory,
                                                   qwen3_next::SparseLayers::all);
}

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  if (config.model_type() == "qwen3_5_moe") return qwen3_5_moe::build(config, weights);
  return build_with(config, weights, model_args(config));
}

}  // namespace mlxrt::model::qwen3_5
