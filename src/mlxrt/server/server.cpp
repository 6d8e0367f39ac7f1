#include "mlxrt/server/server.h"

#include "mlxrt/model/nn/expert_store.h"
#include "mlxrt/server/generation.h"
#include "mlxrt/server/http_front.h"
#include "mlxrt/server/logger.h"
#include "mlxrt/server/model_pool.h"
#include "mlxrt/server/memory_admission.h"
#include "mlxrt/server/model_session.h"
#include "mlxrt/server/scheduler.h"

namespace mlxrt::server {

struct Server::Parts {
  Logger log;
  ServerMetrics metrics;
  ModelPool models;  // before the scheduler: its load jobs run on the generation thread
  Generator generator;
  BatchingScheduler scheduler;
  HttpFront front;
  int port = 0;

  explicit Parts(const ServerOptions& o)
      : log(o.log_level),
        models(o, log, metrics),
        generator(models.startup(), o, log, metrics),
        scheduler(
            BatchHooks{
                [this](Job& job) {
                  if (job.task()) return job.task()(job);
                  generator.run(job);
                  // Streamed experts: the cache's totals so far, after each request.
                  if (job.session() && job.session()->experts)
                    log.info(model::nn::format_expert_stats(job.session()->experts->stats()));
                },
                [this](const Job& job) { return generator.batchable(job); },
                [this](const Job& job) { generator.batch_open(job); },
                [this] { generator.batch_close(); },
                [this](const std::shared_ptr<Job>& job) { generator.batch_insert(job); },
                [this] { return generator.batch_jobs(); },
                [this](const std::function<bool()>& arrived) { generator.batch_serve(arrived); },
                [this](int status, const std::string& message) { generator.batch_fail(status, message); },
                [this](const Job& job) { return generator.batch_joinable(job); },
            },
            static_cast<size_t>(std::max(1, o.max_queued_requests))),
        front(o, log, models, scheduler, metrics) {}
};

Server::Server(ServerOptions options) : options_(std::move(options)) {
  parts_ = std::make_unique<Parts>(options_);
  auto admission = make_memory_admission(*parts_->models.startup(), options_, parts_->metrics, parts_->log);
  parts_->models.set_admission(admission);
  parts_->scheduler.set_admission(std::move(admission));
  parts_->port = parts_->front.bind();
}

Server::~Server() {
  if (parts_) parts_->scheduler.shutdown();
}

int Server::port() const { return parts_->port; }

void Server::serve() {
  parts_->front.serve();
  parts_->scheduler.shutdown();
}

void Server::stop() {
  // The generation thread first: running jobs end at once, so the HTTP threads waiting on them
  // can answer and the HTTP server can join them.
  parts_->scheduler.shutdown();
  parts_->front.stop();
}

}  // namespace mlxrt::server
