#pragma once
/** The CLI verbs. Each register_* adds one subcommand to the app (one file per verb). */
#include <CLI/CLI.hpp>

namespace mlxrt::cli {

void register_profile(CLI::App& app);
void register_logits(CLI::App& app);
void register_generate(CLI::App& app);
void register_chat(CLI::App& app);
void register_benchmark(CLI::App& app);
void register_convert(CLI::App& app);
void register_fuse(CLI::App& app);
void register_template(CLI::App& app);
void register_server(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_detokenize(CLI::App& app);
void register_cache_prompt(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_manage(CLI::App& app);
void register_embed(CLI::App& app);
void register_fit(CLI::App& app);
void register_launch(CLI::App& app);
void register_fidelity(CLI::App& app);

/** Thrown by a verb whose exit status is another process's (launch): main returns `code` quietly. */
struct ExitCode {
  int code;
};

inline void register_verbs(CLI::App& app) {
  register_profile(app);
  register_logits(app);
  register_generate(app);
  register_chat(app);
  register_benchmark(app);
  register_convert(app);
  register_fuse(app);
  register_template(app);
  register_server(app);
  register_tokenize(app);
  register_detokenize(app);
  register_cache_prompt(app);
  register_perplexity(app);
  register_manage(app);
  register_embed(app);
  register_fit(app);
  register_launch(app);
  register_fidelity(app);
}

}  // namespace mlxrt::cli
