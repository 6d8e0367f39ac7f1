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
#include <vector>

#include "mlxrt/server/job.h"
#include "mlxrt/server/lockstep.h"
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
  /** `lockstep`: the ranks of a distributed server (null: one process). The leader (rank 0) takes
   * the jobs submitted to it and hands each to the other ranks as it starts it; the others take
   * none of their own, and run the leader's jobs through the same loop, every decision the
   * leader's (see Lockstep). The loop ends on every rank when the leader's is shut down. */
  BatchingScheduler(BatchHooks hooks, size_t max_queued, std::shared_ptr<Lockstep> lockstep = nullptr);
  ~BatchingScheduler() override;

  /** Memory admission (null: none): submit refuses a job that could never fit with 503, and a
   * job that does not fit beside the running ones waits until they free their KV cache. */
  void set_admission(std::shared_ptr<MemoryAdmission> admission);

  void submit(std::shared_ptr<Job> job) override;
  bool healthy() const override { return alive_; }
  void shutdown() override;
  size_t queued() const override;
  size_t running() const override;

  /** Called on the generation thread when its loop ends by an error (distributed: a rank has
   * gone), after every job it held has been answered. */
  void set_on_failure(std::function<void(const std::string&)> on_failure);
  /** The error that ended the loop ("" while it runs, or when it was shut down). */
  std::string failure() const;
  /** Until the loop ends (a follower rank's loop ends when the leader's does). */
  void wait();

 private:
  void loop();
  /** A queued job, waiting at most `wait` (forever when nullopt); null when none or stopping. */
  std::shared_ptr<Job> next_job(std::optional<std::chrono::milliseconds> wait);
  /** Distributed: the job the leader took (`job`, from the queue or `unprocessed`, which then no
   * longer holds it) on every rank: a follower takes the same one from its own `unprocessed`, or
   * a copy of a new one. A job the ranks cannot share (one that runs a task) is answered here and
   * taken by none. */
  std::shared_ptr<Job> share_job(std::shared_ptr<Job> job, bool from_unprocessed,
                                 std::vector<std::shared_ptr<Job>>& unprocessed);
  /** Whether the loop stops: the leader's answer on every rank. */
  bool stopping_agreed();

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
  std::shared_ptr<Lockstep> lockstep_;
  std::string failure_;
  std::function<void(const std::string&)> on_failure_;
  std::mutex join_mutex_;
  std::thread thread_;
};

}  // namespace mlxrt::server
