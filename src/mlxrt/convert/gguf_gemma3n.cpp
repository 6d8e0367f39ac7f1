#include "mlxrt/convert/gguf_gemma3n.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numbers>

#include "mlxrt/util/errors.h"

namespace mlxrt::convert {

namespace {

using nlohmann::ordered_json;

const std::string kPrefix = "model.language_model.";

std::string key(const char* name) { return std::string("gemma3n.") + name; }

// llama.cpp's names -> mlx-lm's, after kPrefix (the per-layer ones after "layers.N.").
const TensorRename kGlobals[] = {
    {"token_embd", "embed_tokens"},
    {"output_norm", "norm"},
    {"per_layer_token_embd", "embed_tokens_per_layer"},
    {"per_layer_model_proj", "per_layer_model_projection"},
    {"per_layer_proj_norm", "per_layer_projection_norm"},
    {"altup_proj", "altup_projections"},  // stacked, split by rows
    {"altup_unembd_proj", "altup_unembed_projections"},
};
const TensorRename kLayer[] = {
    {"attn_norm", "input_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"post_attention_norm", "post_attention_layernorm"},
    {"ffn_norm", "pre_feedforward_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
    {"post_ffw_norm", "post_feedforward_layernorm"},
    {"inp_gate", "per_layer_input_gate"},
    {"proj", "per_layer_projection"},
    {"post_norm", "post_per_layer_input_norm"},
    {"altup_correct_coef", "altup.correction_coefs"},
    {"altup_correct_scale", "altup.correct_output_scale"},  // a parameter of its own, no ".weight"
    {"altup_predict_coef", "altup.prediction_coefs"},
    {"altup_router", "altup.modality_router"},
    {"altup_router_norm", "altup.router_norm"},
    {"laurel_l", "laurel.linear_left"},
    {"laurel_r", "laurel.linear_right"},
    {"laurel_post_norm", "laurel.post_laurel_norm"},
};

/** The stacked AltUp matrices [inputs - 1, hidden, hidden] as one part per matrix. */
std::vector<std::pair<std::string, uint64_t>> stacked_parts(const GgufFile& file, const GgufTensorInfo& tensor,
                                                            const std::string& module) {
  const uint64_t hidden = file.require_uint(key("embedding_length"));
  const auto inputs = file.get_uint(key("altup.num_inputs"));
  if (tensor.dims.size() != 3 || tensor.dims[0] != hidden || tensor.dims[1] != hidden ||
      (inputs && tensor.dims[2] + 1 != *inputs))
    throw WeightsError(file.source + ": tensor '" + tensor.name + "' must stack " +
                       (inputs ? std::to_string(*inputs - 1) : std::string("altup.num_inputs - 1")) + " matrices of " +
                       std::to_string(hidden) + " x " + std::to_string(hidden) + " (one per AltUp input after the first)");
  std::vector<std::pair<std::string, uint64_t>> parts;
  for (uint64_t i = 0; i < tensor.dims[2]; ++i)
    parts.emplace_back(kPrefix + module + "." + std::to_string(i) + ".weight", hidden);
  return parts;
}

/** Whether rows [begin, end) of a 2-D tensor are all zero bytes (llama.cpp's padding; a zero
 * block of every GGUF type is zero bytes). */
bool zero_rows(const GgufTensorInfo& t, const uint8_t* data, uint64_t begin, uint64_t end) {
  const uint64_t row_bytes = t.dims[0] / t.traits.block_elements * t.traits.block_bytes;
  const uint8_t* p = data + t.offset;
  for (uint64_t i = begin * row_bytes; i < end * row_bytes; ++i)
    if (p[i] != 0) return false;
  return true;
}

/** Which layers slide: llama.cpp's flags, or its own pattern for gemma3n when the file has none. */
ordered_json layer_types(const GgufFile& file, uint64_t layers, std::vector<std::string>& notes) {
  const std::string k = key("attention.sliding_window_pattern");
  const auto* flags = file.get_integers(k);
  if (flags && flags->size() != layers)
    throw ConfigError(file.source + ": metadata '" + k + "' must hold one flag per layer (" + std::to_string(layers) +
                      ", true: sliding attention)");
  if (!flags)
    notes.push_back("layer_types: every fifth layer full attention, the others sliding ('" + k +
                    "' is not in the file; llama.cpp's pattern for gemma3n and the published checkpoints')");
  ordered_json types = ordered_json::array();
  for (uint64_t i = 0; i < layers; ++i) {
    const bool sliding = flags ? (*flags)[i] != 0 : (i + 1) % 5 != 0;
    types.push_back(sliding ? "sliding_attention" : "full_attention");
  }
  return types;
}

/** The MLP width: one for all layers, or a list when llama.cpp wrote one per layer. */
ordered_json mlp_widths(const GgufFile& file, uint64_t layers) {
  const std::string k = key("feed_forward_length");
  auto it = file.metadata.find(k);
  if (it == file.metadata.end()) throw ConfigError(file.source + ": missing required metadata '" + k + "'");
  if (it->second.type != GgufValueType::array) return file.require_uint(k);
  const auto* values = file.get_integers(k);
  if (values->size() != layers)
    throw ConfigError(file.source + ": metadata '" + k + "' must hold one entry per layer (" + std::to_string(layers) +
                      "), got " + std::to_string(values->size()));
  ordered_json out = ordered_json::array();
  for (int64_t v : *values) {
    if (v <= 0) throw ConfigError(file.source + ": metadata '" + k + "' holds " + std::to_string(v) + ", not a positive width");
    out.push_back(v);
  }
  return out;
}

/** Checks the KV-shared layers: each reads the last earlier layer of its type, which must exist. */
uint64_t shared_layers(const GgufFile& file, const ordered_json& types) {
  const uint64_t layers = types.size();
  const uint64_t shared = file.require_uint(key("attention.shared_kv_layers"));
  if (shared >= layers)
    throw ConfigError(file.source + ": metadata '" + key("attention.shared_kv_layers") + "' = " +
                      std::to_string(shared) + " must be below the layer count " + std::to_string(layers));
  for (uint64_t i = layers - shared; i < layers; ++i) {
    bool found = false;
    for (uint64_t j = 0; j < layers - shared; ++j) found = found || types[j] == types[i];
    if (!found)
      throw UnsupportedError(file.source + ": layer " + std::to_string(i) + " shares keys and values, but no layer "
                             "before the shared ones is of its type (" + types[i].get<std::string>() + ")");
  }
  for (const char* type : {"sliding_attention", "full_attention"})
    if (std::find(types.begin(), types.end(), type) == types.end())
      throw UnsupportedError(file.source + ": no " + type + " layer: mlx-lm's gemma3n needs layers of both kinds");
  return shared;
}

ordered_json sparsity_pattern(const GgufFile& file, uint64_t layers) {
  const std::string k = key("activation_sparsity_scale");
  const auto* scales = file.get_reals(k);
  if (!scales) throw ConfigError(file.source + ": missing required metadata '" + k + "'");
  if (scales->size() != layers)
    throw ConfigError(file.source + ": metadata '" + k + "' must hold one entry per layer (" + std::to_string(layers) +
                      "), got " + std::to_string(scales->size()));
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < scales->size(); ++i) {
    auto s = gemma3n_sparsity((*scales)[i]);
    if (!s)
      throw ConfigError(file.source + ": metadata '" + k + "' entry " + std::to_string(i) + " (" +
                        std::to_string((*scales)[i]) + ") is not the normal quantile of a sparsity in [0, 1)");
    out.push_back(*s);
  }
  return out;
}

/** The per-layer token embeddings' vocabulary; llama.cpp's zero rows past the published one are dropped. */
uint64_t per_layer_vocab(const GgufFile& file, const uint8_t* data, uint64_t width, std::vector<std::string>& notes) {
  const auto* t = file.find_tensor("per_layer_token_embd.weight");
  if (!t || t->dims.size() != 2 || t->dims[0] != width)
    throw WeightsError(file.source + ": tensor 'per_layer_token_embd.weight' must be 2-D with " + std::to_string(width) +
                       " values per token (layers x " + key("embedding_length_per_layer_input") + ")");
  const uint64_t rows = t->dims[1];
  if (rows <= kGemma3nPerLayerVocab || !zero_rows(*t, data, kGemma3nPerLayerVocab, rows)) return rows;
  notes.push_back("vocab_size_per_layer_input = " + std::to_string(kGemma3nPerLayerVocab) +
                  ", the published checkpoints' value: 'per_layer_token_embd.weight' has " + std::to_string(rows) +
                  " rows, those past it zeros that llama.cpp's converter added (dropped)");
  return kGemma3nPerLayerVocab;
}

double float_or(const GgufFile& file, const char* name, double fallback, const char* field, const char* why,
                std::vector<std::string>& notes) {
  auto v = file.get_float(key(name));
  if (v && (!std::isfinite(static_cast<float>(*v)) || *v <= 0))
    throw ConfigError(file.source + ": metadata '" + key(name) + "' is not a finite, positive number");
  if (v) return shortest_float32(*v);
  char value[32];
  std::snprintf(value, sizeof value, "%.1f", fallback);
  notes.push_back(std::string(field) + " = " + value + " ('" + key(name) + "' is not in the file; " + why + ")");
  return fallback;
}

}  // namespace

std::optional<double> gemma3n_sparsity(double m) {
  if (std::isnan(m) || m == INFINITY) return std::nullopt;
  if (m == -INFINITY) return 0.0;
  const double s = 0.5 * std::erfc(-m / std::sqrt(2.0));
  if (!(s < 1.0)) return std::nullopt;
  // torch computed the quantile of float32(s) in float32: allow a few ulps of m (through the
  // normal density) and float32's rounding of s.
  const float mf = std::fabs(static_cast<float>(m));
  const double ulp_m = static_cast<double>(std::nextafter(mf, INFINITY) - mf);
  const float sf = static_cast<float>(s);
  const double ulp_s = static_cast<double>(std::nextafter(sf, 2.0f) - sf);
  const double density = std::exp(-0.5 * m * m) / std::sqrt(2.0 * std::numbers::pi);
  const double tolerance = density * 16 * ulp_m + ulp_s;
  char buf[64];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, s);
    const double d = std::strtod(buf, nullptr);
    if (std::fabs(d - s) <= tolerance) return d;
  }
  return shortest_float32(s);
}

