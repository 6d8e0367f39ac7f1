#include "mlxrt/model/expert_loading.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <unordered_set>

#include <mlx/transforms.h>

#include "mlxrt/io/weights.h"
#include "mlxrt/model/nn/weight_binder.h"
#include "mlxrt/model/registry.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::model {

namespace {

std::string gb_text(uint64_t bytes) {
  char buf[32];
  // Rounded up to the kilobyte, so that the minimum printed is a budget that suffices.
  std::snprintf(buf, sizeof buf, "%.6f", std::ceil(static_cast<double>(bytes) / 1e3) / 1e6);
  return buf;
}

std::string budget_text(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(bytes) / 1e9);
  return buf;
}

void check_expert_budget(const nn::ExpertStore& experts, const io::ModelConfig& config, uint64_t budget) {
  if (experts.num_blocks() == 0)
    throw UsageError("--expert-memory: model type '" + config.model_type() +
                     "' has no mixture-of-experts layers to stream; leave --expert-memory out for this model");
  const uint64_t min = experts.min_budget();
  if (budget < min)
    throw UsageError("--expert-memory " + budget_text(budget) + " is too small for this model: one layer's " +
                     "routed experts take " + gb_text(min) + " GB, so --expert-memory must be at least " +
                     gb_text(min));
}

}  // namespace

LoadedModel load_model(const std::filesystem::path& path, const LoadOptions& options,
                       std::optional<uint64_t> expert_memory_bytes, std::shared_ptr<nn::ExpertStore>& experts) {
  if (!expert_memory_bytes) return load_model(path, options);
  if (options.parallel) throw UnsupportedError("--expert-memory is not supported in distributed mode");
  auto [config, profile] = resolve_model(path, options);
  assert_resolved_profile(config, profile);
  auto adapter = load_adapter(options);
  auto weights = io::load_weights(config.dir());
  if (adapter) prepare_adapter(*adapter, config, weights);
  experts = std::make_shared<nn::ExpertStore>(*expert_memory_bytes, io::find_weight_files(config.dir()),
                                              options.expert_prefetch);
  nn::ExpertStreaming streaming(experts, config.dir(), weights);
  WeightBinder binder(std::move(weights), config);
  binder.set_adapter(adapter);
  binder.set_expert_streaming(&streaming);
  binder.set_cpu_kernels(cpu_kernels_for(options));
  binder.set_gpu_l3(gpu_l3_for(options));
  auto model = graph_entry(profile.profile.execution.graph).build(config, binder);
  binder.finish();
  check_expert_budget(*experts, config, *expert_memory_bytes);
  // Everything but the streamed experts is read now, as load_model reads it.
  std::vector<mx::array> resident;
  resident.insert(resident.end(), binder.derived().begin(), binder.derived().end());
  for (const auto& a : binder.taken())
    if (!streaming.is_streamed(a)) resident.push_back(a);
  if (adapter) resident.insert(resident.end(), adapter->taken().begin(), adapter->taken().end());
  if (!options.lazy) mx::eval(resident);
  return LoadedModel{std::move(config), std::move(profile), std::move(model)};
}

}  // namespace mlxrt::model
