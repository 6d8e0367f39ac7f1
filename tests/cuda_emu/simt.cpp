// A CUDA launch on the CPU: fibers, barriers, shuffles. Why and what it checks: simt.h.
#include "simt.h"

#include <sched.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace mlxrt::cuda_emu {

namespace {

constexpr size_t kStackBytes = 256 * 1024;  // mapped lazily: only the pages a thread touches
constexpr unsigned kMaxThreads = 1024;
constexpr unsigned kMaxResidentBlocks = 512;
// How long a spin-wait may last: 30 s, or MLXRT_EMU_SPIN_LIMIT_S (the tests of the error shorten it).
std::chrono::duration<double> spin_limit() {
  const char* v = std::getenv("MLXRT_EMU_SPIN_LIMIT_S");
  return std::chrono::duration<double>(v && *v ? std::atof(v) : 30.0);
}

enum class State { runnable, at_block_barrier, at_warp_barrier, done };

struct Fiber {
  ucontext_t context;
  void* stack = nullptr;
  State state = State::runnable;
  unsigned mask = 0;  // at a warp barrier: the lanes it waits with
  unsigned site = 0;  // at __syncthreads: the source line it was called from
  mlxrt_emu_dim3 index{};
  unsigned warp = 0, lane = 0;
};

// What all the blocks of one launch share.
struct Grid {
  KernelEntry entry = nullptr;
  void** params = nullptr;
  std::atomic<bool> failed{false};  // a block failed: the others stop at their next pause
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::chrono::duration<double> limit = spin_limit();
};

// One system thread's blocks, one at a time: its fibers, the running one, its table.
struct BlockRunner {
  Grid* grid = nullptr;
  mlxrt_emu_api api{};
  ucontext_t scheduler;
  std::vector<Fiber> fibers;
  Fiber* current = nullptr;
  std::vector<std::array<uint64_t, 32>> exchange;  // a slot per lane of each warp
  std::string error;

