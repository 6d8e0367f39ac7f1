#include "mlxrt/server/http_error.h"

namespace mlxrt::server {

namespace {

const char* error_type(int status) {
  switch (status) {
    case 404: return "not_found_error";
    case 408:
    case 504: return "timeout_error";
    case 501: return "not_implemented_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace

nlohmann::ordered_json error_body(int status, const std::string& message, const std::string& param) {
  nlohmann::ordered_json error = nlohmann::ordered_json::object();
  error["message"] = message;
  error["type"] = error_type(status);
  error["param"] = param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param);
  error["code"] = status;
  nlohmann::ordered_json body = nlohmann::ordered_json::object();
  body["error"] = std::move(error);
  return body;
}

}  // namespace mlxrt::server
