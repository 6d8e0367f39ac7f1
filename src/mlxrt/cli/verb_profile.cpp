// `mlxrt profile --model DIR [--profile-file F]`: prints the resolved model profile as JSON.
#include <iostream>

#include "mlxrt/cli/common.h"
#include "mlxrt/cli/verbs.h"

namespace mlxrt::cli {

void register_profile(CLI::App& app) {
  auto* cmd = app.add_subcommand("profile", "Print the resolved model profile as JSON");
  auto model = std::make_shared<std::string>();
  auto profile_file = std::make_shared<std::string>();
  cmd->add_option("--model", *model, "Model directory, HF cache snapshot, or Hugging Face repo id (org/name[@revision]) in the local cache")->required();
  cmd->add_option("--profile-file", *profile_file, "JSON file with extra exact-artifact profiles");
  cmd->callback([=] {
    auto [config, resolved] = model::resolve_model(*model, load_options(*profile_file));
    std::cout << model::to_json(resolved).dump(2) << "\n";
  });
}

}  // namespace mlxrt::cli
