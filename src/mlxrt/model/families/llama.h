#pragma once
/** llama.py's ModelArgs and skeleton options, shared with the families mlx-lm builds from it
 * (mistral3's text model, smollm3). */
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/decoder.h"
#include "mlxrt/util/json_file.h"

namespace mlxrt::model::llama {

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size;
  std::optional<int> head_dim, max_position_embeddings;
  int num_key_value_heads;
  bool attention_bias = false, mlp_bias = false;
  double rope_theta = 10000;
  bool rope_traditional = false;
  nlohmann::json rope_scaling;
  bool tie_word_embeddings = true;
  std::optional<int> sliding_window;
  std::vector<bool> sliding;  // per layer: layer_types[i] == "sliding_attention"

  /** ModelArgs.from_dict over `f` (config.json, or a text_config); errors name f.source(). */
  static ModelArgs from_fields(const JsonFields& f);
};

/** llama.py's Model as skeleton options: weights under `model` (e.g. "language_model.model"), the
 * untied head at `lm_head`. */
nn::DecoderOptions decoder_options(const ModelArgs& args, const std::string& source,
                                   const std::string& model = "model", const std::string& lm_head = "lm_head");

/** llama.py's sanitize: drops precomputed rotary frequencies and, with a tied head, `lm_head`. */
void sanitize(const ModelArgs& args, WeightBinder& w, const std::string& lm_head = "lm_head");

}  // namespace mlxrt::model::llama
