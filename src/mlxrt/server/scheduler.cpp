#include "mlxrt/server/scheduler.h"

#include <exception>

#include "mlxrt/server/http_error.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::server {

SerialScheduler::SerialScheduler(std::function<void(Job&)> run, size_t max_queued)
    : run_(std::move(run)), max_queued_(max_queued), thread_([this] { loop(); }) {}

SerialScheduler::~SerialScheduler() { shutdown(); }

void SerialScheduler::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || !alive_) throw HttpError(503, "the generation thread is not running");
    if (queue_.size() >= max_queued_) throw HttpError(503, "too many requests are waiting; retry later");
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void SerialScheduler::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    if (running_) running_->cancel();
  }
  cv_.notify_all();
  std::lock_guard join_lock(join_mutex_);
  if (thread_.joinable()) thread_.join();
}

size_t SerialScheduler::queued() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

size_t SerialScheduler::running() const {
  std::lock_guard lock(mutex_);
  return running_ ? 1 : 0;
}

void SerialScheduler::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) {
        for (auto& queued : queue_) queued->push(ErrorEvent{503, "the server is shutting down"});
        queue_.clear();
        break;
      }
      job = std::move(queue_.front());
      queue_.pop_front();
      running_ = job;
    }
    // A job whose client left (or whose time ran out) while it waited is not started.
    if (job->should_stop()) {
      job->push(ErrorEvent{job->timed_out() ? 504 : 499, job->timed_out() ? "request timed out in the queue"
                                                                          : "client closed the request"});
    } else {
      try {
        run_(*job);
      } catch (const HttpError& e) {
        job->push(ErrorEvent{e.status(), e.what()});
      } catch (const std::exception& e) {
        job->push(ErrorEvent{500, e.what()});
      }
    }
    std::lock_guard lock(mutex_);
    running_.reset();
  }
  alive_ = false;
}

// Port of the request loop of ResponseGenerator._generate (mlx_lm/server.py, mlx-lm 0.32.2).

BatchingScheduler::BatchingScheduler(BatchHooks hooks, size_t max_queued, std::shared_ptr<Lockstep> lockstep)
    : hooks_(std::move(hooks)), max_queued_(max_queued), lockstep_(std::move(lockstep)), thread_([this] { loop(); }) {}

BatchingScheduler::~BatchingScheduler() { shutdown(); }

void BatchingScheduler::set_admission(std::shared_ptr<MemoryAdmission> admission) {
  std::lock_guard lock(mutex_);
  admission_ = std::move(admission);
}

void BatchingScheduler::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard lock(mutex_);
    if (admission_) admission_->check(*job);
    if (stopping_ || !alive_) throw HttpError(503, "the generation thread is not running");
    if (queue_.size() >= max_queued_) throw HttpError(503, "too many requests are waiting; retry later");
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void BatchingScheduler::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    if (running_single_) running_single_->cancel();
  }
  cv_.notify_all();
  std::lock_guard join_lock(join_mutex_);
  if (thread_.joinable()) thread_.join();
}

size_t BatchingScheduler::queued() const {
  std::lock_guard lock(mutex_);
  return queue_.size() + waiting_memory_.size();
}

size_t BatchingScheduler::running() const {
  std::lock_guard lock(mutex_);
  return (running_single_ ? 1 : 0) + batch_jobs_.load();
}

std::shared_ptr<Job> BatchingScheduler::next_job(std::optional<std::chrono::milliseconds> wait) {
  std::unique_lock lock(mutex_);
  auto ready = [&] { return stopping_ || !queue_.empty(); };
  if (wait)
    cv_.wait_for(lock, *wait, ready);
  else
    cv_.wait(lock, ready);
  if (stopping_ || queue_.empty()) return nullptr;
  auto job = std::move(queue_.front());
  queue_.pop_front();
  return job;
}

