#pragma once
/** An error that ends a request with an HTTP status and an OpenAI-shaped JSON body. */
#include <string>

#include <nlohmann/json.hpp>

#include "mlxrt/util/errors.h"

namespace mlxrt::server {

class HttpError : public UsageError {
 public:
  HttpError(int status, const std::string& message, std::string param = {})
      : UsageError(message), status_(status), param_(std::move(param)) {}
  int status() const { return status_; }
  /** The request field at fault ("" when none). */
  const std::string& param() const { return param_; }

 private:
  int status_;
  std::string param_;
};

/** {"error": {"message", "type", "param", "code"}} as OpenAI's API answers errors. */
nlohmann::ordered_json error_body(int status, const std::string& message, const std::string& param = {});

}  // namespace mlxrt::server
