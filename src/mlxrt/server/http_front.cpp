#include "mlxrt/server/http_front.h"

#include "mlxrt/server/request_guards.h"

#include <httplib.h>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <sstream>

#include "mlxrt/server/anthropic_api.h"
#include "mlxrt/server/connection_pool.h"
#include "mlxrt/server/embeddings_api.h"
#include "mlxrt/server/heap_trimmer.h"
#include "mlxrt/server/http_error.h"
#include "mlxrt/server/models_list.h"
#include "mlxrt/server/python_json.h"
#include "mlxrt/server/read_deadline.h"
#include "mlxrt/server/request.h"
#include "mlxrt/server/responses.h"
#include "mlxrt/server/responses_api.h"
#include "mlxrt/server/web_assets.h"

namespace mlxrt::server {

void handle_completion_request(const ServerOptions& options, Logger& log, ModelPool& models,
                               Scheduler& scheduler, const std::string& fingerprint, const httplib::Request& req,
                               httplib::Response& res, Endpoint endpoint);

namespace {
// As nginx's default: enough for a few hundred clients (re)connecting in the same instant.
constexpr int kListenBacklog = 511;


// How much of an over-limit body is still read before refusing it (see the constructor).
size_t drain_limit(size_t max_body_bytes) { return max_body_bytes + std::max<size_t>(max_body_bytes * 3, 16u << 20); }

bool is_known_method(const std::string& m) { return m == "GET" || m == "POST" || m == "OPTIONS" || m == "HEAD"; }

/** What a connection whose body is late gets before it is closed (read_deadline.h). */
std::string body_timeout_reply(double seconds) {
  std::ostringstream limit;
  limit << seconds;
  std::string body = python_dumps(
      error_body(408, "the request body did not arrive within " + limit.str() + " seconds (--body-timeout)"));
  return "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

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
    // Called once the header block is read, before the body.
    if (read_deadline_) read_deadline_->headers_read(req.remote_addr, req.remote_port);
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

  // Every route starts by telling the read deadline that its request is read and being answered:
  // from here on (generation, streaming) the connection is not cut.
  auto handled = [this](httplib::Server::Handler handler) -> httplib::Server::Handler {
    return [this, handler = std::move(handler)](const Request& req, Response& res) {
      if (read_deadline_) read_deadline_->handling(req.remote_addr, req.remote_port);
      handler(req, res);
    };
  };
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
  http_->Post("/v1/chat/completions", handled(completion(Endpoint::chat)));
  http_->Post("/chat/completions", handled(completion(Endpoint::chat)));
  http_->Post("/v1/completions", handled(completion(Endpoint::text)));
  // The Anthropic Messages and OpenAI Responses APIs (their own body limits and error shapes).
  auto api = [this](auto handler) {
    return [this, handler](const Request& req, Response& res) {
      handler(ApiContext{options_, log_, models_, scheduler_}, req, res);
    };
  };
  http_->Post("/v1/messages", handled(api(handle_anthropic_messages)));
  http_->Post("/v1/messages/count_tokens", handled(api(handle_anthropic_count_tokens)));
  auto responses = api([this](const ApiContext& c, const Request& req, Response& res) {
    responses_api_->handle(c, req, res);
  });
  http_->Post("/v1/responses", handled(responses));
  auto embeddings = api([this](const ApiContext& c, const Request& req, Response& res) {
    embeddings_api_->handle(c, req, res);
  });
  http_->Post("/v1/embeddings", handled(embeddings));
  http_->Post("/embeddings", handled(embeddings));
  http_->Post(R"(.*)", handled([this](const Request&, Response& res) { send_error(res, 404, "Not Found"); }));

  http_->Get("/health", handled([this](const Request&, Response& res) {
    bool ok = scheduler_.healthy();
    res.status = ok ? 200 : 503;
    res.set_content(python_dumps({{"status", ok ? "ok" : "unavailable"}}), "application/json");
  }));
  http_->Get("/metrics", handled([this](const Request&, Response& res) {
    res.set_content(metrics_.render({scheduler_.queued(), scheduler_.running()}), "text/plain; version=0.0.4");
  }));
  http_->Get(R"(/v1/models.*)", handled([this](const Request& req, Response& res) {
    std::optional<std::string> filter;
    if (req.path.rfind("/v1/models/", 0) == 0) filter = req.path.substr(11);
    auto created = static_cast<int64_t>(std::time(nullptr));
    res.set_content(python_dumps(list_models(models_.startup_id(), models_.startup_repo_id(), filter, created)),
                    "application/json");
  }));
  if (options_.chat_page)
    http_->Get(R"(/|/ui/[^/]+)", handled([this](const Request& req, Response& res) { serve_page(req, res); }));
  http_->Get(R"(.*)", handled([this](const Request&, Response& res) { send_error(res, 404, "Not Found"); }));
  http_->Options(R"(.*)", handled([](const Request&, Response& res) {
    res.status = 204;
    res.set_header("Content-Type", "application/json");
  }));
  auto unsupported = [this](const Request& req, Response& res) {
    send_error(res, 501, "Unsupported method ('" + req.method + "')");
  };
  http_->Put(R"(.*)", handled(unsupported));
  http_->Patch(R"(.*)", handled(unsupported));
  http_->Delete(R"(.*)", handled(unsupported));

  http_->set_post_routing_handler([this](const Request& req, Response& res) { set_cors(req, res); });
  // Called once a request has been answered (a stream: once it has ended), with its final status.
  // The connection may now carry its next request: its header deadline starts again.
  http_->set_logger([this](const Request& req, const Response& res) {
    bool cut = read_deadline_ && read_deadline_->answered(req.remote_addr, req.remote_port);
    metrics_.request_answered(req.method, req.path, cut ? 408 : res.status);  // cut: the client got the 408
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
  // The HTTP library listens with a backlog of 5 (fixed when it was compiled), so a burst of clients
  // connecting at once sees some connections dropped and retried by the kernel a second later.
  // Note the socket it binds, and widen its accept queue once bound (listen() again on a listening
  // socket only changes the backlog).
  int listening = -1;
  http_->set_socket_options([&listening](socket_t sock) {
    httplib::default_socket_options(sock);
    listening = static_cast<int>(sock);  // the last one tried is the one bound
  });
  int port = options_.port;
  bool ok = port == 0 ? (port = http_->bind_to_any_port(options_.host)) > 0 : http_->bind_to_port(options_.host, port);
  if (!ok) throw UsageError("--host/--port: cannot listen on " + options_.host + ":" + std::to_string(options_.port));
  http_->set_socket_options(httplib::default_socket_options);
  if (listening >= 0 && ::listen(listening, kListenBacklog) != 0)
    log_.warning(std::string("could not widen the accept queue: ") + std::strerror(errno));
  bound_port_ = port;
  return port;
}

void HttpFront::serve() {
  log_.info("Starting httpd at " + options_.host + " on port " + std::to_string(bound_port_) + "...");
  if (options_.header_timeout_s > 0 || options_.body_timeout_s > 0)
    read_deadline_ = std::make_unique<ReadDeadline>(
        bound_port_, options_.header_timeout_s, options_.body_timeout_s, body_timeout_reply(options_.body_timeout_s),
        [this](ReadPhase phase) { metrics_.read_timed_out(phase); });
  heap_trimmer_ = std::make_unique<HeapTrimmer>(options_.heap_trim_interval_s);
  http_->listen_after_bind();
  heap_trimmer_.reset();
  read_deadline_.reset();  // every connection's thread has been joined
}

void HttpFront::stop() { http_->stop(); }

}  // namespace mlxrt::server
