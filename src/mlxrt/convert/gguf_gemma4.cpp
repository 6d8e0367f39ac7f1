#include "mlxrt/convert/gguf_gemma4.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "mlxrt/convert/gguf_arch.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::convert {

namespace {

using nlohmann::ordered_json;

std::string key(const char* name) { return std::string("gemma4.") + name; }

/** A metadata value llama.cpp writes either once for every layer or as one entry per layer
 * (feed_forward_length, attention.head_count_kv). */
std::vector<uint64_t> per_layer(const GgufFile& file, const char* name, uint64_t layers) {
  const std::string k = key(name);
  auto it = file.metadata.find(k);
  if (it == file.metadata.end()) throw ConfigError(file.source + ": missing required metadata '" + k + "'");
  if (it->second.type != GgufValueType::array) return std::vector<uint64_t>(layers, file.require_uint(k));
  const auto* values = file.get_integers(k);
  if (values->size() != layers)
    throw ConfigError(file.source + ": metadata '" + k + "' must hold one entry per layer (" + std::to_string(layers) +
                      "), got " + std::to_string(values->size()));
  std::vector<uint64_t> out;
  for (int64_t v : *values) {
    if (v <= 0) throw ConfigError(file.source + ": metadata '" + k + "' holds " + std::to_string(v) + ", not a positive count");
    out.push_back(static_cast<uint64_t>(v));
  }
  return out;
}

/** One value for the layers `pick` selects, which must all agree (mlx-lm has one per layer type). */
template <typename Pick>
std::optional<uint64_t> common_value(const GgufFile& file, const char* name, const std::vector<uint64_t>& values,
                                     Pick pick, const char* which) {
  std::optional<uint64_t> out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!pick(i)) continue;
    if (out && *out != values[i])
      throw UnsupportedError(file.source + ": metadata '" + key(name) + "' differs between " + which + " (layer " +
                             std::to_string(i) + " has " + std::to_string(values[i]) + ", an earlier one " +
                             std::to_string(*out) + "): mlx-lm's gemma4_text has one value for them");
    out = values[i];
  }
  return out;
}

double positive_float(const GgufFile& file, const char* name) {
  auto v = file.get_float(key(name));
  if (!v || !std::isfinite(static_cast<float>(*v)) || *v <= 0)
    throw ConfigError(file.source + ": metadata '" + key(name) + "' is missing or not a finite, positive number");
  return shortest_float32(*v);
}

/** The full layers' rotated share, from the rope_freqs tensor llama.cpp writes for them. */
double full_rotary_factor(const GgufFile& file, const uint8_t* data, uint64_t head_dim_full) {
  const auto* t = file.find_tensor("rope_freqs.weight");
  if (!t)
    throw ConfigError(file.source + ": missing tensor 'rope_freqs.weight' (llama.cpp's record of the full "
                      "attention layers' proportional RoPE: which dimensions rotate)");
  if (t->type() != GgmlType::f32 || t->dims.size() != 1 || t->n_elements * 2 != head_dim_full)
    throw WeightsError(file.source + ": tensor 'rope_freqs.weight' must be a 1-D F32 vector of " +
                       std::to_string(head_dim_full / 2) + " factors (one per pair of the full layers' heads)");
  std::vector<float> factors(t->n_elements);
  std::memcpy(factors.data(), data + t->offset, 4 * factors.size());
  auto factor = gemma4_rotary_factor(factors.data(), factors.size());
  if (!factor)
    throw UnsupportedError(file.source + ": tensor 'rope_freqs.weight' is not 1 for the rotated pairs followed by "
                           "1e30 for the others: mlx-lm's proportional RoPE cannot express it");
  return *factor;
}

}  // namespace

std::optional<double> gemma4_rotary_factor(const float* factors, uint64_t pairs) {
  uint64_t rotated = 0;
  while (rotated < pairs && factors[rotated] == 1.0f) ++rotated;
  for (uint64_t i = rotated; i < pairs; ++i)
    if (!(factors[i] >= 1e30f)) return std::nullopt;
  if (pairs == 0) return std::nullopt;
  // llama.cpp: rotated pairs = int(head_dim * factor / 2); the factor as HF writes it (0.25) is
  // the shortest decimal of that share.
  return shortest_float32(static_cast<double>(rotated) / static_cast<double>(pairs));
}

uint64_t gemma4_first_shared_layer(const GgufFile& file) {
  const uint64_t layers = file.require_uint(key("block_count"));
  const uint64_t shared = file.get_uint(key("attention.shared_kv_layers")).value_or(0);
  if (shared >= layers)
    throw ConfigError(file.source + ": metadata '" + key("attention.shared_kv_layers") + "' = " +
                      std::to_string(shared) + " must be below the layer count " + std::to_string(layers));
  return layers - shared;
}