bool BatchingScheduler::stopping_agreed() {
  bool stop;
  {
    std::lock_guard lock(mutex_);
    stop = stopping_;
  }
  return lockstep_ ? lockstep_->agree(stop) : stop;
}

std::shared_ptr<Job> BatchingScheduler::share_job(std::shared_ptr<Job> job, bool from_unprocessed,
                                                  std::vector<std::shared_ptr<Job>>& unprocessed) {
  // What the leader sends: nothing, "u" (the last unprocessed job), or "j" and a new job.
  std::optional<std::string> wire;
  if (lockstep_->leader() && job) {
    if (from_unprocessed) {
      wire = "u";
    } else if (job->task()) {
      job->push(ErrorEvent{501, "embeddings are not served when the server runs distributed (mlx.launch): "
                                "only completions are"});
      job.reset();
    } else {
      wire = "j" + job_to_wire(*job);
    }
  }
  auto shared = lockstep_->share(wire);
  if (!lockstep_->leader()) {
    if (!shared) return nullptr;
    if (*shared == "u") {
      if (unprocessed.empty()) throw Error("distributed server: rank 0 resumed a request this rank does not hold");
      job = std::move(unprocessed.back());
      unprocessed.pop_back();
    } else {
      job = job_from_wire(shared->substr(1));
    }
  }
  if (job) job->set_lockstep(lockstep_);
  return job;
}

