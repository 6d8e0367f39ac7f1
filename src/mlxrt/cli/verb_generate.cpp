// `mlxrt generate`: mlx_lm.generate's command. Output and footer match mlx_lm.generate --verbose.
#include <chrono>
#include <cstdio>
#include <iostream>

#include <mlx/memory.h>

#include "mlxrt/cli/common.h"
#include "mlxrt/cli/verbs.h"
#include "mlxrt/generate/generate_step.h"

namespace mlxrt::cli {

namespace {

struct Args {
  std::string model, prompt_tokens, profile_file;
  int max_tokens = 100;  // mlx_lm.generate's DEFAULT_MAX_TOKENS
  int prefill_step_size = 2048;
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void run(const Args& a) {
  auto ids = parse_token_list(a.prompt_tokens, "--prompt-tokens");
  if (a.max_tokens < -1) throw UsageError("--max-tokens must be -1 (no limit) or non-negative");
  auto loaded = model::load_model(a.model, load_options(a.profile_file));
  for (auto id : ids)
    if (id >= loaded.model->vocab_size())
      throw UsageError("--prompt-tokens: id " + std::to_string(id) + " is outside the vocabulary (size " +
                       std::to_string(loaded.model->vocab_size()) + ")");
  const auto& eos = loaded.config.eos_token_ids();

  std::cout << "==========\n";
  generate::GenerateOptions options;
  options.max_tokens = a.max_tokens;
  options.prefill_step_size = a.prefill_step_size;
  auto tic = Clock::now();
  generate::TokenGenerator gen(*loaded.model, ids, options);
  double prompt_tps = 0, generation_tps = 0;
  int generated = 0;
  bool printed = false;
  for (int n = 0;; ++n) {
    auto step = gen.next();
    if (!step) break;
    if (n == 0) {
      prompt_tps = ids.size() / seconds_since(tic);
      tic = Clock::now();
    }
    generated = n + 1;
    generation_tps = generated / seconds_since(tic);
    if (std::find(eos.begin(), eos.end(), step->token) != eos.end()) break;
    std::cout << (printed ? " " : "") << step->token << std::flush;
    printed = true;
    if (n + 1 == a.max_tokens) break;
  }
  std::cout << "\n==========\n";
  if (!printed) {
    std::cout << "No text generated for this prompt\n";
    return;
  }
  std::printf("Prompt: %zu tokens, %.3f tokens-per-sec\n", ids.size(), prompt_tps);
  std::printf("Generation: %d tokens, %.3f tokens-per-sec\n", generated, generation_tps);
  std::printf("Peak memory: %.3f GB\n", mlx::core::get_peak_memory() / 1e9);
}

}  // namespace

void register_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate text with a model (as mlx_lm.generate)");
  auto a = std::make_shared<Args>();
  cmd->add_option("--model,-m", a->model, "Model directory or HF cache snapshot")->required();
  cmd->add_option("--prompt-tokens", a->prompt_tokens, "Prompt as comma-separated token ids")->required();
  cmd->add_option("--max-tokens,-n", a->max_tokens, "Maximum number of tokens to generate")
      ->capture_default_str();
  cmd->add_option("--prefill-step-size", a->prefill_step_size, "Prompt tokens per prefill chunk")
      ->capture_default_str();
  cmd->add_option("--profile-file", a->profile_file, "JSON file with extra exact-artifact profiles");
  cmd->callback([a] { run(*a); });
}

}  // namespace mlxrt::cli
