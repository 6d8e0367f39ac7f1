// A CUDA launch on the CPU: fibers, barriers, shuffles. Why and what it checks: simt.h.
#include "simt.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <array>
#include <cstring>
#include <mutex>
#include <vector>

namespace mlxrt::cuda_emu {

namespace {

constexpr size_t kStackBytes = 256 * 1024;  // mapped lazily: only the pages a thread touches
constexpr unsigned kMaxThreads = 1024;

enum class State { runnable, at_block_barrier, at_warp_barrier, done };

struct Fiber {
  ucontext_t context;
  void* stack = nullptr;
  State state = State::runnable;
  unsigned mask = 0;  // at a warp barrier: the lanes it waits with
  mlxrt_emu_dim3 index{};
  unsigned warp = 0, lane = 0;
};

// The running launch: one at a time (launch() holds the mutex), all on the caller's thread.
struct Launch {
  KernelEntry entry = nullptr;
  void** params = nullptr;
  mlxrt_emu_api* api = nullptr;
  ucontext_t scheduler;
  std::vector<Fiber> fibers;
  Fiber* current = nullptr;
  std::vector<std::array<uint64_t, 32>> exchange;  // a slot per lane of each warp
  std::string error;
};

std::mutex launch_mutex;
Launch* running = nullptr;

std::string where(const Fiber& f) {
  const auto& b = running->api->block_idx;
  return "block (" + std::to_string(b.x) + ", " + std::to_string(b.y) + ", " + std::to_string(b.z) + ") thread (" +
         std::to_string(f.index.x) + ", " + std::to_string(f.index.y) + ", " + std::to_string(f.index.z) + ")";
}

// Back to the scheduler with the current fiber in `state`.
void yield(State state) {
  Fiber& f = *running->current;
  f.state = state;
  swapcontext(&f.context, &running->scheduler);
}

// The fiber records the bug and never runs again; the launch throws once the scheduler sees it.
[[noreturn]] void fail(const std::string& what) {
  Fiber& f = *running->current;
  if (running->error.empty()) running->error = what + " (" + where(f) + ")";
  f.state = State::done;
  swapcontext(&f.context, &running->scheduler);
  __builtin_unreachable();
}

void sync_threads() { yield(State::at_block_barrier); }

void wait_warp(unsigned mask) {
  Fiber& f = *running->current;
  if (!(mask >> f.lane & 1u)) fail("a warp-synchronous call whose mask leaves out the calling lane");
  f.mask = mask;
  yield(State::at_warp_barrier);
}

void sync_warp(unsigned mask) { wait_warp(mask); }

uint64_t shuffle(unsigned mask, uint64_t value, int arg, int mode, int width) {
  Fiber& f = *running->current;
  if (width < 1 || width > 32 || (width & (width - 1)) != 0) fail("a shuffle width that is not a power of 2 up to 32");
  auto& slots = running->exchange[f.warp];
  slots[f.lane] = value;
  wait_warp(mask);
  const int lane = static_cast<int>(f.lane), base = lane & ~(width - 1);
  int src = lane;
  switch (mode) {
    case MLXRT_EMU_SHFL_IDX: src = base + (arg & (width - 1)); break;
    case MLXRT_EMU_SHFL_XOR: src = lane ^ arg; break;
    case MLXRT_EMU_SHFL_DOWN: src = lane + arg; break;
    case MLXRT_EMU_SHFL_UP: src = lane - arg; break;
    default: fail("an unknown shuffle mode");
  }
  // Outside the caller's group of `width` lanes, a lane reads its own value (CUDA's rule).
  if (src < base || src >= base + width) src = lane;
  if (!(mask >> src & 1u)) fail("a shuffle reading lane " + std::to_string(src) + ", which is not in its mask");
  const uint64_t got = slots[static_cast<size_t>(src)];
  wait_warp(mask);  // nobody writes the slots again before every lane has read them
  return got;
}

void fiber_main() {
  running->entry(running->params);
  running->current->state = State::done;
  // Returning ends the fiber: uc_link resumes the scheduler.
}

void set_current(Fiber& f) {
  running->current = &f;
  running->api->thread_idx = f.index;
}

// Opens the barriers every thread of which has arrived; false when none could open.
bool release(std::vector<Fiber>& fibers, unsigned warps) {
  size_t alive = 0, at_block = 0;
  for (const auto& f : fibers) {
    if (f.state != State::done) ++alive;
    if (f.state == State::at_block_barrier) ++at_block;
  }
  if (alive > 0 && at_block == alive) {
    for (auto& f : fibers) f.state = State::runnable;
    return true;
  }
  bool opened = false;
  for (unsigned w = 0; w < warps; ++w) {
    const size_t first = static_cast<size_t>(w) * 32, last = std::min(first + 32, fibers.size());
    // Each waiting lane's mask must name lanes that wait with the same mask.
    for (size_t i = first; i < last; ++i) {
      auto& f = fibers[i];
      if (f.state != State::at_warp_barrier) continue;
      bool ready = true;
      for (size_t j = first; j < last && ready; ++j)
        if (f.mask >> (j - first) & 1u) ready = fibers[j].state == State::at_warp_barrier && fibers[j].mask == f.mask;
      // Lanes past the block's last thread do not exist: a mask naming them can never be met.
      if (last - first < 32 && (f.mask >> (last - first)) != 0) ready = false;
      if (!ready) continue;
      for (size_t j = first; j < last; ++j)
        if (f.mask >> (j - first) & 1u) fibers[j].state = State::runnable;
      opened = true;
    }
  }
  return opened;
}

std::string stuck(const std::vector<Fiber>& fibers) {
  size_t block = 0, warp = 0;
  const Fiber* example = nullptr;
  for (const auto& f : fibers) {
    if (f.state == State::at_block_barrier) ++block;
    if (f.state == State::at_warp_barrier) {
      ++warp;
      if (!example) example = &f;
    }
  }
  std::string s = "barriers that can never open: " + std::to_string(block) + " threads at __syncthreads, " +
                  std::to_string(warp) + " at a warp barrier";
  if (example) {
    char mask[16];
    std::snprintf(mask, sizeof mask, "%08x", example->mask);
    s += " (e.g. " + where(*example) + " with mask 0x" + mask + ", whose lanes exited or wait elsewhere)";
  }
  return s;
}

void run_block(Launch& l, unsigned threads, unsigned warps) {
  for (unsigned t = 0; t < threads; ++t) {
    auto& f = l.fibers[t];
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack;
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &l.scheduler;
    f.state = State::runnable;
    makecontext(&f.context, fiber_main, 0);
  }
  for (;;) {
    bool ran = false;
    for (unsigned t = 0; t < threads; ++t) {
      auto& f = l.fibers[t];
      if (f.state != State::runnable) continue;
      set_current(f);
      swapcontext(&l.scheduler, &f.context);
      ran = true;
      if (!l.error.empty()) return;
    }
    if (ran) continue;
    bool all_done = true;
    for (unsigned t = 0; t < threads; ++t) all_done = all_done && l.fibers[t].state == State::done;
    if (all_done) return;
    if (!release(l.fibers, warps)) {
      l.error = stuck(l.fibers);
      return;
    }
  }
}

}  // namespace

void launch(KernelEntry entry, mlxrt_emu_api& api, Dim3 grid, Dim3 block, void** params) {
  const unsigned threads = block.count();
  if (threads == 0 || threads > kMaxThreads)
    throw SimtError("a block of " + std::to_string(threads) + " threads (CUDA allows 1 to 1024)");
  if (grid.count() == 0) return;
  std::lock_guard lock(launch_mutex);
  Launch l;
  l.entry = entry;
  l.params = params;
  l.api = &api;
  const unsigned warps = (threads + 31) / 32;
  l.exchange.resize(warps);
  l.fibers.resize(threads);
  api.sync_threads = sync_threads;
  api.sync_warp = sync_warp;
  api.shuffle = shuffle;
  api.block_dim = {block.x, block.y, block.z};
  api.grid_dim = {grid.x, grid.y, grid.z};
  for (unsigned t = 0; t < threads; ++t) {
    auto& f = l.fibers[t];
    f.index = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
    f.warp = t / 32;
    f.lane = t % 32;
    f.stack = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (f.stack == MAP_FAILED) {
      f.stack = nullptr;
      l.error = "no memory for the threads' stacks";
      break;
    }
  }
  running = &l;
  for (unsigned z = 0; z < grid.z && l.error.empty(); ++z)
    for (unsigned y = 0; y < grid.y && l.error.empty(); ++y)
      for (unsigned x = 0; x < grid.x && l.error.empty(); ++x) {
        api.block_idx = {x, y, z};
        run_block(l, threads, warps);
      }
  running = nullptr;
  for (auto& f : l.fibers)
    if (f.stack) munmap(f.stack, kStackBytes);
  if (!l.error.empty()) throw SimtError(l.error);
}

}  // namespace mlxrt::cuda_emu
