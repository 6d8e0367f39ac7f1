#pragma once
/** Loading a model: directory -> config -> resolved profile -> weights bound to the family graph. */
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mlxrt/io/model_config.h"
#include "mlxrt/model/causal_lm.h"
#include "mlxrt/model/profile.h"

namespace mlxrt::model {

struct LoadOptions {
  std::vector<ModelProfile> artifact_profiles;  // e.g. from --profile-file
  bool lazy = false;                            // leave weights unread until first use
};

struct LoadedModel {
  io::ModelConfig config;
  ResolvedProfile profile;
  std::unique_ptr<CausalLM> model;
};

/** Resolves the config and profile only (no weights are read). */
std::pair<io::ModelConfig, ResolvedProfile> resolve_model(const std::filesystem::path& path,
                                                          const LoadOptions& options = {});

LoadedModel load_model(const std::filesystem::path& path, const LoadOptions& options = {});

}  // namespace mlxrt::model