  BlockRunner() = default;
  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;
  ~BlockRunner() {
    for (auto& f : fibers)
      if (f.stack) munmap(f.stack, kStackBytes);
  }
};

// The runtime's entry points are C callbacks without a context argument: each system thread's
// runner is found here (one per thread that runs blocks, set for the length of its launch).
thread_local BlockRunner* running = nullptr;

std::string where(const Fiber& f) {
  const auto& b = running->api.block_idx;
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

void sync_threads(unsigned site) {
  running->current->site = site;
  yield(State::at_block_barrier);
}

void pause() {
  if (running->grid->failed.load()) fail("stopped: another block failed");
  if (std::chrono::steady_clock::now() - running->grid->start > running->grid->limit)
    fail("a wait that never ended (a spin-wait on something no thread will do)");
  yield(State::runnable);
}

void trap() { fail("__trap(): the kernel stopped itself"); }

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
  running->grid->entry(running->grid->params);
  running->current->state = State::done;
  // Returning ends the fiber: uc_link resumes the scheduler.
}

// Opens the barriers every thread of which has arrived; false when none could open (or, with
// running->error set, when the block's threads wait at different __syncthreads).
bool release(std::vector<Fiber>& fibers, size_t threads, unsigned warps) {
  size_t alive = 0, at_block = 0;
  for (size_t i = 0; i < threads; ++i) {
    if (fibers[i].state != State::done) ++alive;
    if (fibers[i].state == State::at_block_barrier) ++at_block;
  }
  if (alive > 0 && at_block == alive) {
    // __syncthreads is an aligned barrier: every thread must reach the same one. A GPU hangs (or
    // worse) where threads wait at different calls, so that is the kernel's bug here too.
    const Fiber* first_waiting = nullptr;
    for (size_t i = 0; i < threads; ++i) {
      const auto& f = fibers[i];
      if (f.state != State::at_block_barrier) continue;
      if (!first_waiting) first_waiting = &f;
      if (f.site != first_waiting->site) {
        running->error = "__syncthreads reached from different calls: line " + std::to_string(first_waiting->site) +
                         " (" + where(*first_waiting) + ") and line " + std::to_string(f.site) + " (" + where(f) + ")";
        return false;
      }
    }
    for (size_t i = 0; i < threads; ++i)
      if (fibers[i].state == State::at_block_barrier) fibers[i].state = State::runnable;
    return true;
  }
  bool opened = false;
  for (unsigned w = 0; w < warps; ++w) {
    const size_t first = static_cast<size_t>(w) * 32, last = std::min(first + 32, threads);
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

std::string stuck(const std::vector<Fiber>& fibers, size_t threads) {
  size_t block = 0, warp = 0;
  const Fiber* example = nullptr;
  for (size_t i = 0; i < threads; ++i) {
    const auto& f = fibers[i];
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

// Stacks for `threads` fibers (kept for the runner's later blocks).
void prepare(BlockRunner& r, Dim3 block) {
  const unsigned threads = block.count();
  r.exchange.resize((threads + 31) / 32);
  r.fibers.resize(threads);
  for (unsigned t = 0; t < threads; ++t) {
    auto& f = r.fibers[t];
    f.index = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
    f.warp = t / 32;
    f.lane = t % 32;
    if (f.stack) continue;
    void* stack = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stack == MAP_FAILED) throw SimtError("no memory for the threads' stacks");
    f.stack = stack;
  }
}

// Runs one block on the calling thread; false (r.error set) when it failed.
bool run_block(BlockRunner& r, unsigned threads) {
  const unsigned warps = (threads + 31) / 32;
  for (unsigned t = 0; t < threads; ++t) {
    auto& f = r.fibers[t];
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack;
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &r.scheduler;
    f.state = State::runnable;
    makecontext(&f.context, fiber_main, 0);
  }
  for (;;) {
    bool ran = false;
    for (unsigned t = 0; t < threads; ++t) {
      auto& f = r.fibers[t];
      if (f.state != State::runnable) continue;
      r.current = &f;
      r.api.thread_idx = f.index;
      swapcontext(&r.scheduler, &f.context);
      ran = true;
      if (!r.error.empty()) return false;
    }
    if (ran) {
      // Only threads pausing in a spin-wait ran? Then let the other blocks' system threads work.
      sched_yield();
      continue;
    }
    bool all_done = true;
    for (unsigned t = 0; t < threads; ++t) all_done = all_done && r.fibers[t].state == State::done;
    if (all_done) return true;
    if (!release(r.fibers, threads, warps)) {
      if (r.error.empty()) r.error = stuck(r.fibers, threads);
      return false;
    }
  }
}

void bind(BlockRunner& r, Grid& g, mlxrt_emu_slot_fn slot, Dim3 grid, Dim3 block) {
  r.grid = &g;
  r.api.sync_threads = sync_threads;
  r.api.sync_warp = sync_warp;
  r.api.shuffle = shuffle;
  r.api.pause = pause;
  r.api.trap = trap;
  r.api.block_dim = {block.x, block.y, block.z};
  r.api.grid_dim = {grid.x, grid.y, grid.z};
  *slot() = &r.api;
  running = &r;
}

void unbind(mlxrt_emu_slot_fn slot) {
  *slot() = nullptr;
  running = nullptr;
}

mlxrt_emu_dim3 block_index(unsigned i, Dim3 grid) { return {i % grid.x, (i / grid.x) % grid.y, i / (grid.x * grid.y)}; }

}  // namespace

void launch(KernelEntry entry, mlxrt_emu_slot_fn slot, Dim3 grid, Dim3 block, void** params, bool resident) {
  const unsigned threads = block.count();
  if (threads == 0 || threads > kMaxThreads)
    throw SimtError("a block of " + std::to_string(threads) + " threads (CUDA allows 1 to 1024)");
  const unsigned blocks = grid.count();
  if (blocks == 0) return;
  if (resident && blocks > kMaxResidentBlocks)
    throw SimtError("a grid of " + std::to_string(blocks) + " blocks resident together (at most " +
                    std::to_string(kMaxResidentBlocks) + " here)");
  Grid g;
  g.entry = entry;
  g.params = params;
  if (!resident) {
    // One block after another on this thread.
    BlockRunner r;
    prepare(r, block);
    bind(r, g, slot, grid, block);
    for (unsigned i = 0; i < blocks; ++i) {
      r.api.block_idx = block_index(i, grid);
      if (!run_block(r, threads)) break;
    }
    unbind(slot);
    if (!r.error.empty()) throw SimtError(r.error);
    return;
  }
  // Every block on a system thread of its own, all at once: blocks may wait on each other.
  std::vector<std::unique_ptr<BlockRunner>> runners;
  for (unsigned i = 0; i < blocks; ++i) {
    runners.push_back(std::make_unique<BlockRunner>());
    prepare(*runners.back(), block);
  }
  std::vector<std::thread> workers;
  for (unsigned i = 0; i < blocks; ++i)
    workers.emplace_back([&, i] {
      auto& r = *runners[i];
      bind(r, g, slot, grid, block);
      r.api.block_idx = block_index(i, grid);
      if (!run_block(r, threads)) g.failed = true;
      unbind(slot);
    });
  for (auto& w : workers) w.join();
  for (const auto& r : runners)
    if (!r->error.empty() && r->error.find("stopped: another block failed") == std::string::npos)
      throw SimtError(r->error);
  for (const auto& r : runners)
    if (!r->error.empty()) throw SimtError(r->error);
}

}  // namespace mlxrt::cuda_emu
