// HeapTrimmer: trims on its interval, never with 0, and a trim hands back the pages of freed
// blocks that sit between live ones (what a server's arenas hold after a soak).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "mlxrt/server/heap_trimmer.h"

#if MLXRT_GLIBC_HEAP
#include <malloc.h>
#include <unistd.h>
#endif

namespace mlxrt::server {
namespace {

TEST(HeapTrimmer, TrimsOnItsInterval) {
  HeapTrimmer trimmer(0.02);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (trimmer.trims() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
#if MLXRT_GLIBC_HEAP
  EXPECT_GE(trimmer.trims(), 2u);
#else
  EXPECT_EQ(trimmer.trims(), 0u);
#endif
}

TEST(HeapTrimmer, ZeroNeverTrims) {
  HeapTrimmer trimmer(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(trimmer.trims(), 0u);
}

#if MLXRT_GLIBC_HEAP
/** This process' resident bytes (/proc/self/statm). */
size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

TEST(HeapTrimmer, HandsBackFreedBlocksBetweenLiveOnes) {
  constexpr size_t kBig = 1 << 20, kCount = 64;
  // A freed 8 MiB mapped block raises glibc's mmap threshold past kBig, as a step's freed
  // logits do: the 1 MiB blocks below then come from the arena, each pinned by a small live one.
  void* volatile large = std::malloc(8 << 20);  // volatile: the compiler may not drop the pair
  std::memset(large, 1, 8 << 20);
  std::free(large);
  std::vector<void*> big, small;
  big.reserve(kCount);  // no vector growth in between: its freed buffers would be reused below
  small.reserve(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    big.push_back(std::malloc(kBig));
    std::memset(big.back(), 1, kBig);  // resident
    small.push_back(std::malloc(4096));  // past malloc's per-thread caches: from the arena, after it
  }
  for (void* p : big) std::free(p);
  size_t before = resident_bytes();
  EXPECT_TRUE(HeapTrimmer::trim_now());
  size_t after = resident_bytes();
  for (void* p : small) std::free(p);
  EXPECT_GE(before, after + kCount * kBig / 2) << "resident before the trim " << before << ", after " << after;
}
#endif

}  // namespace
}  // namespace mlxrt::server
