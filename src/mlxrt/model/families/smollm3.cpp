// Port of mlx_lm/models/smollm3.py (mlx-lm 0.32.2): llama.py's model whose NoPE layers rotate
// nothing. no_rope_layers[i] is 1 where layer i uses RoPE (by default every layer but each
// no_rope_layer_interval-th). smollm3.py's Model has no make_cache.
#include "mlxrt/model/families/families.h"
#include "mlxrt/model/families/llama.h"

namespace mlxrt::model::smollm3 {

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto f = config.fields();
  const auto args = llama::ModelArgs::from_fields(f);
  const int interval = f.value_or<int>("no_rope_layer_interval", 4);
  std::vector<bool> use_rope;
  if (f.has("no_rope_layers")) {
    const auto& list = f.raw()["no_rope_layers"];
    if (!list.is_array() || static_cast<int>(list.size()) != args.num_hidden_layers)
      throw ConfigError(config.source() + ": 'no_rope_layers' must be a list of " +
                        std::to_string(args.num_hidden_layers) + " integers (one per layer; `no_rope_layers` " +
                        "length mismatch)");
    for (const auto& v : list) {
      if (!v.is_number() && !v.is_boolean())
        throw ConfigError(config.source() + ": 'no_rope_layers' entries must be 0 or 1, got " + v.dump());
      use_rope.push_back(v.is_boolean() ? v.get<bool>() : v.get<double>() != 0);
    }
  } else {
    if (interval == 0) throw ConfigError(config.source() + ": 'no_rope_layer_interval' must not be 0");
    // int((i + 1) % interval != 0), with Python's modulo
    for (int i = 0; i < args.num_hidden_layers; ++i) use_rope.push_back(((i + 1) % interval + interval) % interval != 0);
  }
  llama::sanitize(args, weights);
  auto options = llama::decoder_options(args, config.source());
  // smollm3.py builds llama.LlamaModel, and defines no make_cache of its own.
  options.defines_make_cache = false;
  for (int i = 0; i < args.num_hidden_layers; ++i)
    if (!use_rope[i]) options.layers[i].attention.rope.reset();
  return std::make_unique<nn::Decoder>(std::move(options), weights);
}

}  // namespace mlxrt::model::smollm3
