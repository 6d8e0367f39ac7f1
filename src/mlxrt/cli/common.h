#pragma once
/** Small helpers shared by the CLI verbs. */
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "mlxrt/model/loader.h"

namespace mlxrt::cli {

/** "1,2,3" -> {1, 2, 3}; UsageError naming `flag` on anything else. */
std::vector<int32_t> parse_token_list(const std::string& text, const std::string& flag);

/** LoadOptions from the common --profile-file flag (empty: none). */
model::LoadOptions load_options(const std::string& profile_file);

}  // namespace mlxrt::cli
