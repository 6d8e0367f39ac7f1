#pragma once
/** Where jobs wait for the model. The interface is what the HTTP side sees; SerialScheduler runs
 * one job at a time, in arrival order, on one generation thread (continuous batching can replace
 * it behind the same interface). */
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "mlxrt/server/job.h"
#include "mlxrt/server/memory_admission.h"

namespace mlxrt::server {

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  /** Queues a job. HttpError(503) when the queue is full or the generation thread has died. */
  virtual void submit(std::shared_ptr<Job> job) = 0;
  /** The generation thread is alive. */
  virtual bool healthy() const = 0;
  /** Stops taking jobs, cancels the queued and the running one, joins the thread. */
  virtual void shutdown() = 0;
  /** Jobs waiting, and jobs on the model now (for /metrics). */
  virtual size_t queued() const = 0;
  virtual size_t running() const = 0;
};

class SerialScheduler final : public Scheduler {
 public:
  /** `run` serves one job (pushing its events, ending with DoneEvent or ErrorEvent); it is only
   * ever called from the generation thread. */
  SerialScheduler(std::function<void(Job&)> run, size_t max_queued);
  ~SerialScheduler() override;

  void submit(std::shared_ptr<Job> job) override;
  bool healthy() const override { return alive_; }
  void shutdown() override;
  size_t queued() const override;
  size_t running() const override;

 private:
  void loop();

  std::function<void(Job&)> run_;
  size_t max_queued_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<Job> running_;  // the job on the model now (cancelled by shutdown)
  bool stopping_ = false;
  std::atomic<bool> alive_{true};
  std::mutex join_mutex_;  // shutdown() may be called from several threads
  std::thread thread_;
};

/** What the batching scheduler drives (the Generator's batch path and its serial one). */
struct BatchHooks {
  std::function<void(Job&)> run_single;                 // serves one job alone
  std::function<bool(const Job&)> batchable;             // mlx_lm.server's _is_batchable
  std::function<void(const Job&)> open;                  // make the BatchGenerator for the job's model
  std::function<void()> close;                           // drop the BatchGenerator
  std::function<void(const std::shared_ptr<Job>&)> insert;
  std::function<size_t()> jobs;                          // jobs in the batch
  /** One time budget of steps (mlx_lm.server's TimeBudget); it ends early, after a step, once
   * `arrived()` says a job waits in the queue, so that a new request joins at the next step
   * instead of waiting out the budget. */
  std::function<void(const std::function<bool()>& arrived)> serve;
  std::function<void(int, const std::string&)> fail;     // ends every batch job with an error
  std::function<bool(const Job&)> joinable;              // the job runs on the open batch's model
};

/** mlx_lm.server's _generate loop: batchable jobs join one BatchGenerator as they arrive and are
 * decoded together, leaving at step boundaries; a job that cannot batch waits until the batch has
 * drained, then runs alone (as does every job while no batch is open and the job cannot batch). */
class BatchingScheduler final : public Scheduler {
 public:
  BatchingScheduler(BatchHooks hooks, size_t max_queued);
  ~BatchingScheduler() override;

  /** Memory admission (null: none): submit refuses a job that could never fit with 503, and a
   * job that does not fit beside the running ones waits until they free their KV cache. */
  void set_admission(std::shared_ptr<MemoryAdmission> admission);

  void submit(std::shared_ptr<Job> job) override;
  bool healthy() const override { return alive_; }
  void shutdown() override;
  size_t queued() const override;
  size_t running() const override;

 private:
  void loop();
  /** A queued job, waiting at most `wait` (forever when nullopt); null when none or stopping. */
  std::shared_ptr<Job> next_job(std::optional<std::chrono::milliseconds> wait);

  BatchHooks hooks_;
  size_t max_queued_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<MemoryAdmission> admission_;
  std::deque<std::shared_ptr<Job>> waiting_memory_;  // taken from the queue, waiting for memory
  std::shared_ptr<Job> running_single_;
  std::atomic<size_t> batch_jobs_{0};
  bool stopping_ = false;
  std::atomic<bool> alive_{true};
  std::mutex join_mutex_;
  std::thread thread_;
};

}  // namespace mlxrt::server