void add_gemma4_fields(ordered_json& c, const GgufFile& file, const uint8_t* data) {
  const uint64_t layers = c["num_hidden_layers"].get<uint64_t>();
  const uint64_t first_shared = gemma4_first_shared_layer(file);

  // Which layers slide: one flag per layer.
  const auto* flags = file.get_integers(key("attention.sliding_window_pattern"));
  if (!flags || flags->size() != layers)
    throw ConfigError(file.source + ": metadata '" + key("attention.sliding_window_pattern") +
                      "' must hold one flag per layer (" + std::to_string(layers) + ", true: sliding attention)");
  std::vector<bool> sliding;
  ordered_json types = ordered_json::array();
  for (int64_t f : *flags) {
    sliding.push_back(f != 0);
    types.push_back(f ? "sliding_attention" : "full_attention");
  }
  // mlx-lm's KV-shared layers read the last earlier layer of their type.
  for (uint64_t i = first_shared; i < layers; ++i) {
    bool found = false;
    for (uint64_t j = 0; j < first_shared; ++j) found = found || sliding[j] == sliding[i];
    if (!found)
      throw UnsupportedError(file.source + ": layer " + std::to_string(i) + " shares keys and values, but no layer "
                             "before the shared ones is of its type (" + types[i].get<std::string>() + ")");
  }

  // Head sizes: the sliding layers' and the full layers'; values as wide as keys.
  const uint64_t head_dim_full = file.require_uint(key("attention.key_length"));
  const uint64_t head_dim_swa = file.get_uint(key("attention.key_length_swa")).value_or(head_dim_full);
  if (file.get_uint(key("attention.value_length")).value_or(head_dim_full) != head_dim_full ||
      file.get_uint(key("attention.value_length_swa")).value_or(head_dim_swa) != head_dim_swa)
    throw UnsupportedError(file.source + ": value heads of another size than the key heads (" +
                           key("attention.value_length") + "): mlx-lm's gemma4_text has one head size per layer type");
  if (head_dim_full == 0 || head_dim_swa == 0 || head_dim_full % 2 != 0)
    throw ConfigError(file.source + ": metadata '" + key("attention.key_length") + "' and '" +
                      key("attention.key_length_swa") + "' must be positive, the full layers' even");

  // The MLP widths: one for the layers that compute their keys, doubled or not on the shared ones.
  const auto widths = per_layer(file, "feed_forward_length", layers);
  const uint64_t width = *common_value(file, "feed_forward_length", widths,
                                       [&](size_t i) { return i < first_shared; }, "the layers that compute their keys");
  auto shared_width = common_value(file, "feed_forward_length", widths,
                                   [&](size_t i) { return i >= first_shared; }, "the KV-shared layers");
  if (shared_width && *shared_width != width && *shared_width != 2 * width)
    throw UnsupportedError(file.source + ": metadata '" + key("feed_forward_length") + "' gives the KV-shared layers " +
                           std::to_string(*shared_width) + ", neither " + std::to_string(width) + " nor twice it");

  // Key/value heads per layer type; full layers with keys and no values share one projection.
  const auto kv = per_layer(file, "attention.head_count_kv", layers);
  const auto kv_swa = common_value(file, "attention.head_count_kv", kv, [&](size_t i) { return sliding[i]; },
                                   "the sliding layers");
  const auto kv_full = common_value(file, "attention.head_count_kv", kv, [&](size_t i) { return !sliding[i]; },
                                    "the full layers");
  std::optional<bool> k_eq_v;
  for (uint64_t i = 0; i < first_shared; ++i) {
    const std::string blk = "blk." + std::to_string(i) + ".";
    if (!file.find_tensor(blk + "attn_k.weight"))
      throw WeightsError(file.source + ": missing tensor '" + blk + "attn_k.weight' (layer " + std::to_string(i) +
                         " computes its own keys)");
    const bool no_v = file.find_tensor(blk + "attn_v.weight") == nullptr;
    if (sliding[i] && no_v)
      throw WeightsError(file.source + ": missing tensor '" + blk + "attn_v.weight' (a sliding layer)");
    if (sliding[i]) continue;
    if (k_eq_v && *k_eq_v != no_v)
      throw UnsupportedError(file.source + ": some full attention layers have 'attn_v' and some do not: mlx-lm's "
                             "gemma4_text takes values from the keys on all of them (attention_k_eq_v) or none");
    k_eq_v = no_v;
  }
  if (kv_swa && kv_full && *kv_swa != *kv_full && !k_eq_v.value_or(false))
    throw UnsupportedError(file.source + ": metadata '" + key("attention.head_count_kv") + "' gives the full layers " +
                           std::to_string(*kv_full) + " key/value heads and the sliding ones " +
                           std::to_string(*kv_swa) + ": mlx-lm's gemma4_text allows that only with attention_k_eq_v");

  // RoPE: the sliding layers rotate whole heads; the full layers' rotated share is in rope_freqs.
  if (auto rot = file.get_uint(key("rope.dimension_count")); rot && *rot != head_dim_full)
    throw UnsupportedError(file.source + ": metadata '" + key("rope.dimension_count") + "' = " + std::to_string(*rot) +
                           " is not the full layers' head size " + std::to_string(head_dim_full));
  if (auto rot = file.get_uint(key("rope.dimension_count_swa")); rot && *rot != head_dim_swa)
    throw UnsupportedError(file.source + ": metadata '" + key("rope.dimension_count_swa") + "' = " +
                           std::to_string(*rot) + ": mlx-lm's gemma4_text rotates the sliding layers' whole heads (" +
                           std::to_string(head_dim_swa) + ")");
  const double full_factor = full_rotary_factor(file, data, head_dim_full);

  // Per-layer token embeddings: width per layer, and their own vocabulary.
  const uint64_t per_layer_width = file.get_uint(key("embedding_length_per_layer_input")).value_or(0);
  uint64_t per_layer_vocab = c["vocab_size"].get<uint64_t>();
  if (per_layer_width > 0) {
    const auto* t = file.find_tensor("per_layer_token_embd.weight");
    if (!t || t->dims.size() != 2 || t->dims[0] != layers * per_layer_width)
      throw WeightsError(file.source + ": tensor 'per_layer_token_embd.weight' must be 2-D with " +
                         std::to_string(layers * per_layer_width) + " values per token (layers x " +
                         key("embedding_length_per_layer_input") + ")");
    per_layer_vocab = t->dims[1];
  }
  // Experts (26B-A4B): mlx-lm's gemma4_text routes in every layer when it routes at all.
  const uint64_t experts = file.get_uint(key("expert_count")).value_or(0);
  for (uint64_t i = 0; i < layers; ++i)
    if ((file.find_tensor("blk." + std::to_string(i) + ".ffn_gate_inp.weight") != nullptr) != (experts > 0))
      throw UnsupportedError(file.source + ": layer " + std::to_string(i) + (experts > 0 ? " has no" : " has a") +
                             " router (ffn_gate_inp) but '" + key("expert_count") + "' is " + std::to_string(experts) +
                             ": mlx-lm's gemma4_text routes in every layer or in none");
  if (experts > 0) {
    const uint64_t used = file.require_uint(key("expert_used_count"));
    if (used == 0 || used > experts)
      throw ConfigError(file.source + ": metadata '" + key("expert_used_count") + "' = " + std::to_string(used) +
                        " must be between 1 and " + key("expert_count") + " = " + std::to_string(experts));
    c["num_experts"] = experts;
    c["top_k_experts"] = used;
    c["moe_intermediate_size"] = file.require_uint(key("expert_feed_forward_length"));
  }

  c["intermediate_size"] = width;
  c["head_dim"] = head_dim_swa;
  c["global_head_dim"] = head_dim_full;
  c["global_partial_rotary_factor"] = full_factor;
  c["num_key_value_heads"] = kv_swa.value_or(kv_full.value_or(1));
  c["num_global_key_value_heads"] =
      k_eq_v.value_or(false) && kv_full ? ordered_json(*kv_full) : ordered_json(nullptr);
  c["attention_k_eq_v"] = k_eq_v.value_or(false);
  c["num_kv_shared_layers"] = layers - first_shared;
  c["use_double_wide_mlp"] = shared_width && *shared_width == 2 * width && *shared_width != width;
  c["hidden_size_per_layer_input"] = per_layer_width;
  c["vocab_size_per_layer_input"] = per_layer_vocab;
  c["sliding_window"] = file.require_uint(key("attention.sliding_window"));
  c["layer_types"] = types;
  c.erase("rope_theta");
  c.erase("rope_scaling");
  c["rope_parameters"] = {
      {"full_attention",
       {{"partial_rotary_factor", full_factor}, {"rope_theta", positive_float(file, "rope.freq_base")},
        {"rope_type", "proportional"}}},
      {"sliding_attention",
       {{"partial_rotary_factor", 1.0},
        // llama.cpp's sliding layers take the full layers' base when the file has none of theirs.
        {"rope_theta", positive_float(file, file.get_float(key("rope.freq_base_swa")) ? "rope.freq_base_swa" : "rope.freq_base")},
        {"rope_type", "default"}}}};
  auto cap = file.get_float(key("final_logit_softcapping"));
  if (cap && (!std::isfinite(static_cast<float>(*cap)) || *cap <= 0))
    throw ConfigError(file.source + ": metadata '" + key("final_logit_softcapping") + "' is not a finite, positive number");
  c["final_logit_softcapping"] = cap ? ordered_json(shortest_float32(*cap)) : ordered_json(nullptr);
  c["hidden_activation"] = "gelu_pytorch_tanh";
  c["enable_moe_block"] = experts > 0;
  c.erase("attention_bias");
  c.erase("mlp_bias");
}

}  // namespace mlxrt::convert
