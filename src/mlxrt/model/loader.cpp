#include "mlxrt/model/loader.h"

#include "mlxrt/kernels/cpu/matmul.h"

#include <algorithm>
#include <cctype>
#include <string>

#include <mlx/backend/cuda/cuda.h>
#include <mlx/transforms.h>

#include "mlxrt/io/model_dir.h"
#include "mlxrt/io/weights.h"
#include "mlxrt/model/nn/adapter_rows.h"
#include "mlxrt/model/nn/weight_binder.h"
#include "mlxrt/model/parallel_load.h"
#include "mlxrt/model/registry.h"
#include "mlxrt/util/errors.h"

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

std::string shape_text(const mx::Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

}  // namespace

std::shared_ptr<nn::Adapter> load_adapter(const LoadOptions& options) {
  if (options.adapter_path.empty()) return nullptr;
  return nn::Adapter::load(options.adapter_path);
}

void prepare_adapter(nn::Adapter& adapter, const io::ModelConfig& config, io::WeightMap& weights) {
  // len(model.layers): the text model's num_hidden_layers (top level or under text_config).
  const json& raw = config.raw();
  const json* fields = &raw;
  if (!raw.contains("num_hidden_layers") && raw.contains("text_config") && raw["text_config"].is_object())
    fields = &raw["text_config"];
  int layers = highest_layer_index(weights) + 1;
  if (fields->contains("num_hidden_layers") && (*fields)["num_hidden_layers"].is_number_integer())
    layers = (*fields)["num_hidden_layers"].get<int>();
  adapter.set_layer_count(layers);
  if (!adapter.full()) return;
  // load_adapters of a full fine-tune: model.load_weights(adapter weights, strict=False), each an
  // existing parameter of the same shape.
  for (const auto& [name, tensor] : adapter.tensors()) {
    auto it = weights.find(name);
    if (it == weights.end())
      throw WeightsError(adapter.weights_file().string() + ": " + name + " is not a parameter of the model in " +
                         config.dir().string() + " (an adapter of another base model?)");
    if (it->second.shape() != tensor.shape())
      throw WeightsError(adapter.weights_file().string() + ": " + name + " has shape " + shape_text(tensor.shape()) +
                         " but the model's parameter has shape " + shape_text(it->second.shape()) +
                         " (an adapter of another base model?)");
    it->second = tensor;
  }
}

std::pair<io::ModelConfig, ResolvedProfile> resolve_model(const std::filesystem::path& path,
                                                          const LoadOptions& options) {
  auto dir = io::resolve_model_dir(path);
  auto config = io::ModelConfig::load(dir);
  ResolveOptions ro;
  ro.artifact_profiles = options.artifact_profiles;
  auto profile = resolve_profile(config, ro);
  // At l3 the model no longer promises mlx-lm's bytes: the profile says so, for every report.
  if (options.fidelity == FidelityTier::l3) profile.profile.fidelity = {FidelityTier::l3, Oracle::none, Claim::measured};
  return {std::move(config), std::move(profile)};
}

namespace {

// The checkpoint's tensors (an adapter's prepared in) bound strictly to the family's graph: what
// load_model and bind_checkpoint share. The binder refers to `config`, which must outlive its use.
struct Bound {
  std::unique_ptr<WeightBinder> binder;
  std::unique_ptr<CausalLM> model;
};

Bound bind_weights(const io::ModelConfig& config, const ResolvedProfile& profile,
                   const std::shared_ptr<nn::Adapter>& adapter, const std::optional<Parallel>& parallel,
                   std::shared_ptr<const kernels::cpu::CpuKernels> cpu_kernels = nullptr, bool float32 = false,
                   bool row_exact = false, bool multi_token_prediction = false, bool gpu_l3 = false) {
  auto weights = io::load_weights(config.dir());
  check_layer_count(config, weights);
  if (adapter) prepare_adapter(*adapter, config, weights);
  auto binder = std::make_unique<WeightBinder>(std::move(weights), config);
  binder->set_adapter(adapter);
  binder->set_parallel(parallel);
  binder->set_cpu_kernels(std::move(cpu_kernels));
  binder->set_gpu_l3(gpu_l3);
  binder->set_float32(float32);
  binder->set_row_exact(row_exact);
  binder->set_multi_token_prediction(multi_token_prediction);
  // Tensor parallel: each rank reads its slices of the weight files, not the whole tensors.
  if (parallel && parallel->mode == Parallel::Mode::tensor) binder->set_locations(io::tensor_locations(config.dir()));
  auto model = graph_entry(profile.profile.execution.graph).build(config, *binder);
  binder->finish();
  return {std::move(binder), std::move(model)};
}

}  // namespace