std::optional<TensorPlan> plan_gemma3n_tensor(const GgufFile& file, const GgufTensorInfo& tensor) {
  const auto dot = tensor.name.rfind('.');
  const std::string base = dot == std::string::npos ? tensor.name : tensor.name.substr(0, dot);
  const std::string suffix = dot == std::string::npos ? "" : tensor.name.substr(dot);
  if (base == "output")
    throw UnsupportedError(file.source + ": tensor '" + tensor.name + "': mlx-lm's gemma3n ties its output head to the "
                           "token embeddings and has no head of its own");
  if (suffix != ".weight")
    throw UnsupportedError(file.source + ": tensor '" + tensor.name + "' is not known for architecture 'gemma3n' "
                           "(mlx-lm's gemma3n has weights only, no biases)");
  // The float32 tensors llama.cpp widened from the checkpoint's 16-bit type (norms, AltUp coefficients).
  const bool narrow = tensor.type() == GgmlType::f32;
  for (const auto& r : kGlobals) {
    if (base != r.gguf) continue;
    TensorPlan plan{kPrefix + r.hf + suffix, std::nullopt};
    plan.narrow = narrow;
    if (base == "altup_proj" || base == "altup_unembd_proj") plan.row_parts = stacked_parts(file, tensor, r.hf);
    return plan;
  }
  if (base.rfind("blk.", 0) == 0) {
    const auto layer_end = base.find('.', 4);
    const std::string layer = base.substr(4, layer_end == std::string::npos ? std::string::npos : layer_end - 4);
    const bool numeric = !layer.empty() && layer.size() < 10 && layer.find_first_not_of("0123456789") == std::string::npos;
    if (numeric && layer_end != std::string::npos) {
      const std::string rest = base.substr(layer_end + 1);
      for (const auto& r : kLayer) {
        if (rest != r.gguf) continue;
        const std::string at = kPrefix + "layers." + layer + "." + r.hf;
        TensorPlan plan{rest == "altup_correct_scale" ? at : at + suffix, std::nullopt};
        plan.narrow = narrow;
        return plan;
      }
    }
  }
  throw UnsupportedError(file.source + ": tensor '" + tensor.name + "' is not known for architecture 'gemma3n'");
}

