#include "mlxrt/server/connection_pool.h"

#include <algorithm>

namespace mlxrt::server {

ConnectionPool::ConnectionPool(size_t max_threads, size_t initial_threads) : max_threads_(std::max<size_t>(1, max_threads)) {
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < std::min(initial_threads, max_threads_); ++i) add_thread();
}

ConnectionPool::~ConnectionPool() { shutdown(); }

void ConnectionPool::add_thread() {
  if (stopping_) return;
  ++idle_;  // free from its start: it goes straight to the queue
  threads_.emplace_back([this] { work(); });
}

void ConnectionPool::enqueue(std::function<void()> fn) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(fn));
    // Every thread is busy with a connection (reading it, or generating for it): one more, so a
    // new connection (a /health probe among them) does not wait behind idle or slow clients.
    if (idle_ < jobs_.size() && threads_.size() < max_threads_) add_thread();
  }
  cv_.notify_one();
}

void ConnectionPool::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    auto fn = std::move(jobs_.front());
    jobs_.pop_front();
    --idle_;
    lock.unlock();
    fn();
    lock.lock();
    ++idle_;
  }
}

void ConnectionPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : threads)
    if (t.joinable()) t.join();
}

size_t ConnectionPool::threads() const {
  std::lock_guard lock(mutex_);
  return threads_.size();
}

}  // namespace mlxrt::server