// Row-exact runs where its guarantee is tested: the CPU and CUDA (docs/exact-mode.md has each
// backend's rules; Metal's are not worked out), L1, one process, and the families on the shared
// decoder whose attention is causal without a window.
static void check_row_exact(const LoadOptions& options, const io::ModelConfig& config) {
  if (!options.row_exact) return;
  if (mx::default_device() != mx::Device::cpu && !mx::cu::is_available())
    throw UnsupportedError("--spec-exact runs on the CPU and on CUDA GPUs only (on this device a many-row step's "
                           "bytes are not yet known to match a one-row step's)");
  if (options.fidelity != FidelityTier::l1) throw UsageError("--spec-exact runs at --fidelity l1");
  if (options.parallel) throw UnsupportedError("--spec-exact is not supported in distributed mode");
  if (!options.adapter_path.empty()) throw UnsupportedError("--spec-exact cannot be combined with an adapter");
  static const std::vector<std::string> kFamilies = {"llama", "mistral", "qwen2", "qwen3", "qwen3_5",
                                                     "qwen3_5_moe", "qwen3_next"};
  if (std::find(kFamilies.begin(), kFamilies.end(), config.model_type()) == kFamilies.end()) {
    std::string list;
    for (const auto& f : kFamilies) list += (list.empty() ? "" : ", ") + f;
    throw UnsupportedError("--spec-exact: model_type '" + config.model_type() + "' is not supported (" + list + ")");
  }
}

bool gpu_l3_for(const LoadOptions& options) {
  return options.fidelity == FidelityTier::l3 && mx::default_device() == mx::Device::gpu && mx::cu::is_available();
}

std::shared_ptr<const kernels::cpu::CpuKernels> cpu_kernels_for(const LoadOptions& options) {
  const bool l3 = options.fidelity == FidelityTier::l3;
  if (l3 && mx::default_device() != mx::Device::cpu && !gpu_l3_for(options))
    throw UnsupportedError("--fidelity l3: this build has L3 kernels for the CPU and CUDA GPUs only; run this device "
                           "at --fidelity l1");
  if (l3 && options.parallel)
    throw UnsupportedError("--fidelity l3 is not supported in distributed mode; run the ranks at --fidelity l1");
  if (l3 && !options.cpu_kernels && mx::default_device() == mx::Device::cpu)
    throw UsageError("--fidelity l3 runs mlxrt's own CPU kernels, which this load turned off");
  if (options.fidelity == FidelityTier::l2)
    throw UsageError("fidelity l2 is an artifact's contract (mlx-optiq), not a load option");
  if (!options.cpu_kernels || mx::default_device() != mx::Device::cpu) return nullptr;
  return kernels::cpu::CpuKernels::from_environment(l3);
}

LoadedModel load_model(const std::filesystem::path& path, const LoadOptions& options) {
  auto [config, profile] = resolve_model(path, options);
  assert_resolved_profile(config, profile);
  if (options.parallel) {
    check_parallel_support(*options.parallel, config, profile, !options.adapter_path.empty());
    check_same_model_on_all_ranks(*options.parallel, config);
  }
  auto adapter = load_adapter(options);
  check_row_exact(options, config);
  const auto cpu_kernels = cpu_kernels_for(options);
  auto bound = bind_weights(config, profile, adapter, options.parallel, cpu_kernels, options.float32,
                            options.row_exact, options.multi_token_prediction, gpu_l3_for(options));
  bound.model->set_cpu_kernels(cpu_kernels);
  if (cpu_kernels && cpu_kernels->l3()) bound.model->set_l3_kernels(cpu_kernels);
  if (options.multi_token_prediction && !bound.model->multi_token_predictor())
    throw UnsupportedError("--mtp: model_type '" + config.model_type() +
                           "' has no multi-token-prediction head (qwen3_5, qwen3_5_moe, qwen3_next have one)");
  if (!options.lazy) {
    // Tensor parallel: the sharded tensors are this rank's slices, read from the files (or cut from
    // a tensor a sanitize made); the whole tensors are never evaluated.
    mx::eval(bound.binder->taken());
    mx::eval(bound.binder->derived());
    if (adapter) mx::eval(adapter->taken());
  }
  if (options.parallel) barrier(*options.parallel);
  const int draws = bound.binder->shard_draws();
  return LoadedModel{std::move(config), std::move(profile), std::move(bound.model), draws};
}

BoundCheckpoint bind_checkpoint(const std::filesystem::path& path, const std::filesystem::path& adapter_path) {
  auto [config, profile] = resolve_model(path);
  assert_resolved_profile(config, profile);
  LoadOptions options;
  options.adapter_path = adapter_path;
  auto bound = bind_weights(config, profile, load_adapter(options), std::nullopt);
  const auto& binder = *bound.binder;
  BoundCheckpoint out{config, {}, binder.quantizable()};
  for (size_t i = 0; i < binder.taken().size(); ++i) out.tensors.emplace_back(binder.taken_names()[i], binder.taken()[i]);
  return out;
}

