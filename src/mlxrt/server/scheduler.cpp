#include "mlxrt/server/scheduler.h"

#include <exception>

#include "mlxrt/server/http_error.h"

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

}  // namespace mlxrt::server
