#pragma once
/** GET /v1/models: the served model and the mlx-lm-looking models of the Hugging Face cache, as
 * mlx_lm.server's handle_models_request lists them. */
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace mlxrt::server {

/** {"object": "list", "data": [{"id", "object": "model", "created"}, ...]}. `filter_repo_id`
 * keeps only that cache repo (GET /v1/models/<org>/<name>); the served model is always listed. */
nlohmann::ordered_json list_models(const std::string& served_model, const std::optional<std::string>& filter_repo_id,
                                   int64_t created);

}  // namespace mlxrt::server
