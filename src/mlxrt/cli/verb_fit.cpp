// `mlxrt fit --model DIR [--context N] [--batch B] [--kv-bits B] ...`: what a run of the model
// needs in memory (weights, KV cache per layer type, one prefill step's activations, headroom) and
// whether it fits the device. No weight is read: the sizes come from the safetensors headers and
// from the graph of one token built without evaluating it.
#include <cstdio>
#include <iostream>

#include "mlxrt/cache/quantized_kv_cache.h"
#include "mlxrt/cli/common.h"
#include "mlxrt/cli/verbs.h"
#include "mlxrt/model/memory_estimate.h"

namespace mlxrt::cli {

namespace {

struct Args {
  std::string model, profile_file;
  std::optional<int> context, prompt_tokens, kv_bits, max_kv_size;
  int batch = 1;
  int kv_group_size = cache::kDefaultKvGroupSize;
  int quantized_kv_start = cache::kDefaultQuantizedKvStart;
  int prefill_step_size = 2048;
  bool json = false;
};

std::string gb(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f GB", bytes / 1e9);
  return buf;
}

void run(const Args& a) {
  if (a.max_kv_size && *a.max_kv_size < 1)
    throw UsageError("--max-kv-size must be at least 1, got " + std::to_string(*a.max_kv_size));
  cache::validate_kv_quantization(a.kv_bits, a.kv_group_size, a.quantized_kv_start);
  auto options = load_options(a.profile_file);
  options.lazy = true;
  auto loaded = model::load_model(a.model, options);
  model::RunShape shape;
  if (a.context) {
    shape.context = *a.context;
  } else if (auto it = loaded.config.raw().find("max_position_embeddings");
             it != loaded.config.raw().end() && it->is_number_integer()) {
    shape.context = it->get<int>();
  } else {
    throw UsageError("--context is required: " + loaded.config.source() + " has no max_position_embeddings");
  }
  shape.prompt = a.prompt_tokens;
  shape.batch = a.batch;
  shape.kv_bits = a.kv_bits;
  shape.kv_group_size = a.kv_group_size;
  shape.quantized_kv_start = a.quantized_kv_start;
  shape.max_kv_size = a.max_kv_size;
  shape.prefill_step_size = a.prefill_step_size;
  const auto geometry = model::memory_geometry(loaded, a.max_kv_size);
  const auto e = model::estimate_memory(geometry, shape);
  const auto j = model::to_json(e);
  if (a.json) {
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << "Model: " << loaded.config.dir().string() << "\n";
  std::cout << "Run: context " << shape.context << ", batch " << shape.batch << ", prefill step "
            << shape.prefill_step_size;
  if (shape.kv_bits) std::cout << ", KV " << *shape.kv_bits << "-bit g" << shape.kv_group_size;
  if (shape.max_kv_size) std::cout << ", max KV size " << *shape.max_kv_size;
  std::cout << "\n";
  std::cout << "Weights:        " << gb(e.geometry.weights_bytes) << "\n";
  for (const auto& t : j["kv_cache"]["layer_types"]) {
    std::cout << "  " << t["layers"].get<int>() << " x " << t["type"].get<std::string>() << " (" << t["cache"].get<std::string>();
    if (t.contains("max_size")) std::cout << ", cap " << t["max_size"].get<int>();
    std::cout << ", " << t["dtype"].get<std::string>() << "): ";
    if (t.contains("state_bytes_per_sequence"))
      std::cout << t["state_bytes_per_sequence"].get<size_t>() << " bytes per sequence\n";
    else if (t.contains("quantized_bytes_per_token"))
      std::cout << t["bytes_per_token"].get<size_t>() << " bytes per token, "
                << t["quantized_bytes_per_token"].get<size_t>() << " quantized\n";
    else
      std::cout << t["bytes_per_token"].get<size_t>() << " bytes per token\n";
  }
  std::cout << "KV cache:       " << gb(e.kv.final_bytes) << " (peak " << gb(e.kv.peak_bytes) << ")\n";
  std::cout << "Activations:    " << gb(e.activations_bytes) << " (one prefill step of "
            << e.activation_terms["prefill_step_tokens"].get<long>() << " tokens: "
            << e.activation_terms["formula"].get<std::string>() << ")\n";
  std::cout << "Peak:           " << gb(e.peak_bytes) << "\n";
  std::cout << "Headroom:       " << gb(e.headroom_bytes) << "\n";
  std::cout << "Required:       " << gb(e.required_bytes) << "\n";
  std::cout << "Device:         " << e.device.device << (e.device.name.empty() ? "" : " (" + e.device.name + ")")
            << ", " << gb(e.device.available_bytes) << " available (" << e.device.available_source << ")\n";
  std::cout << (e.fits ? "Fits." : "Does not fit.") << "\n";
}

}  // namespace

void register_fit(CLI::App& app) {
  auto* cmd = app.add_subcommand("fit", "Print the memory a run of the model needs and whether it fits the device");
  auto a = std::make_shared<Args>();
  cmd->add_option("--model", a->model, "Model directory, HF cache snapshot, or Hugging Face repo id in the local cache")
      ->required();
  cmd->add_option("--context", a->context,
                  "Positions each sequence reaches, prompt plus generated (default: max_position_embeddings)");
  cmd->add_option("--prompt-tokens", a->prompt_tokens,
                  "Of the context, the prompt prefilled in chunks (default: the whole context)");
  cmd->add_option("--batch", a->batch, "Sequences run together")->capture_default_str();
  cmd->add_option("--kv-bits", a->kv_bits, "Number of bits for KV cache quantization");
  cmd->add_option("--kv-group-size", a->kv_group_size, "Group size for KV cache quantization")->capture_default_str();
  cmd->add_option("--quantized-kv-start", a->quantized_kv_start,
                  "When --kv-bits is set, start quantizing the KV cache from this step onwards")
      ->capture_default_str();
  cmd->add_option("--max-kv-size", a->max_kv_size, "Set the maximum key-value cache size");
  cmd->add_option("--prefill-step-size", a->prefill_step_size, "Step size for processing the prompt")
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print the estimate as JSON");
  cmd->add_option("--profile-file", a->profile_file, "JSON file with extra exact-artifact profiles");
  cmd->callback([a] { run(*a); });
}

}  // namespace mlxrt::cli
