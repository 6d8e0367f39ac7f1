#include "mlxrt/server/job.h"

#include "mlxrt/server/lockstep.h"

namespace mlxrt::server {

void Job::push(JobEvent event) {
  if (std::holds_alternative<DoneEvent>(event) || std::holds_alternative<ErrorEvent>(event)) finished_ = true;
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  cv_.notify_one();
}

std::optional<JobEvent> Job::pop(std::chrono::milliseconds wait) {
  std::unique_lock lock(mutex_);
  if (!cv_.wait_for(lock, wait, [&] { return !events_.empty(); })) return std::nullopt;
  JobEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

void Job::set_probe(std::function<bool()> client_gone) {
  std::lock_guard lock(mutex_);
  client_gone_ = std::move(client_gone);
}

void Job::clear_probe() {
  std::lock_guard lock(mutex_);
  client_gone_ = nullptr;
}

bool Job::should_stop() {
  if (cancelled_ || timed_out()) return true;
  std::lock_guard lock(mutex_);
  if (client_gone_ && client_gone_()) {
    cancelled_ = true;
    return true;
  }
  return false;
}

bool Job::stop_now() { return lockstep_ ? lockstep_->agree(should_stop()) : should_stop(); }

}  // namespace mlxrt::server
