#pragma once
/** The HTTP side of the server (cpp-httplib): routes, request limits, CORS, error bodies, and the
 * completion endpoints, which parse and tokenize on the connection's thread, queue the job, and
 * write its events back as one JSON response or as server-sent events; and the chat page at `/`. */
#include <memory>
#include <string>

#include "mlxrt/server/logger.h"
#include "mlxrt/server/metrics.h"
#include "mlxrt/server/model_pool.h"
#include "mlxrt/server/options.h"
#include "mlxrt/server/scheduler.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace mlxrt::server {

class ResponsesApi;
class EmbeddingsApi;
class HeapTrimmer;
class ReadDeadline;

class HttpFront {
 public:
  HttpFront(const ServerOptions& options, Logger& log, ModelPool& models, Scheduler& scheduler,
            ServerMetrics& metrics);
  ~HttpFront();

  /** Binds options.host:options.port (port 0: any free port); UsageError when it cannot. Returns
   * the bound port. */
  int bind();
  /** Serves until stop(), each request read under the header and body deadlines
   * (--header-timeout, --body-timeout: read_deadline.h). */
  void serve();
  void stop();

 private:
  void install_routes();
  void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = {});
  void set_cors(const httplib::Request& req, httplib::Response& res) const;
  /** The chat page's files (web_assets.h); 404 for a path that is none of them. */
  void serve_page(const httplib::Request& req, httplib::Response& res);

  const ServerOptions& options_;
  Logger& log_;
  ModelPool& models_;
  Scheduler& scheduler_;
  ServerMetrics& metrics_;
  std::string fingerprint_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<ResponsesApi> responses_api_;  // /v1/responses and its store
  std::unique_ptr<EmbeddingsApi> embeddings_api_;  // /v1/embeddings
  int bound_port_ = 0;
  std::unique_ptr<ReadDeadline> read_deadline_;  // while serving; none when both timeouts are 0
  std::unique_ptr<HeapTrimmer> heap_trimmer_;    // while serving
};

}  // namespace mlxrt::server
