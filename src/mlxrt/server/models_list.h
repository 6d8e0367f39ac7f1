#pragma once
/** GET /v1/models: the mlx-lm-looking models of the Hugging Face cache that this server can run,
 * then the start-up model, in mlx_lm.server's handle_models_request shape. */
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace mlxrt::server {

/** {"object": "list", "data": [{"id", "object": "model", "created"}, ...]}. `filter_repo_id`
 * keeps only that cache repo (GET /v1/models/<org>/<name>). The start-up model is listed last by
 * `startup_id`: its cache id (`startup_repo_id`, then not listed twice), else its directory's name
 * (mlx_lm.server's absolute path is not shown). A cache model whose config this server cannot run
 * (an unsupported model_type) is left out. */
nlohmann::ordered_json list_models(const std::string& startup_id, const std::optional<std::string>& startup_repo_id,
                                   const std::optional<std::string>& filter_repo_id, int64_t created);

}  // namespace mlxrt::server
