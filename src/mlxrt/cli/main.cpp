// mlxrt: the command-line front end. Each verb lives in its own file (verbs.h); errors raised
// inside the runtime are caught here and shown as one line on stderr with a non-zero exit.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <mlx/backend/cuda/cuda.h>
#include <mlx/version.h>

#include "mlxrt/cli/verbs.h"
#include "mlxrt/util/errors.h"
#include "mlxrt/util/kernel_cache.h"

namespace mlxrt::cli {
/** `batch-generate` (verb_batch_generate.cpp). */
void register_batch_generate(CLI::App& app);
}  // namespace mlxrt::cli

namespace {

/** mlx_lm/cli.py's subcommands (mlx-lm 0.32.2), in its order. */
constexpr const char* kMlxLmVerbs[] = {"benchmark", "cache_prompt", "chat", "convert", "evaluate", "fuse",
                                       "generate", "lora", "manage", "perplexity", "awq", "dwq",
                                       "dynamic_quant", "gptq", "server", "upload", "share"};

/** For a first word that names no verb: which verbs exist, and which of mlx-lm's are not provided. */
std::string unknown_verb_message(CLI::App& app, const std::string& verb) {
  std::vector<std::string> ours;
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) ours.push_back(sub->get_name());
  std::sort(ours.begin(), ours.end());
  auto provided = [&](const std::string& name) {
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
      if (sub->check_name(name)) return true;
    return false;
  };
  std::vector<std::string> missing;
  for (const char* v : kMlxLmVerbs)
    if (!provided(v)) missing.push_back(v);
  auto join = [](const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  const bool from_mlx_lm = std::find(std::begin(kMlxLmVerbs), std::end(kMlxLmVerbs), verb) != std::end(kMlxLmVerbs);
  std::string msg = from_mlx_lm ? "'" + verb + "' is an mlx-lm command that mlxrt does not provide (run it with mlx-lm: mlx_lm." + verb + ")\n"
                                : "unknown command '" + verb + "'\n";
  msg += "mlxrt commands: " + join(ours) + " (mlxrt COMMAND --help for each)\n";
  if (!missing.empty()) msg += "mlx-lm commands not provided: " + join(missing) + "\n";
  return msg;
}

/** MLX's communication backends fail with "[ring] ..." (and the like) when a peer is gone: say what
 * that means for the run. */
std::string distributed_hint(const std::string& what) {
  for (const char* backend : {"[ring]", "[mpi]", "[nccl]", "[jaccl]"})
    if (what.rfind(backend, 0) == 0)
      return " (a rank of the distributed run stopped or cannot be reached; its own error, if any, is above)";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  // MLX's run-time compiled CUDA kernels kept where a reboot does not empty them (kernel_cache.h).
  if (mlx::core::cu::is_available()) mlxrt::configure_kernel_cache(mlx::core::version());
  CLI::App app{"mlxrt: a native runtime for MLX language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("mlxrt 0.1.0"));
  mlxrt::cli::register_verbs(app);
  mlxrt::cli::register_batch_generate(app);
  // argparse (mlx-lm's command lines) takes the last of a repeated option; CLI11 refuses a repeated
  // single-value option unless told to do the same. Options taking several values are left alone.
  for (CLI::App* verb : app.get_subcommands([](CLI::App*) { return true; }))
    for (CLI::Option* option : verb->get_options())
      if (option->get_items_expected_max() == 1 && option->get_type_size() != 0)
        option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  if (argc >= 2 && argv[1][0] != '-') {
    const std::string verb = argv[1];
    bool known = false;
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) known = known || sub->check_name(verb);
    if (!known) {
      std::cerr << "error: " << unknown_verb_message(app, verb);
      return 1;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const mlxrt::cli::ExitCode& e) {
    return e.code;
  } catch (const mlxrt::Error& e) {
    std::cout.flush();
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "error: " << e.what() << distributed_hint(e.what()) << "\n";
    return 1;
  }
  return 0;
}
