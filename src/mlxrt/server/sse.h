#pragma once
/** Server-sent events framing, byte for byte as mlx_lm.server writes it. */
#include <string>

#include <nlohmann/json.hpp>

namespace mlxrt::server {

/** "data: <json.dumps(value)>\n\n" */
std::string sse_data(const nlohmann::ordered_json& value);
/** "data: [DONE]\n\n" */
std::string sse_done();
/** ": keepalive <processed>/<total>\n\n" (a comment line clients ignore, sent during prefill). */
std::string sse_keepalive(int processed, int total);

}  // namespace mlxrt::server
