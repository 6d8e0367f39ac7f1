#include "mlxrt/kernels/cpu/cpu_workers.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mlxrt::kernels::cpu {

namespace {

// How long a waiting thread polls before it sleeps: a decode step makes a few hundred kernel
// calls a few tens of microseconds apart, and a condition-variable wake costs about as much as a
// small call; beyond this the thread yields the core (other processes may need it).
constexpr auto kSpin = std::chrono::microseconds(50);

inline void relax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

template <class Ready>
bool spin_until(Ready ready) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (ready()) return true;
    relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return false;
  }
}

}  // namespace

CpuWorkers::CpuWorkers(int threads) : threads_(std::max(1, threads)), scratch_(static_cast<size_t>(threads_)) {
  for (int slot = 1; slot < threads_; ++slot) workers_.emplace_back([this, slot] { work(slot); });
}

CpuWorkers::~CpuWorkers() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

float* CpuWorkers::scratch(int slot, long long floats) {
  auto& s = scratch_[static_cast<size_t>(slot)];
  if (static_cast<long long>(s.size()) < floats) s.resize(static_cast<size_t>(floats));
  return s.data();
}

void CpuWorkers::run(int units, long long scratch_floats, const std::function<void(float*, int, int)>& fn) {
  if (units <= 0) return;
  std::unique_lock run_lock(run_mutex_, std::try_to_lock);
  if (!run_lock.owns_lock() || threads_ == 1 || units == 1) {
    if (run_lock.owns_lock()) {
      fn(scratch(0, scratch_floats), 0, units);
    } else {
      std::vector<float> own(static_cast<size_t>(scratch_floats));
      fn(own.data(), 0, units);
    }
    return;
  }
  // Chunks of a quarter of a thread's share, claimed in turn: a thread the system runs late (other
  // processes on the machine) leaves its chunks to the others instead of making them wait.
  const int chunk = std::max(1, units / (std::min(threads_, units) * 4));
  std::uint64_t generation;
  {
    std::lock_guard lock(m_);
    fn_ = &fn;
    units_ = units;
    chunk_ = chunk;
    scratch_floats_ = scratch_floats;
    remaining_.store(units, std::memory_order_relaxed);
    generation = generation_.fetch_add(1, std::memory_order_relaxed) + 1;
    claim_.store(generation << 32, std::memory_order_release);
  }
  wake_.notify_all();
  claim_and_run(0, generation, fn, units, chunk, scratch_floats);
  auto finished = [this] { return remaining_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(finished)) {
    std::unique_lock lock(m_);
    done_.wait(lock, finished);
  }
}

void CpuWorkers::claim_and_run(int slot, std::uint64_t generation, const std::function<void(float*, int, int)>& fn,
                               int units, int chunk, long long floats) {
  float* own = nullptr;
  for (;;) {
    // Claim [begin, end) of this run's units, unless they are all claimed or another run began.
    std::uint64_t c = claim_.load(std::memory_order_acquire);
    int begin, end;
    for (;;) {
      if ((c >> 32) != (generation & 0xFFFFFFFFu)) return;
      begin = static_cast<int>(c & 0xFFFFFFFFu);
      if (begin >= units) return;
      end = std::min(units, begin + chunk);
      if (claim_.compare_exchange_weak(c, (c & ~std::uint64_t{0xFFFFFFFFu}) | static_cast<std::uint32_t>(end),
                                       std::memory_order_acq_rel))
        break;
    }
    if (!own) own = scratch(slot, floats);
    fn(own, begin, end);
    if (remaining_.fetch_sub(end - begin, std::memory_order_acq_rel) == end - begin) {
      // Under the lock, so a caller between its last poll and its wait cannot miss the wake.
      std::lock_guard lock(m_);
      done_.notify_one();
    }
  }
}

void CpuWorkers::work(int slot) {
  std::uint64_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      std::unique_lock lock(m_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
    }
    const std::function<void(float*, int, int)>* fn;
    int units, chunk;
    long long floats;
    {
      std::lock_guard lock(m_);
      if (stop_) return;
      seen = generation_.load();
      fn = fn_;
      units = units_;
      chunk = chunk_;
      floats = scratch_floats_;
    }
    // A run that ended before this thread woke has no units left to claim: fn is not called.
    claim_and_run(slot, seen, *fn, units, chunk, floats);
  }
}

}  // namespace mlxrt::kernels::cpu