void keep_gemma3n_per_layer_rows(TensorPlan& plan, const GgufTensorInfo& tensor, const ordered_json& config) {
  if (plan.hf_name != kPrefix + "embed_tokens_per_layer.weight" || tensor.dims.size() != 2) return;
  const uint64_t keep = config.at("text_config").at("vocab_size_per_layer_input").get<uint64_t>();
  if (keep < tensor.dims[1]) plan.row_parts = {{plan.hf_name, keep}};
}

void add_gemma3n_fields(ordered_json& c, const GgufFile& file, const uint8_t* data, std::vector<std::string>& notes) {
  const uint64_t layers = c["num_hidden_layers"].get<uint64_t>();
  const uint64_t hidden = c["hidden_size"].get<uint64_t>();
  if (!c["rope_scaling"].is_null())
    throw UnsupportedError(file.source + ": metadata '" + key("rope.scaling.type") + "': mlx-lm's gemma3n runs "
                           "plain RoPE (it reads no rope_scaling)");
  const ordered_json types = layer_types(file, layers, notes);
  const uint64_t shared = shared_layers(file, types);

  const uint64_t per_layer_width = file.require_uint(key("embedding_length_per_layer_input"));
  if (per_layer_width == 0)
    throw ConfigError(file.source + ": metadata '" + key("embedding_length_per_layer_input") + "' must be positive");
  const uint64_t vocab_per_layer = per_layer_vocab(file, data, layers * per_layer_width, notes);

  const uint64_t inputs = file.require_uint(key("altup.num_inputs"));
  const uint64_t active = file.require_uint(key("altup.active_idx"));
  if (inputs < 2 || active >= inputs)
    throw ConfigError(file.source + ": metadata '" + key("altup.num_inputs") + "' = " + std::to_string(inputs) + " and '" +
                      key("altup.active_idx") + "' = " + std::to_string(active) +
                      ": need at least 2 AltUp inputs and an active index below their count");
  for (const char* stacked : {"altup_proj.weight", "altup_unembd_proj.weight"})
    if (!file.find_tensor(stacked)) throw WeightsError(file.source + ": missing tensor '" + std::string(stacked) + "'");

  const auto* laurel = file.find_tensor("blk.0.laurel_l.weight");
  if (!laurel || laurel->dims.size() != 2 || laurel->dims[0] != hidden || laurel->dims[1] == 0)
    throw WeightsError(file.source + ": tensor 'blk.0.laurel_l.weight' must be 2-D [" + std::to_string(hidden) +
                       ", laurel rank] (LAuReL's left projection)");

  const uint64_t vocab = c["vocab_size"].get<uint64_t>();
  if (vocab == kGemma3nPerLayerVocab)
    notes.push_back("vocab_size = " + std::to_string(vocab) + ", the rows of 'token_embd.weight': the published "
                    "checkpoints' " + std::to_string(kGemma3nVocab) + " include vision and audio token rows that this "
                    "file does not hold (their logits are left out)");
  const double local_base = float_or(file, "rope.freq_base_swa", 10000.0, "rope_local_base_freq",
                                     "llama.cpp's sliding-layer RoPE base and the published checkpoints'", notes);
  const double softcap = float_or(file, "final_logit_softcapping", 30.0, "final_logit_softcapping",
                                  "llama.cpp caps gemma3n's logits at 30 without it, as the published checkpoints do", notes);
  char clip[32];
  std::snprintf(clip, sizeof clip, "%.1f", kGemma3nCoefClip);
  notes.push_back(std::string("altup_coef_clip = ") + clip + ", the published checkpoints' value (not in the file: "
                  "llama.cpp does not clip the AltUp coefficients)");
  notes.push_back("altup_correct_scale = true, the published checkpoints' value (not in the file: llama.cpp always "
                  "scales the corrected prediction by altup_correct_scale)");

  ordered_json text;
  text["model_type"] = "gemma3n_text";
  text["hidden_size"] = hidden;
  text["num_hidden_layers"] = layers;
  text["intermediate_size"] = mlp_widths(file, layers);
  text["num_attention_heads"] = c["num_attention_heads"];
  text["head_dim"] = c["head_dim"];
  text["rms_norm_eps"] = c["rms_norm_eps"];
  text["vocab_size"] = vocab;
  text["num_key_value_heads"] = c["num_key_value_heads"];
  text["num_kv_shared_layers"] = shared;
  text["vocab_size_per_layer_input"] = vocab_per_layer;
  text["sliding_window"] = file.require_uint(key("attention.sliding_window"));
  text["max_position_embeddings"] = c["max_position_embeddings"];
  text["rope_local_base_freq"] = local_base;
  text["rope_theta"] = c["rope_theta"];
  text["final_logit_softcapping"] = softcap;
  text["layer_types"] = types;
  text["activation_sparsity_pattern"] = sparsity_pattern(file, layers);
  text["hidden_size_per_layer_input"] = per_layer_width;
  text["altup_num_inputs"] = inputs;
  text["altup_coef_clip"] = kGemma3nCoefClip;
  text["altup_correct_scale"] = true;
  text["altup_active_idx"] = active;
  text["laurel_rank"] = laurel->dims[1];
  text["rope_scaling"] = nullptr;
  text["hidden_activation"] = "gelu_pytorch_tanh";
  text["tie_word_embeddings"] = true;
  ordered_json out;
  out["architectures"] = c["architectures"];
  out["model_type"] = c["model_type"];
  out["text_config"] = std::move(text);
  out["tie_word_embeddings"] = true;
  c = std::move(out);
}

}  // namespace mlxrt::convert
