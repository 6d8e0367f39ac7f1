#pragma once
/** The threads that serve HTTP connections. A connection holds its thread while it is read (an
 * idle client that sent half a header block holds it until the read timeout), so a fixed pool of a
 * hundred threads lets a hundred idle sockets starve `/health`. This pool starts small and adds a
 * thread whenever a connection arrives and none is free, up to `max_threads` (--http-threads);
 * only past that do connections wait for one. Threads that were added stay for later bursts. */
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <httplib.h>

namespace mlxrt::server {

class ConnectionPool final : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(size_t max_threads, size_t initial_threads = 8);
  ~ConnectionPool() override;
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  void enqueue(std::function<void()> fn) override;
  /** Stops taking connections, lets the queued ones run, joins every thread. */
  void shutdown() override;

  size_t threads() const;

 private:
  void add_thread();  // with mutex_ held
  void work();

  const size_t max_threads_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stopping_ = false;
};

}  // namespace mlxrt::server
