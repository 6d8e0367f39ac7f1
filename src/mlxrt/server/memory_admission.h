#pragma once
/** Memory admission (ours; mlx_lm.server has none): before a request reaches the model, the
 * weights plus the KV cache of the requests on the model plus this request's KV cache (its prompt
 * plus max_tokens, capped by the model's context; sliding-window layers cap themselves) must fit
 * the budget (--max-memory, default: what the device has, as `mlxrt fit` computes it). A request
 * that fits once others finish waits for them; one that could never fit is answered 503 at once,
 * instead of running the process out of memory. */
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "mlxrt/model/memory_estimate.h"
#include "mlxrt/server/job.h"

namespace mlxrt::server {

class Logger;
class ServerMetrics;
struct ModelSession;
struct ServerOptions;

class MemoryAdmission {
 public:
  /** `kv_bytes` sizes a job's KV cache; `metrics` (may be null) gets the gauges. */
  MemoryAdmission(size_t budget_bytes, size_t weights_bytes, std::function<size_t(const Job&)> kv_bytes,
                  ServerMetrics* metrics);

  /** At submit: HttpError(503) when the job could not fit even on an idle server. */
  void check(const Job& job) const;
  /** Reserves the job's KV bytes if they fit beside the admitted jobs'; false otherwise. */
  bool try_admit(const std::shared_ptr<Job>& job);
  /** A job did not fit beside the running ones and waits (counted for /metrics). */
  void note_wait();
  /** Drops the reservation of `job`. */
  void release(const Job& job);
  /** Drops the reservations of the jobs that have finished. */
  void release_finished();
  size_t admitted_bytes() const;
  size_t budget_bytes() const { return budget_; }

 private:
  void publish() const;

  size_t budget_, weights_;
  std::function<size_t(const Job&)> kv_bytes_;
  ServerMetrics* metrics_;
  mutable std::mutex mutex_;
  std::vector<std::pair<std::shared_ptr<Job>, size_t>> admitted_;
  size_t in_use_ = 0;
  size_t waits_ = 0;
};

/** The admission of a loaded session: the model's cache geometry, its weights' bytes, and the
 * budget (options.max_memory_gb, else the device's memory as `mlxrt fit` sees it, less the
 * backend's headroom). UsageError for a budget below the weights. A model whose memory cannot be
 * estimated is an error with --max-memory; without it admission is off (null, with a warning). */
std::shared_ptr<MemoryAdmission> make_memory_admission(const ModelSession& session, const ServerOptions& options,
                                                       ServerMetrics& metrics, Logger& log);

}  // namespace mlxrt::server
