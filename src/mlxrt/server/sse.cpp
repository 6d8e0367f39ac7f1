#include "mlxrt/server/sse.h"

#include "mlxrt/server/python_json.h"

namespace mlxrt::server {

std::string sse_data(const nlohmann::ordered_json& value) { return "data: " + python_dumps(value) + "\n\n"; }

std::string sse_done() { return "data: [DONE]\n\n"; }

std::string sse_keepalive(int processed, int total) {
  return ": keepalive " + std::to_string(processed) + "/" + std::to_string(total) + "\n\n";
}

}  // namespace mlxrt::server
