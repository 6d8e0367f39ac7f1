#include "mlxrt/model/loader.h"

#include <algorithm>
#include <cctype>
#include <string>

#include <mlx/transforms.h>

#include "mlxrt/io/model_dir.h"
#include "mlxrt/io/weights.h"
#include "mlxrt/model/nn/weight_binder.h"
#include "mlxrt/model/registry.h"

namespace mlxrt::model {

namespace {

// The highest N in tensor names of the form "...layers.N...." (every family keeps its decoder layers
// under such a prefix), or -1 when there is none.
int highest_layer_index(const io::WeightMap& weights) {
  int highest = -1;
  for (const auto& [name, _] : weights) {
    for (size_t at = name.find("layers."); at != std::string::npos; at = name.find("layers.", at + 1)) {
      if (at > 0 && name[at - 1] != '.') continue;
      size_t i = at + 7, digits = 0;
      long long n = 0;
      while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && digits < 9)
        n = n * 10 + (name[i++] - '0'), ++digits;
      if (digits > 0 && (i == name.size() || name[i] == '.')) highest = std::max(highest, static_cast<int>(n));
    }
  }
  return highest;
}

// A config that names more decoder layers than the checkpoint holds would have the family build
// every one of them before the first missing tensor is noticed: num_hidden_layers 1e9 allocates
// until the process is killed. Checked before any layer is built.
void check_layer_count(const io::ModelConfig& config, const io::WeightMap& weights) {
  const json& raw = config.raw();
  const bool nested = !raw.contains("num_hidden_layers") && raw.contains("text_config") &&
                      raw["text_config"].is_object() && raw["text_config"].contains("num_hidden_layers");
  const auto fields = nested ? JsonFields(raw["text_config"], config.fields().source() + " text_config")
                             : config.fields();
  const auto layers = fields.optional<int>("num_hidden_layers");
  if (!layers) return;
  if (*layers < 0) throw ConfigError(fields.source() + ": key 'num_hidden_layers' must not be negative");
  const int held = highest_layer_index(weights) + 1;
  if (*layers > held)
    throw ConfigError(fields.source() + ": key 'num_hidden_layers' is " + std::to_string(*layers) +
                      " but the weights hold " + (held == 0 ? std::string("no numbered layers") :
                                                  "layers 0.." + std::to_string(held - 1)));
}

}  // namespace

std::pair<io::ModelConfig, ResolvedProfile> resolve_model(const std::filesystem::path& path,
                                                          const LoadOptions& options) {
  auto dir = io::resolve_model_dir(path);
  auto config = io::ModelConfig::load(dir);
  ResolveOptions ro;
  ro.artifact_profiles = options.artifact_profiles;
  auto profile = resolve_profile(config, ro);
  return {std::move(config), std::move(profile)};
}

LoadedModel load_model(const std::filesystem::path& path, const LoadOptions& options) {
  auto [config, profile] = resolve_model(path, options);
  assert_resolved_profile(config, profile);
  auto weights = io::load_weights(config.dir());
  check_layer_count(config, weights);
  WeightBinder binder(std::move(weights), config);
  auto model = graph_entry(profile.profile.execution.graph).build(config, binder);
  binder.finish();
  if (!options.lazy) mx::eval(binder.taken());
  return LoadedModel{std::move(config), std::move(profile), std::move(model)};
}

}  // namespace mlxrt::model