void check_adapter_names(const std::vector<std::pair<std::string, std::filesystem::path>>& adapters) {
  for (size_t i = 0; i < adapters.size(); ++i) {
    const std::string& name = adapters[i].first;
    if (name.empty() || name.find_first_of("@/") != std::string::npos || name == "default_model")
      throw UsageError("--adapters: '" + name + "' is not a usable adapter name (non-empty, without '@' or '/')");
    for (size_t j = 0; j < i; ++j)
      if (adapters[j].first == name) throw UsageError("--adapters: the name '" + name + "' is given twice");
  }
}

AdaptedModels load_model_with_adapters(const std::filesystem::path& path, const LoadOptions& options,
                                       const std::vector<std::pair<std::string, std::filesystem::path>>& adapters) {
  if (options.parallel) throw UnsupportedError("several adapters are not supported in distributed mode");
  auto resolved = resolve_model(path, options);
  const io::ModelConfig& config = resolved.first;
  const ResolvedProfile& profile = resolved.second;
  assert_resolved_profile(config, profile);
  auto base_adapter = load_adapter(options);
  std::vector<std::shared_ptr<nn::Adapter>> loaded;
  for (const auto& [name, dir] : adapters) {
    try {
      loaded.push_back(nn::Adapter::load(dir));
    } catch (const Error& e) {
      throw ConfigError("adapter '" + name + "': " + e.what());
    }
  }
  const auto weights = io::load_weights(config.dir());
  check_layer_count(config, weights);
  std::vector<mx::array> resident;
  const auto cpu_kernels = cpu_kernels_for(options);
  // One model bound to a shallow copy of the tensor map: the arrays (and the data they will hold)
  // are shared between the models.
  auto build = [&](const std::shared_ptr<nn::Adapter>& adapter) {
    io::WeightMap copy = weights;
    if (adapter) prepare_adapter(*adapter, config, copy);
    WeightBinder binder(std::move(copy), config);
    binder.set_adapter(adapter);
    binder.set_cpu_kernels(cpu_kernels);
    binder.set_gpu_l3(gpu_l3_for(options));
    auto model = graph_entry(profile.profile.execution.graph).build(config, binder);
    model->set_cpu_kernels(cpu_kernels);
    binder.finish();
    resident.insert(resident.end(), binder.taken().begin(), binder.taken().end());
    resident.insert(resident.end(), binder.derived().begin(), binder.derived().end());
    if (adapter) resident.insert(resident.end(), adapter->taken().begin(), adapter->taken().end());
    return model;
  };
  // The mixed model binds copies of the adapters as they are before any binding takes their
  // tensors (the copies share the tensors' arrays, so nothing is held twice).
  AdapterSlots slots{{base_adapter ? std::make_shared<nn::Adapter>(*base_adapter) : nullptr}, nullptr};
  for (const auto& a : loaded) slots.adapters.push_back(std::make_shared<nn::Adapter>(*a));
  AdaptedModels out{LoadedModel{config, profile, build(base_adapter)}, {}, nullptr, nullptr, {}};
  for (size_t i = 0; i < adapters.size(); ++i) {
    try {
      out.adapted.emplace_back(adapters[i].first, build(loaded[i]));
    } catch (const Error& e) {
      throw WeightsError("adapter '" + adapters[i].first + "' (" + adapters[i].second.string() +
                         ") does not fit the model in " + config.dir().string() + ": " + e.what());
    }
  }
  for (size_t i = 0; i < slots.adapters.size(); ++i)
    if (slots.adapters[i] && slots.adapters[i]->full())
      out.mixed_unavailable = (i == 0 ? std::string("the --adapter-path adapter") : "adapter '" + adapters[i - 1].first + "'") +
                              " is a full fine-tune, with its own copy of the model's tensors";
  if (out.mixed_unavailable.empty() && !adapters.empty()) {
    io::WeightMap copy = weights;
    for (const auto& a : slots.adapters)
      if (a) prepare_adapter(*a, config, copy);
    slots.rows = std::make_shared<nn::AdapterRows>();
    auto rows = slots.rows;
    WeightBinder binder(std::move(copy), config);
    binder.set_adapter_slots(std::move(slots));
    binder.set_cpu_kernels(cpu_kernels);
    binder.set_gpu_l3(gpu_l3_for(options));
    try {
      out.mixed = graph_entry(profile.profile.execution.graph).build(config, binder);
      binder.finish();
      out.rows = rows;
    } catch (const UnsupportedError& e) {
      out.mixed.reset();
      out.mixed_unavailable = e.what();
    }
  }
  if (!options.lazy) mx::eval(resident);
  return out;
}

}  // namespace mlxrt::model
