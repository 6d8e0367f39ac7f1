// Port of mlx_lm/models/mistral3.py (mlx-lm 0.32.2): Mistral 3 (and llava, which mlx-lm remaps
// here) runs the text model of its text_config, under language_model.: ministral3.py's for a
// "ministral3" text model, llama.py's otherwise; the vision tower and projector are dropped.
#include "mlxrt/model/families/families.h"
#include "mlxrt/model/families/llama.h"

namespace mlxrt::model::mistral3 {

namespace {

using nlohmann::json;

// sanitize(): drop the vision tower and projector; "model.language_model." keys (the transformers
// layout) become "language_model.model.", and every other key is put under language_model.
void sanitize(WeightBinder& w) {
  w.discard_containing("vision_tower");
  w.discard_containing("multi_modal_projector");
  w.rename_keys([](const std::string& key) -> std::string {
    const std::string hf = "model.language_model.", ours = "language_model.";
    if (key.rfind(hf, 0) == 0) return ours + "model." + key.substr(hf.size());
    if (key.rfind(ours, 0) == 0) return {};
    return ours + key;
  });
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto& raw = config.raw();
  if (!raw.contains("text_config") || !raw["text_config"].is_object())
    throw ConfigError(config.source() + ": 'text_config' must be an object (mistral3 keeps the text model's " +
                      "arguments there)");
  json text = raw["text_config"];
  // ModelArgs.__post_init__: the text model's head is untied unless text_config says otherwise.
  if (!text.contains("tie_word_embeddings")) text["tie_word_embeddings"] = false;
  const JsonFields fields(text, config.source() + ": text_config");
  const auto text_type = text.contains("model_type") && text["model_type"].is_string()
                             ? text["model_type"].get<std::string>()
                             : std::string();
  if (text_type == "mistral4")
    throw UnsupportedError(config.source() + ": text_config.model_type \"mistral4\" is not supported by the " +
                           "mistral3 graph (supported: \"ministral3\", and llama.py's text models such as " +
                           "\"mistral\")");
  sanitize(weights);
  nn::DecoderOptions options;
  if (text_type == "ministral3") {
    options = ministral3::text_options(fields, weights, "language_model.model", "language_model.lm_head");
  } else {
    const auto args = llama::ModelArgs::from_fields(fields);
    llama::sanitize(args, weights, "language_model.lm_head");
    options = llama::decoder_options(args, fields.source(), "language_model.model", "language_model.lm_head");
  }
  // mistral3.py's Model has no make_cache: every layer gets a KVCache (sliding layers keep their
  // windowed mask over it), or a RotatingKVCache of max_kv_size.
  options.defines_make_cache = false;
  return std::make_unique<nn::Decoder>(std::move(options), weights);
}

}  // namespace mlxrt::model::mistral3
