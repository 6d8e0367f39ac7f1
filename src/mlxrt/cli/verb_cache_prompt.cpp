// `mlxrt cache_prompt`: mlx_lm.cache_prompt's command (mlx_lm/cache_prompt.py, mlx-lm 0.32.2).
// Prefills the prompt (through the chat template when the model has one, as an unfinished user
// message) into a fresh prompt cache and saves it in mlx-lm's prompt-cache file format.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>

#include <mlx/memory.h>
#include <nlohmann/json.hpp>

#include "mlxrt/cache/prompt_cache.h"
#include "mlxrt/cache/quantized_kv_cache.h"
#include "mlxrt/cli/common.h"
#include "mlxrt/cli/distributed.h"
#include "mlxrt/cli/generation_setup.h"
#include "mlxrt/cli/verbs.h"
#include "mlxrt/generate/generate_step.h"
#include "mlxrt/model/make_prompt_cache.h"

namespace mlxrt::cli {

namespace {

struct Args {
  std::string model = "mlx_model";
  std::string adapter_path, eos_token, prompt_cache_file, prompt, profile_file;
  bool trust_remote_code = false;
  bool spec_exact = false;  // --spec-exact (ours)
  std::optional<int> max_kv_size, kv_bits;
  int kv_group_size = cache::kDefaultKvGroupSize;
  int quantized_kv_start = cache::kDefaultQuantizedKvStart;
  DistributedArgs dist;
};

// json.dumps(tokenizer_config) as mlx_lm.cache_prompt stores it ({"trust_remote_code": ...,
// "eos_token": ...} with Python's ", " / ": " separators and ASCII escapes).
std::string tokenizer_config_json(const Args& a) {
  std::string out = std::string("{\"trust_remote_code\": ") + (a.trust_remote_code ? "true" : "false");
  if (!a.eos_token.empty()) out += ", \"eos_token\": " + nlohmann::json(a.eos_token).dump(-1, ' ', true);
  return out + "}";
}

std::vector<int32_t> encode_prompt(const Session& session, const std::string& prompt) {
  if (!session.chat_template) return session.tokenizer.encode(prompt);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "user"}, {"content", prompt}});
  auto text = apply_chat_template(session, messages, /*add_generation_prompt=*/false,
                                  /*continue_final_message=*/true, nlohmann::ordered_json::object());
  return session.tokenizer.encode(text, /*add_special_tokens=*/false);
}

void run(const Args& a) {
  if (a.max_kv_size && *a.max_kv_size < 1) throw UsageError("--max-kv-size must be at least 1");
  cache::validate_kv_quantization(a.kv_bits, a.kv_group_size, a.quantized_kv_start);
  if (a.spec_exact && a.kv_bits) throw UsageError("--spec-exact cannot be combined with --kv-bits (a quantized KV cache)");
  // Every rank prefills the prompt on its shard; the ranks' parts of the cache are gathered into the
  // whole model's cache, which rank 0 saves (the file one process would write, in mlx-lm's format).
  const auto dist_run = join_run(a.dist);
  QuietUnlessPrimary quiet(dist_run.primary());
  if (dist_run.parallel && a.kv_bits)
    throw UnsupportedError("--kv-bits is not supported in distributed mode (the ranks' caches are gathered from "
                           "KVCache and RotatingKVCache layers)");
  // --spec-exact: the prefill computes each position as a one-token decoding step would, so the
  // file holds the KV that `generate --spec-exact` would have made for the same prompt.
  auto session = load_session(a.model, a.profile_file, std::nullopt, a.adapter_path, dist_run.parallel,
                              /*expert_prefetch=*/false, model::FidelityTier::l1, a.spec_exact);
  if (!a.eos_token.empty()) add_eos_token(session, a.eos_token, "--eos-token");
  std::string prompt = a.prompt;
  if (prompt == "-") prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  auto ids = encode_prompt(session, prompt);
  auto& lm = *session.loaded.model;

  auto cache = model::make_prompt_cache(lm, a.max_kv_size);
  generate::GenerateOptions options;
  options.max_tokens = 0;
  options.kv_bits = a.kv_bits;
  options.kv_group_size = a.kv_group_size;
  options.quantized_kv_start = a.quantized_kv_start;
  const auto start = std::chrono::steady_clock::now();
  size_t max_msg_len = 0;
  options.prompt_progress = [&](int processed, int) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char msg[96];
    std::snprintf(msg, sizeof msg, "\rProcessed %6d tokens (%6.2f tok/s)", processed,
                  elapsed > 0 ? processed / elapsed : 0.0);
    const std::string line = msg;
    max_msg_len = std::max(max_msg_len, line.size());
    std::cout << line << std::string(max_msg_len - line.size(), ' ') << std::flush;
  };
  generate::TokenGenerator gen(lm, ids, options, &cache);
  while (gen.next()) {
  }
  std::cout << "\n";
  std::printf("Peak memory: %.3f GB\n", mlx::core::get_peak_memory() / 1e9);
  std::cout << "Saving..." << std::endl;
  const cache::PromptCacheMetadata metadata{{"model", a.model}, {"tokenizer_config", tokenizer_config_json(a)}};
  if (!dist_run.parallel) return cache::save_prompt_cache(a.prompt_cache_file, gen.cache(), metadata);
  auto whole = gather_prompt_cache(gen.cache(), *dist_run.parallel);
  if (dist_run.primary()) cache::save_prompt_cache(a.prompt_cache_file, whole, metadata);
}

}  // namespace

void register_cache_prompt(CLI::App& app) {
  auto* cmd = app.add_subcommand("cache_prompt", "Cache the state of a prompt to be reused with mlxrt generate");
  auto a = std::make_shared<Args>();
  cmd->add_option("--model", a->model, "The path to the local model directory or Hugging Face repo (from the local cache)")->capture_default_str();
  cmd->add_option("--adapter-path", a->adapter_path, kAdapterPathHelp);
  cmd->add_flag("--trust-remote-code", a->trust_remote_code, "Recorded in the cache metadata (no code is run)");
  cmd->add_option("--eos-token", a->eos_token, "End of sequence token for tokenizer");
  cmd->add_option("--max-kv-size", a->max_kv_size, "Set the maximum key-value cache size");
  cmd->add_option("--prompt-cache-file", a->prompt_cache_file, "The file to save the prompt cache in")->required();
  cmd->add_option("--prompt", a->prompt, "Message to be processed by the model ('-' reads from stdin)")->required();
  cmd->add_option("--kv-bits", a->kv_bits, "Number of bits for KV cache quantization");
  cmd->add_option("--kv-group-size", a->kv_group_size, "Group size for KV cache quantization")->capture_default_str();
  cmd->add_option("--quantized-kv-start", a->quantized_kv_start,
                  "When --kv-bits is set, start quantizing the KV cache from this step onwards")
      ->capture_default_str();
  cmd->add_option("--profile-file", a->profile_file, "JSON file with extra exact-artifact profiles");
  cmd->add_flag("--spec-exact", a->spec_exact,
                "Prefill each position as a one-token decoding step computes it, so `generate --spec-exact "
                "--prompt-cache-file` continues with the bytes of decoding the whole prompt one token at a time "
                "(ours; CPU and CUDA)");
  add_distributed_flags(cmd, a->dist);
  cmd->callback([a] { run(*a); });
}

}  // namespace mlxrt::cli
