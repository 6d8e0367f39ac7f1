#include "mlxrt/model/loader.h"

#include <mlx/transforms.h>

#include "mlxrt/io/model_dir.h"
#include "mlxrt/io/weights.h"
#include "mlxrt/model/nn/weight_binder.h"
#include "mlxrt/model/registry.h"

namespace mlxrt::model {

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
  WeightBinder binder(io::load_weights(config.dir()), config);
  auto model = graph_entry(profile.profile.execution.graph).build(config, binder);
  binder.finish();
  if (!options.lazy) mx::eval(binder.taken());
  return LoadedModel{std::move(config), std::move(profile), std::move(model)};
}

}  // namespace mlxrt::model