void BatchingScheduler::loop() {
  bool open = false, drain = false;
  std::vector<std::shared_ptr<Job>> unprocessed;  // taken from the queue, not yet placed
  auto stopping = [&] {
    std::lock_guard lock(mutex_);
    return stopping_;
  };
  auto run_alone = [&](const std::shared_ptr<Job>& job) {
    {
      std::lock_guard lock(mutex_);
      running_single_ = job;
    }
    try {
      hooks_.run_single(*job);
    } catch (const LockstepError& e) {
      job->push(ErrorEvent{500, e.what()});
      throw;  // the ranks are out of step: the loop ends
    } catch (const HttpError& e) {
      job->push(ErrorEvent{e.status(), e.what()});
    } catch (const std::exception& e) {
      job->push(ErrorEvent{500, e.what()});
    }
    if (admission_) admission_->release(*job);
    std::lock_guard lock(mutex_);
    running_single_.reset();
  };
  // Memory admission: the first waiting job that fits now (its client still there), else null.
  auto admitted_waiting = [&]() -> std::shared_ptr<Job> {
    if (!admission_) return nullptr;
    admission_->release_finished();
    std::lock_guard lock(mutex_);
    for (auto it = waiting_memory_.begin(); it != waiting_memory_.end(); ++it) {
      if ((*it)->should_stop() || admission_->try_admit(*it)) {
        auto job = std::move(*it);
        waiting_memory_.erase(it);
        return job;
      }
    }
    return nullptr;
  };
  const bool follower = lockstep_ && !lockstep_->leader();
  try {
    while (lockstep_ ? !stopping_agreed() : !stopping()) {
      std::shared_ptr<Job> job;
      bool from_unprocessed = false;
      if (!drain && !follower) job = admitted_waiting();
      if (!drain && !job && !follower) {
        if (!unprocessed.empty()) {
          job = std::move(unprocessed.back());
          unprocessed.pop_back();
          from_unprocessed = true;
        } else {
          // Poll while the batch has work; otherwise wait (a tenth of a second with a batch open).
          // Distributed, the other ranks wait in a collective for what the leader takes: it looks
          // every tenth of a second, as mlx_lm.server does, so they hear of a shutdown.
          std::optional<std::chrono::milliseconds> wait;
          if (open) wait = std::chrono::milliseconds(hooks_.jobs() > 0 ? 0 : 100);
          if (!waiting_memory_.empty()) wait = std::chrono::milliseconds(wait ? 0 : 100);
          if (lockstep_ && !wait) wait = std::chrono::milliseconds(100);
          job = next_job(wait);
          // A job that does not fit beside the running ones waits for their memory.
          if (job && !job->should_stop() && admission_ && !admission_->try_admit(job)) {
            admission_->note_wait();
            std::lock_guard lock(mutex_);
            waiting_memory_.push_back(std::move(job));
            job.reset();
          }
        }
      }
      if (lockstep_ && !drain) {
        if (follower) lockstep_->await_leader();
        job = share_job(std::move(job), from_unprocessed, unprocessed);
      }
      if (job) {
        // A job whose client left (or whose time ran out) while it waited is not started.
        if (job->stop_now()) {
          job->push(ErrorEvent{job->timed_out() ? 504 : 499, job->timed_out() ? "request timed out in the queue"
                                                                              : "client closed the request"});
          continue;
        }
        const bool batchable = hooks_.batchable(*job);
        // Only jobs of one model share a batch; another model's job waits for the batch to drain.
        if (open && batchable && (!hooks_.joinable || hooks_.joinable(*job))) {
          try {
            hooks_.insert(job);
          } catch (const LockstepError& e) {
            job->push(ErrorEvent{500, e.what()});
            throw;  // the ranks are out of step: the loop ends
          } catch (const std::exception& e) {
            job->push(ErrorEvent{500, e.what()});
          }
          batch_jobs_ = hooks_.jobs();
        } else if (!open) {
          if (!batchable) {
            run_alone(job);
          } else {
            try {
              hooks_.open(*job);
              open = true;
              unprocessed.push_back(std::move(job));
            } catch (const std::exception& e) {
              job->push(ErrorEvent{500, e.what()});
            }
          }
        } else {
          // The batch cannot take this job: let it drain, then serve the job.
          drain = true;
          unprocessed.push_back(std::move(job));
        }
        continue;
      }
      if (!open) continue;
      if (hooks_.jobs() == 0) {
        if (drain) {
          hooks_.close();
          open = false;
          drain = false;
        }
        continue;
      }
      try {
        // A job that came in (and that this loop would take next: not while draining, when the
        // queue waits for the batch to end) cuts the batch's budget short.
        hooks_.serve([this, &drain] {
          std::lock_guard lock(mutex_);
          return !drain && !queue_.empty();
        });
      } catch (const LockstepError&) {
        throw;  // the ranks are out of step: the loop ends
      } catch (const std::exception& e) {
        hooks_.fail(500, e.what());
        open = false;
        drain = false;
      }
      batch_jobs_ = hooks_.jobs();
      if (admission_) admission_->release_finished();
    }
  } catch (const std::exception& e) {
    // The loop itself failed (distributed: a rank is gone); the jobs still held are answered below.
    std::lock_guard lock(mutex_);
    failure_ = e.what();
  }
  if (open) hooks_.fail(503, "the server is shutting down");
  batch_jobs_ = 0;
  for (auto& job : unprocessed) job->push(ErrorEvent{503, "the server is shutting down"});
  std::function<void(const std::string&)> on_failure;
  std::string failure;
  {
    std::lock_guard lock(mutex_);
    for (auto& queued : queue_) queued->push(ErrorEvent{503, "the server is shutting down"});
    queue_.clear();
    for (auto& waiting : waiting_memory_) waiting->push(ErrorEvent{503, "the server is shutting down"});
    waiting_memory_.clear();
    alive_ = false;
    on_failure = on_failure_;
    failure = failure_;
  }
  if (!failure.empty() && on_failure) on_failure(failure);
}

void BatchingScheduler::set_on_failure(std::function<void(const std::string&)> on_failure) {
  std::lock_guard lock(mutex_);
  on_failure_ = std::move(on_failure);
}

std::string BatchingScheduler::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void BatchingScheduler::wait() {
  std::lock_guard join_lock(join_mutex_);
  if (thread_.joinable()) thread_.join();
}

}  // namespace mlxrt::server
