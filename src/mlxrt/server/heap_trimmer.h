#pragma once
/** Hands the C heap's freed pages back to the system every few seconds, for a server that runs
 * for days.
 *
 * Why: MLX's CPU buffers come from malloc, and glibc raises its mmap threshold to the size of the
 * largest block freed (up to 32 MB): after the first step, a step's logits and activations are
 * carved from malloc's arenas between the requests' small, long-lived allocations. Freed, they
 * stay with the arenas. Under a soak of 64 clients the resident size grew 17-23 MB a minute while
 * the bytes in use stayed flat and the arenas' free bytes grew (bench/RESULTS.md, thirty-first
 * session). Pinning the threshold instead (every large block mapped and unmapped) flattened it but
 * cost a quarter of the throughput; malloc_trim returns the free pages inside the arenas as well
 * as at their tops, and costs a few page faults when they are used again.
 *
 * glibc only: elsewhere (macOS' allocator returns pages itself) this does nothing. */
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

// glibc's malloc_trim and mallinfo2 (2.33 and later): the trims here and the heap's /metrics gauges.
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
#define MLXRT_GLIBC_HEAP 1
#else
#define MLXRT_GLIBC_HEAP 0
#endif

namespace mlxrt::server {

class HeapTrimmer {
 public:
  /** Trims every `interval_s` seconds from a thread of its own; 0 (or less): never, no thread. */
  explicit HeapTrimmer(double interval_s);
  /** Stops and joins the thread. */
  ~HeapTrimmer();
  HeapTrimmer(const HeapTrimmer&) = delete;
  HeapTrimmer& operator=(const HeapTrimmer&) = delete;

  /** Trims done so far. */
  unsigned long long trims() const;

  /** One trim now, on the calling thread: whether any memory went back to the system. */
  static bool trim_now();

 private:
  void run(std::chrono::steady_clock::duration interval);

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  unsigned long long trims_ = 0;
  std::thread thread_;  // last: started once the rest is set up
};

}  // namespace mlxrt::server
