#include "mlxrt/model/fingerprint.h"

#include <cmath>
#include <cstdio>

namespace mlxrt::model {

using nlohmann::json;

namespace {

const char* const kArchitectureKeys[] = {
    "model_type", "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
    "num_key_value_heads", "head_dim", "vocab_size", "rms_norm_eps", "rope_theta", "rope_scaling",
    "rope_parameters", "rope_traditional", "tie_word_embeddings", "attention_bias", "mlp_bias",
    "max_position_embeddings", "layer_types", "sliding_window", "quantization",
    // Gemma 3: the layer pattern, the sliding layers' RoPE base, the attention scale, and the
    // multimodal config's nested text model.
    "sliding_window_pattern", "rope_local_base_freq", "query_pre_attn_scalar", "text_config",
    // Phi-3: the rotated share of each head and the RoPE's original context length.
    "partial_rotary_factor", "original_max_position_embeddings",
    // Qwen3-Next / Qwen3.5: the gated delta net's shape and the layer interval of full attention.
    "linear_num_value_heads", "linear_num_key_heads", "linear_key_head_dim", "linear_value_head_dim",
    "linear_conv_kernel_dim", "full_attention_interval",
    // Mixture-of-experts blocks.
    "num_experts", "num_experts_per_tok", "decoder_sparse_step", "shared_expert_intermediate_size",
    "moe_intermediate_size", "mlp_only_layers", "norm_topk_prob", "num_local_experts",
    // SmolLM3: which layers rotate.
    "no_rope_layers", "no_rope_layer_interval",
    // Gemma 4: global layers' head size and KV heads, KV sharing, per-layer inputs, shared K/V
    // projections, the MLP width of shared layers, the logit cap, the MoE switch.
    "global_head_dim", "num_global_key_value_heads", "num_kv_shared_layers", "hidden_size_per_layer_input",
    "vocab_size_per_layer_input", "attention_k_eq_v", "use_double_wide_mlp", "final_logit_softcapping",
    "enable_moe_block", "top_k_experts",
    // granite
    "logits_scaling", "attention_multiplier", "embedding_multiplier", "residual_multiplier",
    // minicpm
    "scale_emb", "scale_depth", "dim_model_base",
    // ernie4_5
    "use_bias",
    // seed_oss
    "attention_out_bias",
    // hunyuan_v1_dense
    "use_qk_norm",
    // internlm3
    "bias", "qkv_bias",
    // starcoder2
    "norm_epsilon",
    // stablelm
    "use_qkv_bias", "layer_norm_eps", "use_parallel_residual", "qk_layernorm",
    // cohere2
    "logit_scale", "layer_norm_bias",
    // Gemma 2: the attention logit cap.
    "attn_logit_softcapping",
    // phixtral
    "num_vocab", "model_dim", "num_heads", "num_layers", "rotary_dim",
    // Gemma 3n (its text_config's keys, named here too): AltUp, Laurel, activation sparsity.
    "altup_num_inputs", "altup_coef_clip", "altup_correct_scale", "altup_active_idx", "laurel_rank",
    "activation_sparsity_pattern",
    // lfm2: the conv layers, which layers attend, the MLP width's recipe, the norms' eps.
    "conv_bias", "conv_L_cache", "full_attn_idxs", "block_dim", "block_ff_dim", "block_multiple_of",
    "block_ffn_dim_multiplier", "block_auto_adjust_ff_dim", "norm_eps",
    // minicpm3: the latent attention's ranks and head parts.
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
};

json normalise(const json& v) {
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9.0e15) return static_cast<long long>(d);
    return v;
  }
  if (v.is_array()) {
    json out = json::array();
    for (const auto& e : v) out.push_back(normalise(e));
    return out;
  }
  if (v.is_object()) {
    json out = json::object();  // nlohmann's default object keeps keys sorted
    for (auto it = v.begin(); it != v.end(); ++it) out[it.key()] = normalise(*it);
    return out;
  }
  return v;
}

}  // namespace

std::string canonical_architecture_json(const json& config) {
  json picked = json::object();
  for (const char* key : kArchitectureKeys)
    if (config.contains(key)) picked[key] = normalise(config[key]);
  return picked.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string config_fingerprint(const json& config) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : canonical_architecture_json(config)) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace mlxrt::model
