#pragma once
/** Gemma 4's text model (GGUF architecture "gemma4") as mlx-lm's gemma4_text reads it. llama.cpp's
 * Gemma4Model (conversion/gemma.py) spreads the per-layer-type config over its metadata and one
 * tensor, and this gathers it back:
 *   - layer_types from attention.sliding_window_pattern (one flag per layer, true: sliding);
 *   - head_dim / global_head_dim from attention.key_length_swa / key_length;
 *   - the KV-shared layers from attention.shared_kv_layers, and the double-wide MLP of those
 *     layers from the per-layer feed_forward_length;
 *   - the full layers' own key/value heads (head_count_kv per layer) and attention_k_eq_v (full
 *     layers without attn_v);
 *   - the RoPE of each layer type: bases rope.freq_base / rope.freq_base_swa; the full layers'
 *     proportional RoPE, whose rotated share llama.cpp writes as the rope_freqs tensor (a factor
 *     1 per rotated pair, 1e30 per pair left as it is);
 *   - the per-layer token embeddings' width and vocabulary from per_layer_token_embd;
 *   - the experts of 26B-A4B (expert_count, expert_used_count, expert_feed_forward_length).
 * What mlx-lm's model cannot express is refused, naming the key. No MLX dependency. */
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "mlxrt/convert/gguf_file.h"

namespace mlxrt::convert {

/** Sets gemma4_text's fields on `c` (a config whose generic fields are already in place).
 * `data` is the start of the file's data section (the rope_freqs tensor is read from it). */
void add_gemma4_fields(nlohmann::ordered_json& c, const GgufFile& file, const uint8_t* data);

/** The full layers' partial_rotary_factor from llama.cpp's rope_freqs values: `pairs` float32
 * factors, 1 for each rotated pair followed by 1e30 for each pair left unrotated. nullopt when the
 * values are not of that shape. */
std::optional<double> gemma4_rotary_factor(const float* factors, uint64_t pairs);

/** The first layer whose keys and values come from an earlier layer (block_count -
 * attention.shared_kv_layers); its and later layers' attn_k / attn_v / attn_k_norm are dropped,
 * as mlx-lm's sanitize drops them. */
uint64_t gemma4_first_shared_layer(const GgufFile& file);

}  // namespace mlxrt::convert
