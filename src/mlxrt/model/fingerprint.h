#pragma once
/** The config fingerprint: a structural identity of a model's architecture.
 *
 * Definition: take these keys of config.json when present (absent keys are left out) —
 *   model_type, hidden_size, num_hidden_layers, intermediate_size, num_attention_heads,
 *   num_key_value_heads, head_dim, vocab_size, rms_norm_eps, rope_theta, rope_scaling,
 *   rope_parameters, rope_traditional, tie_word_embeddings, attention_bias, mlp_bias,
 *   max_position_embeddings, layer_types, sliding_window, quantization, sliding_window_pattern,
 *   rope_local_base_freq, query_pre_attn_scalar, text_config, partial_rotary_factor,
 *   original_max_position_embeddings —
 * normalise numbers (a float with an integral value is written as an integer), serialise as
 * canonical JSON (object keys sorted, no whitespace, UTF-8), and hash the bytes with 64-bit
 * FNV-1a; the fingerprint is the hash as 16 lowercase hex digits. It guards against a declared
 * profile being applied to a different architecture; it is not a security checksum. Paths,
 * generation settings and tokenizer files do not enter it, so relocating a model keeps it. */
#include <string>

#include <nlohmann/json.hpp>

namespace mlxrt::model {

/** The canonical JSON text the fingerprint hashes. */
std::string canonical_architecture_json(const nlohmann::json& config);

std::string config_fingerprint(const nlohmann::json& config);

}  // namespace mlxrt::model
