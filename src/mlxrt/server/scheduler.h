#pragma once
/** Where jobs wait for the model. The interface is what the HTTP side sees; SerialScheduler runs
 * one job at a time, in arrival order, on one generation thread (continuous batching can replace
 * it behind the same interface). */
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "mlxrt/server/job.h"

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

}  // namespace mlxrt::server
