#include "mlxrt/server/heap_trimmer.h"

#include <algorithm>

#if MLXRT_GLIBC_HEAP
#include <malloc.h>
#endif

namespace mlxrt::server {

HeapTrimmer::HeapTrimmer(double interval_s) {
#if MLXRT_GLIBC_HEAP
  if (!(interval_s > 0)) return;
  auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(std::min(interval_s, 1e9)));
  thread_ = std::thread([this, interval] { run(interval); });
#else
  (void)interval_s;
#endif
}

HeapTrimmer::~HeapTrimmer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

unsigned long long HeapTrimmer::trims() const {
  std::lock_guard lock(mutex_);
  return trims_;
}

bool HeapTrimmer::trim_now() {
#if MLXRT_GLIBC_HEAP
  return malloc_trim(0) != 0;
#else
  return false;
#endif
}

void HeapTrimmer::run(std::chrono::steady_clock::duration interval) {
  std::unique_lock lock(mutex_);
  while (!cv_.wait_for(lock, interval, [this] { return stopping_; })) {
    lock.unlock();
    trim_now();  // unlocked: malloc's own locks serialize it with the other threads' allocations
    lock.lock();
    ++trims_;
  }
}

}  // namespace mlxrt::server
