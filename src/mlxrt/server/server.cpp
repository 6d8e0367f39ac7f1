#include "mlxrt/server/server.h"

#include "mlxrt/generate/prefill_warm_up.h"
#include "mlxrt/model/nn/expert_store.h"
#include "mlxrt/model/parallel.h"
#include "mlxrt/server/generation.h"
#include "mlxrt/server/http_front.h"
#include "mlxrt/server/lockstep.h"
#include "mlxrt/server/logger.h"
#include "mlxrt/server/model_pool.h"
#include "mlxrt/server/memory_admission.h"
#include "mlxrt/server/model_session.h"
#include "mlxrt/server/scheduler.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::server {

struct Server::Parts {
  Logger log;
  ServerMetrics metrics;
  ModelPool models;  // before the scheduler: its load jobs run on the generation thread
  std::shared_ptr<Lockstep> lockstep;
  Generator generator;
  BatchingScheduler scheduler;
  HttpFront front;
  int port = 0;

  explicit Parts(const ServerOptions& o)
      : log(o.log_level),
        models(o, log, metrics),
        lockstep(o.parallel ? std::make_shared<Lockstep>(o.parallel->group, o.ring_peers) : nullptr),
        generator(models.startup(), o, log, metrics, lockstep),
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
            static_cast<size_t>(std::max(1, o.max_queued_requests)), lockstep),
        front(o, log, models, scheduler, metrics) {}

  bool leader() const { return !lockstep || lockstep->leader(); }
};

Server::Server(ServerOptions options) : options_(std::move(options)) {
  parts_ = std::make_unique<Parts>(options_);
  parts_->log.info("--join-prefill: " + parts_->generator.join_prefill_mode());
  if (options_.warm_up) warm_up();
  if (!parts_->leader()) return;  // no requests of its own: no admission, no port
  auto admission = make_memory_admission(*parts_->models.startup(), options_, parts_->metrics, parts_->log);
  parts_->models.set_admission(admission);
  parts_->scheduler.set_admission(std::move(admission));
  // Distributed, a rank gone ends the generation loop: the HTTP side stops too, and serve() says why.
  parts_->scheduler.set_on_failure([this](const std::string&) { parts_->front.stop(); });
  parts_->port = parts_->front.bind();
}

void Server::warm_up() {
  // Distributed, each job is handed to the other ranks as a request; this one is no request.
  if (parts_->lockstep) {
    parts_->log.info("warm-up: skipped: a distributed launch (a job here is handed to every rank as a request)");
    return;
  }
  auto session = parts_->models.startup();
  if (!session) return;
  // The graphs MLX builds are kept per thread: the warm-up is a job of the generation thread,
  // queued before the port opens, so every request comes after it.
  auto job = std::make_shared<Job>(
      [this, session](Job&) {
        // Unseeded requests take the batched path, unless every request runs alone (a draft model,
        // --mtp) or each row computes as its solo run (--batch-invariant, --spec-exact).
        const bool alone = options_.batch_invariant || options_.row_exact || options_.mtp || !options_.draft_model.empty();
        auto& model = *session->loaded.model;
        parts_->log.info(generate::describe(
            alone ? generate::warm_up_prefill_shapes(model, options_.prefill_step_size, std::nullopt, options_.kv_bits)
                : generate::warm_up_server_prefill_shapes(model, options_.prefill_step_size,
                                                          options_.prompt_concurrency, options_.kv_bits,
                                                          options_.decode_concurrency)));
      },
      std::nullopt);
  parts_->scheduler.submit(job);
}

Server::~Server() {
  if (parts_) parts_->scheduler.shutdown();
}

int Server::port() const { return parts_->port; }

void Server::serve() {
  if (parts_->leader())
    parts_->front.serve();
  else
    parts_->scheduler.wait();
  parts_->scheduler.shutdown();
  if (const auto failure = parts_->scheduler.failure(); !failure.empty() && parts_->lockstep)
    throw Error("mlxrt server: rank " + std::to_string(parts_->lockstep->rank()) + " of " +
                std::to_string(parts_->lockstep->size()) + " stopped serving: " + failure);
}

void Server::stop() {
  // The generation thread first: running jobs end at once, so the HTTP threads waiting on them
  // can answer and the HTTP server can join them. (A rank other than 0 stops when rank 0 does.)
  parts_->scheduler.shutdown();
  if (parts_->leader()) parts_->front.stop();
}

}  // namespace mlxrt::server
