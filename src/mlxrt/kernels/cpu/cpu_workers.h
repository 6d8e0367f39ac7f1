#pragma once
/** A small pool of worker threads for the CPU kernels: a kernel call's work units are claimed in
 * chunks by the caller's thread and the workers, each unit computed by one thread, so a result
 * never depends on how many threads computed it or which. */
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mlxrt::kernels::cpu {

class CpuWorkers {
 public:
  /** `threads` in all, the caller's included (at least 1). */
  explicit CpuWorkers(int threads);
  ~CpuWorkers();
  CpuWorkers(const CpuWorkers&) = delete;
  CpuWorkers& operator=(const CpuWorkers&) = delete;

  int threads() const { return threads_; }

  /** Calls fn(scratch, begin, end) over contiguous ranges covering [0, units), in parallel, and
   * returns when all are done. `scratch` points to at least `scratch_floats` floats that belong
   * to that range's thread for the call. While another call runs (two MLX streams at once), this
   * one runs on the caller's thread alone. */
  void run(int units, long long scratch_floats, const std::function<void(float*, int, int)>& fn);

 private:
  void work(int slot);
  void claim_and_run(int slot, std::uint64_t generation, const std::function<void(float*, int, int)>& fn, int units,
                     int chunk, long long floats);
  float* scratch(int slot, long long floats);

  const int threads_;
  std::vector<std::vector<float>> scratch_;  // by slot; slot 0 is the caller's
  std::mutex run_mutex_;                     // one run at a time
  std::mutex m_;
  std::condition_variable wake_, done_;
  std::atomic<std::uint64_t> generation_{0};
  // Units of the run in progress not yet done: counted down without the lock, so the caller's
  // poll and the workers' finishing never queue on m_ (its lock is taken only to sleep and wake).
  std::atomic<int> remaining_{0};
  // The run's generation (low 32 bits) above the next unit to claim: a thread claims only units of
  // the run it woke for.
  std::atomic<std::uint64_t> claim_{0};
  bool stop_ = false;
  // The run in progress (written under m_ before generation_ moves).
  const std::function<void(float*, int, int)>* fn_ = nullptr;
  int units_ = 0;
  int chunk_ = 1;
  long long scratch_floats_ = 0;
  std::vector<std::thread> workers_;
};

}  // namespace mlxrt::kernels::cpu
