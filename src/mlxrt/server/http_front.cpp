#include "mlxrt/server/http_front.h"

#include "mlxrt/server/request_guards.h"

#include <httplib.h>

#include <algorithm>
#include <ctime>

#include "mlxrt/server/anthropic_api.h"
#include "mlxrt/server/connection_pool.h"
#include "mlxrt/server/embeddings_api.h"
#include "mlxrt/server/http_error.h"
#include "mlxrt/server/models_list.h"
#include "mlxrt/server/python_json.h"
#include "mlxrt/server/request.h"
#include "mlxrt/server/responses.h"
#include "mlxrt/server/responses_api.h"
#include "mlxrt/server/web_assets.h"

namespace mlxrt::server {

void handle_completion_request(const ServerOptions& options, Logger& log, ModelPool& models,
                               Scheduler& scheduler, const std::string& fingerprint, const httplib::Request& req,
                               httplib::Response& res, Endpoint endpoint);

namespace {

// How much of an over-limit body is still read before refusing it (see the constructor).
size_t drain_limit(size_t max_body_bytes) { return max_body_bytes + std::max<size_t>(max_body_bytes * 3, 16u << 20); }

bool is_known_method(const std::string& m) { return m == "GET" || m == "POST" || m == "OPTIONS" || m == "HEAD"; }

}  // namespace

HttpFront::HttpFront(const ServerOptions& options, Logger& log, ModelPool& models, Scheduler& scheduler,
                     ServerMetrics& metrics)
    : options_(options),
      log_(log),
      models_(models),
      scheduler_(scheduler),
      metrics_(metrics),
      fingerprint_(system_fingerprint()),
      http_(std::make_unique<httplib::Server>()),
      responses_api_(std::make_unique<ResponsesApi>()),
      embeddings_api_(std::make_unique<EmbeddingsApi>()) {
  const int threads = std::max(4, options.http_threads);
  http_->new_task_queue = [threads] { return new ConnectionPool(static_cast<size_t>(threads)); };
  // Bodies a little over the limit are still read (then refused with 413 by the route), so that
  // closing the connection does not reset it and lose the answer; larger ones are refused unread.
  http_->set_payload_max_length(drain_limit(options.max_body_bytes));
  http_->set_read_timeout(30, 0);
  http_->set_write_timeout(30, 0);
  http_->set_keep_alive_timeout(5);
  install_routes();
}

HttpFront::~HttpFront() = default;

void HttpFront::send_error(httplib::Response& res, int status, const std::string& message, const std::string& param) {
  res.status = status;
  res.set_content(python_dumps(error_body(status, message, param)), "application/json");
}

void HttpFront::set_cors(const httplib::Request& req, httplib::Response& res) const {
  if (res.has_header("Access-Control-Allow-Methods")) return;  // error replies pass here twice
  const auto& allowed = options_.allowed_origins;
  std::string origin = req.get_header_value("Origin");
  if (std::find(allowed.begin(), allowed.end(), "*") != allowed.end()) {
    res.set_header("Access-Control-Allow-Origin", "*");
  } else if (!origin.empty() && std::find(allowed.begin(), allowed.end(), origin) != allowed.end()) {
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
  }
  res.set_header("Access-Control-Allow-Methods", "*");
  res.set_header("Access-Control-Allow-Headers", "*");
}

void HttpFront::install_routes() {
  using httplib::Request, httplib::Response;
  using Handled = httplib::Server::HandlerResponse;

  http_->set_pre_routing_handler([this](const Request& req, Response& res) {
    size_t header_bytes = req.target.size();
    for (const auto& [k, v] : req.headers) header_bytes += k.size() + v.size() + 4;
    if (req.headers.size() > options_.max_header_count || header_bytes > options_.max_header_bytes) {
      res.set_header("Connection", "close");
      send_error(res, 431, "request headers are too large");
      return Handled::Handled;
    }
    if (!host_allowed(options_.host, req.get_header_value("Host"))) {
      send_error(res, 403, "Host '" + req.get_header_value("Host") + "' is not allowed: the server listens on " +
                               options_.host + " and answers only requests addressed to it (DNS rebinding protection)");
      return Handled::Handled;
    }
    if (req.method != "POST") return Handled::Unhandled;
    if (req.has_header("Content-Type") && !json_content_type(req.get_header_value("Content-Type"))) {
      res.set_header("Connection", "close");
      send_error(res, 415, "Content-Type must be application/json, got '" + req.get_header_value("Content-Type") + "'");
      return Handled::Handled;
    }
    // Checked before the body is read: a body of unknown or excessive size is never read.
    if (!req.has_header("Content-Length")) {
      res.set_header("Connection", "close");
      send_error(res, 411, "Content-Length header is required");
      return Handled::Handled;
    }
    const std::string length = req.get_header_value("Content-Length");
    bool numeric = !length.empty() && length.size() <= 19 &&
                   length.find_first_not_of("0123456789") == std::string::npos;
    if (!numeric) {
      res.set_header("Connection", "close");
      send_error(res, 400, "Invalid Content-Length header");
      return Handled::Handled;
    }
    if (std::stoull(length) > drain_limit(options_.max_body_bytes)) {
      res.set_header("Connection", "close");
      send_error(res, 413, "request body is larger than " + std::to_string(options_.max_body_bytes) + " bytes");
      return Handled::Handled;
    }
    return Handled::Unhandled;
  });

  auto completion = [this](Endpoint e) {
    return [this, e](const Request& req, Response& res) {
      if (req.body.size() > options_.max_body_bytes) {
        res.set_header("Connection", "close");
        send_error(res, 413, "request body is larger than " + std::to_string(options_.max_body_bytes) + " bytes");
        return;
      }
      handle_completion_request(options_, log_, models_, scheduler_, fingerprint_, req, res, e);
    };
  };
  http_->Post("/v1/chat/completions", completion(Endpoint::chat));
  http_->Post("/chat/completions", completion(Endpoint::chat));
  http_->Post("/v1/completions", completion(Endpoint::text));
  // The Anthropic Messages and OpenAI Responses APIs (their own body limits and error shapes).
  auto api = [this](auto handler) {
    return [this, handler](const Request& req, Response& res) {
      handler(ApiContext{options_, log_, models_, scheduler_}, req, res);
    };
  };
  http_->Post("/v1/messages", api(handle_anthropic_messages));
  http_->Post("/v1/messages/count_tokens", api(handle_anthropic_count_tokens));
  http_->Post("/v1/responses", api([this](const ApiContext& c, const Request& req, Response& res) {
                responses_api_->handle(c, req, res);
              }));
  auto embeddings = api([this](const ApiContext& c, const Request& req, Response& res) {
    embeddings_api_->handle(c, req, res);
  });
  http_->Post("/v1/embeddings", embeddings);
  http_->Post("/embeddings", embeddings);
  http_->Post(R"(.*)", [this](const Request&, Response& res) { send_error(res, 404, "Not Found"); });

  http_->Get("/health", [this](const Request&, Response& res) {
    bool ok = scheduler_.healthy();
    res.status = ok ? 200 : 503;
    res.set_content(python_dumps({{"status", ok ? "ok" : "unavailable"}}), "application/json");
  });
  http_->Get("/metrics", [this](const Request&, Response& res) {
    res.set_content(metrics_.render({scheduler_.queued(), scheduler_.running()}), "text/plain; version=0.0.4");
  });
  http_->Get(R"(/v1/models.*)", [this](const Request& req, Response& res) {
    std::optional<std::string> filter;
    if (req.path.rfind("/v1/models/", 0) == 0) filter = req.path.substr(11);
    auto created = static_cast<int64_t>(std::time(nullptr));
    res.set_content(python_dumps(list_models(models_.startup_id(), models_.startup_repo_id(), filter, created)),
                    "application/json");
  });
  if (options_.chat_page)
    http_->Get(R"(/|/ui/[^/]+)", [this](const Request& req, Response& res) { serve_page(req, res); });
  http_->Get(R"(.*)", [this](const Request&, Response& res) { send_error(res, 404, "Not Found"); });
  http_->Options(R"(.*)", [](const Request&, Response& res) {
    res.status = 204;
    res.set_header("Content-Type", "application/json");
  });
  auto unsupported = [this](const Request& req, Response& res) {
    send_error(res, 501, "Unsupported method ('" + req.method + "')");
  };
  http_->Put(R"(.*)", unsupported);
  http_->Patch(R"(.*)", unsupported);
  http_->Delete(R"(.*)", unsupported);

  http_->set_post_routing_handler([this](const Request& req, Response& res) { set_cors(req, res); });
  // Called once a request has been answered (a stream: once it has ended), with its final status.
  http_->set_logger([this](const Request& req, const Response& res) {
    metrics_.request_answered(req.method, req.path, res.status);
  });
  http_->set_error_handler(httplib::Server::HandlerWithResponse([this](const Request& req, Response& res) {
    if (!is_known_method(req.method) && res.status == 404) res.status = 501;
    if (res.body.empty() && !res.is_chunked_content_provider_) {
      std::string message = res.status == 413   ? "request body is too large"
                            : res.status == 501 ? "Unsupported method ('" + req.method + "')"
                            : res.status == 414 ? "request URI is too long"
                                                : "HTTP error " + std::to_string(res.status);
      send_error(res, res.status, message);
    }
    set_cors(req, res);
    return Handled::Handled;
  }));
  http_->set_exception_handler([this](const Request&, Response& res, std::exception_ptr ep) {
    std::string message = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    log_.error("request failed: " + message);
    send_error(res, 500, message);
  });
}

void HttpFront::serve_page(const httplib::Request& req, httplib::Response& res) {
  for (const WebAsset& asset : web_assets()) {
    if (asset.path != req.path) continue;
    res.set_content(asset.body.data(), asset.body.size(), std::string(asset.content_type));
    // The page fetches nothing but this server's own files and API.
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                   "frame-ancestors 'none'");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Cache-Control", "no-cache");
    return;
  }
  send_error(res, 404, "Not Found");
}

int HttpFront::bind() {
  int port = options_.port;
  bool ok = port == 0 ? (port = http_->bind_to_any_port(options_.host)) > 0 : http_->bind_to_port(options_.host, port);
  if (!ok) throw UsageError("--host/--port: cannot listen on " + options_.host + ":" + std::to_string(options_.port));
  bound_port_ = port;
  return port;
}

void HttpFront::serve() {
  log_.info("Starting httpd at " + options_.host + " on port " + std::to_string(bound_port_) + "...");
  http_->listen_after_bind();
}

void HttpFront::stop() { http_->stop(); }

}  // namespace mlxrt::server
