#pragma once
/** Memory admission (ours; mlx_lm.server has none): before a request reaches the model, the
 * weights of the resident models plus the KV cache of the requests on them plus this request's KV
 * cache (its prompt plus max_tokens, capped by its model's context; sliding-window layers cap
 * themselves) must fit the budget (--max-memory, default: what the device has, as `mlxrt fit`
 * computes it). A request that fits once others finish waits for them; one that could never fit is
 * answered 503 at once, instead of running the process out of memory. A model loaded by request
 * is sized before it loads: one whose weights would not fit beside the models that stay resident
 * is refused (503) and the resident ones carry on. */
#include <filesystem>
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
  /** `kv_bytes` sizes a job's KV cache on its model, `weights_of` a model's weights (by its
   * directory); `weights_bytes` are the resident ones' at start; `metrics` (may be null) gets the gauges. */
  MemoryAdmission(size_t budget_bytes, size_t weights_bytes, std::function<size_t(const Job&)> kv_bytes,
                  std::function<size_t(const std::filesystem::path&)> weights_of, ServerMetrics* metrics);

  /** The models resident now (after a load or an eviction): their weights count against the budget. */
  void models_resident(const std::vector<std::filesystem::path>& dirs);
  /** Before `dir` is loaded beside the models in `staying`: HttpError(503) naming `name` when the
   * weights of all of them exceed the budget. */
  void check_load(const std::filesystem::path& dir, const std::string& name,
                  const std::vector<std::filesystem::path>& staying) const;

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

  size_t budget_;
  size_t weights_;  // guarded by mutex_
  std::function<size_t(const Job&)> kv_bytes_;
  std::function<size_t(const std::filesystem::path&)> weights_of_;
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
